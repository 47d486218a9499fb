"""`perfdiff startup` on the real logs of shared/data/real/startup_logs, with values read off
them by hand, a golden table, and the shapes of the hand-built reference tables."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from golden import check_golden
from startup_helpers import GOLDEN, REAL, REFERENCE, lines, startup_main

from perfdiff.startup import REFERENCE_ROWS, read_startup_log


# ---------------------------------------------------------------------------------------------
# Real logs: values read off each log by hand (comments quote the lines)

EXPECTED: dict[str, dict[str, object]] = {
    "sglang-0.4.1-era_tp1_llama3.1-8b_docs-notebook": {
        # 19:35:15 Load weight begin, 19:35:20 Load weight end / Memory pool end
        "model_loading": (5, "derived"), "kv_cache_init": (0, "derived"),
        "graph_capturing": 6.57,  # Capture cuda graph end. Time elapsed: 6.57 s
        "total_time": (11.57, "derived"),
        "actual_total_time": 38,  # 19:34:55 server_args -> 19:35:33 fired up and ready to roll
        "unaccounted": 26.43,
        "_status": "complete", "_engine": "SGLang", "_tp": 1, "_ranks": ("TP0",), "_launches": 1,
        "_ready_line": 27},
    "sglang-0.4.4_tp1_gemma3_excerpt_pr4826": {
        "kv_cache_init": (1, "derived"),  # Load weight end 21:33:30, Memory pool end 21:33:31
        # no total_time: KV cache init alone is not a total
        "actual_total_time": 1,  # last SGLang record 21:33:31 (flashinfer lines have no header)
        "_status": "incomplete", "_engine": "SGLang", "_launches": 1},
    "sglang-0.5.x_dp2-tp_npu-graph_excerpt_pr17157": {
        "kv_cache_init": (0, "derived", 2),  # both ranks 13:56:49; no total from it alone
        "actual_total_time": 1,  # 13:56:49 -> 13:56:50
        "_status": "incomplete", "_engine": "SGLang", "_ranks": ("DP0 TP0", "DP1 TP1")},
    "vllm-0.10.1_v1_tp1_enginecore0_compile-cache-hit_rocm_excerpt_strixhalo5": {
        "load_weights": 1.27, "model_loading": 2.195456, "model_init": (2.195456 - 1.27, "derived"),
        "dynamo_transform_time": 3.70, "graph_compile_cached": 5.92, "torch.compile": 3.70,
        "total_time": 2.195456,  # partial: no init_engine
        "actual_total_time": 16,  # 21:47:44 -> 21:48:00, no readiness marker
        "_status": "incomplete", "_engine": "vLLM V1", "_cache": "hit",
        "_ranks": ("EngineCore_0 pid=3856547",)},
    "vllm-0.10.2-0.11dev_v1_tp4ep_per-rank-graph-capture_excerpt_issue25848": {
        "graph_capturing": 38,  # only Worker_TP3_EP3 printed it
        "actual_total_time": 2, "_status": "incomplete", "_engine": "vLLM V1", "_nranks": 4},
    "vllm-0.23.1rc1dev_v1_tp4ep_compile-miss-aot-fallback_glm52": {
        "load_weights": 364.66, "model_loading": 389.427126, "model_init": (389.427126 - 364.66, "derived"),
        "dynamo_transform_time": 7.06 + 20.79,  # two Dynamo lines: AOT load failure, recompile
        "graph_compile_general_shape": 8.37,  # (1, 1) 8.27 s and (1, 8192) 8.37 s, same window
        "torch.compile": 52.05, "profile_run": 5.85, "graph_capturing": 3, "init_engine": 92.87,
        "total_time": 389.427126 + 92.87,
        "actual_total_time": 696,  # 19:52:39 banner -> 20:04:15 Starting vLLM server
        "unaccounted": 696 - 389.427126 - 92.87,
        "_status": "complete", "_engine": "vLLM V1", "_version": "0.23.1rc1.dev1201+gd08eebad1", "_tp": 4,
        "_nranks": 4, "_cache": "miss", "_launches": 1, "_ready_line": 204},
    "vllm-0.5.x_v0_tp4_mp-workers_excerpt_pr6234": {
        "actual_total_time": 15,  # 23:41:16 -> 23:41:31; memory-only weight lines, no phases
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 4},
    "vllm-0.6.1dev_v0_tp_mp-workers_torchserve-wrapped_excerpt_serve3315": {
        "graph_capturing": (32, 2),  # driver and worker 2716901 each print 32 secs
        "actual_total_time": 42,  # 22:25:38 -> 22:26:20 (TorchServe's own stamps ignored)
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 2},
    "vllm-0.6.5dev_v0_tp2_memprof-results-duration_excerpt_pr10909": {
        "kv_cache_profiling": (72.36, 2),  # driver 72.36, worker 71.88
        "actual_total_time": 78,  # 02:09:14 -> 02:10:32
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 2},
    "vllm-0.8.x_v0_torch-compile_k8s-tui-borders_excerpt_gaie550": {
        "kv_cache_profiling": 34.26, "actual_total_time": 2, "torch.compile": 28.77,
        "_status": "incomplete", "_engine": "vLLM V0"},
    "vllm-0.9.0_v1_tp1_compile-miss-general-shape_excerpt_runai67": {
        "graph_compile_general_shape": 36.76, "torch.compile": 45.81, "graph_capturing": 37,
        "init_engine": 90.84, "total_time": 90.84,  # partial: no model_loading in the excerpt
        "actual_total_time": 45,  # 11:03:11 -> 11:03:56 Starting vLLM API server
        "_status": "complete", "_engine": "vLLM V1", "_cache": "miss", "_ready_line": 11},
    "vllm-ascend-dev_v1_npu_multi-launch-in-one-file_qwen2.5-14b": {
        "load_weights": 19.20, "model_loading": 35.42,  # "Model runner load_model total time"
        "model_init": (35.42 - 19.20, "derived"), "dynamo_transform_time": 3.60,
        "graph_compile_general_shape": 45.04, "torch.compile": 49.49, "profile_run": 1.58,
        "graph_capturing": 147, "init_engine": 380.89, "total_time": 35.42 + 380.89,
        "actual_total_time": 490,  # launch 2: 08:10:19 banner -> 08:18:29 Starting vLLM server
        "unaccounted": 490 - 35.42 - 380.89,
        "_status": "complete", "_engine": "vLLM V1", "_version": "dev", "_launches": 2, "_launch": 2,
        "_cache": "miss", "_ready_line": 234, "_ranks": ("EngineCore pid=577444",)},
}


def _real_logs() -> list[Path]:
    if not REAL.is_dir():
        pytest.skip(f"real startup logs not found at {REAL}")
    return sorted(REAL.glob("*.log"))


@pytest.mark.real
def test_every_real_log_is_covered():
    assert sorted(p.stem for p in _real_logs()) == sorted(EXPECTED)


@pytest.mark.real
@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_real_log_values(stem):
    path = REAL / f"{stem}.log"
    if not path.exists():
        pytest.skip(f"real startup log not found: {path}")
    c = read_startup_log(path)
    want = EXPECTED[stem]
    rows = {k: v for k, v in want.items() if not k.startswith("_")}
    assert set(c.phases) == set(rows), f"rows differ: {sorted(c.phases)}"
    for row, spec in rows.items():
        v = c.phases[row]
        expect, *flags = spec if isinstance(spec, tuple) else (spec,)
        assert v.value_s == pytest.approx(expect, abs=1e-9), row
        assert bool(v.derived) == ("derived" in flags), row
        n_ranks = next((f for f in flags if isinstance(f, int)), 1)
        if row not in ("total_time", "actual_total_time", "unaccounted"):
            assert v.n_ranks == n_ranks, row
    assert c.status == want["_status"] and c.engine == want["_engine"]
    for key, attr in (("_tp", "tp"), ("_ranks", "ranks_seen"), ("_launches", "n_launches"),
                      ("_launch", "launch"), ("_cache", "compile_cache"), ("_version", "version"),
                      ("_ready_line", "ready_line")):
        if key in want:
            assert getattr(c, attr) == want[key], key
    if "_nranks" in want:
        assert len(c.ranks_seen) == want["_nranks"]


@pytest.mark.real
def test_golden_markdown_csv_and_json_for_the_real_logs(tmp_path):
    logs = [str(p) for p in _real_logs()]
    md, csv_path, js = tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "t.json"
    assert startup_main(["startup", *logs, "-o", str(md), "--csv", str(csv_path), "--json", str(js)]) == 0
    check_golden(GOLDEN / "real_logs.md", md.read_text(encoding="utf-8"))
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
    assert len(rows) == len(logs) * len(json.loads(js.read_text())["rows"])
    glm = {r["phase"]: r for r in rows if r["log"].endswith("glm52")}
    assert float(glm["model_loading"]["value_s"]) == 389.427126
    assert glm["model_init"]["derived"] == "1" and glm["tokenizer_init"]["value_s"] == ""
    data = json.loads(js.read_text())
    assert data["format"] == "perfdiff.startup" and data["version"] == 1
    ascend = next(c for c in data["columns"] if c["name"].startswith("vllm-ascend"))
    assert ascend["n_launches"] == 2 and ascend["phases"]["graph_capturing"]["value_s"] == 147


# ---------------------------------------------------------------------------------------------
# The hand-built reference tables: same shapes from logs written with the same format strings


def _reference(path: Path) -> dict[str, dict[str, float | None]]:
    rows = [ln.strip().strip("|").split("|") for ln in path.read_text().splitlines()
            if ln.startswith("| ")]
    names = [c.strip() for c in rows[0][1:]]
    table = {n: {} for n in names}
    for r in rows[1:]:
        for n, cell in zip(names, r[1:], strict=True):
            cell = cell.strip()
            table[n][r[0].strip()] = None if cell == "--" else float(cell)
    return table


def _fork_log(v: dict[str, float | None]) -> str:
    """A log in the internal fork's format (vLLM V1 offline engine + benchmark harness)."""
    return lines(
        "INFO 05-01 10:00:00 [__init__.py:1] Automatically detected platform cuda.",
        f"INFO 05-01 10:00:05 [default_loader.py:262] Loading weights took {v['load_weights']} seconds",
        f"INFO 05-01 10:00:05 [base_loader.py:1] Initializing Model took {v['model_init']} seconds",
        f"INFO 05-01 10:00:05 [gpu_model_runner.py:1892] Model loading took 24.35 GiB and {v['model_loading']} seconds",
        f"INFO 05-01 10:00:16 [backends.py:530] Dynamo bytecode transform time: {v['dynamo_transform_time']} s",
        "INFO 05-01 10:00:26 [backends.py:161] Directly load the compiled graph(s) for dynamic "
        f"shape from the cache, took {v['graph_compile_cached']} s",
        f"INFO 05-01 10:00:27 [monitor.py:34] torch.compile takes {v['torch.compile']} s in total",
        f"DEBUG 05-01 10:00:30 [v1/worker/gpu_worker.py:1] Memory profiling takes {v['kv_cache_profiling']} seconds",
        f"INFO 05-01 10:00:31 [kv_cache.py:1] Initializing KV cache took {v['kv_cache_init']} seconds",
        f"INFO 05-01 10:00:33 [gpu_model_runner.py:2] Graph capturing finished in {v['graph_capturing']} secs, took 0.50 GiB",
        "INFO 05-01 10:00:33 [core.py:193] init engine (profile, create kv cache, warmup model) "
        f"took {v['init_engine']} seconds",
        f"INFO 05-01 10:00:34 [llm.py:1] Init Tokenizer took {v['tokenizer_init']} seconds",
        f"initialize_engine took {v['actual_total_time']} seconds")


@pytest.mark.parametrize("name", ["startup-phases-cuda-graph-sizes.txt",
                                  "startup-phases-gpu-memory-utilization.txt"])
def test_reference_table_shapes_are_reproduced(name, tmp_path):
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference table not found: {path}")
    ref = _reference(path)
    files = []
    for col_name, values in ref.items():
        f = tmp_path / col_name
        f.write_text(_fork_log(values))
        files.append(str(f))
    out = tmp_path / "table.json"
    assert startup_main(["startup", *files, "--json", str(out), "-o", str(tmp_path / "t.md"),
                  "--phase-regex", r"kv_cache_init=Initializing KV cache took (\d+\.\d+) seconds"]) == 0
    data = json.loads(out.read_text())
    assert data["rows"] == list(REFERENCE_ROWS) + ["unaccounted"]  # the only extra row
    for c, (col_name, values) in zip(data["columns"], ref.items(), strict=True):
        assert c["name"] == Path(col_name).stem and c["status"] == "complete"
        for row in REFERENCE_ROWS:
            want, got = values[row], c["phases"].get(row)
            if want is None:
                assert got is None, (col_name, row)
                continue
            assert round(got["value_s"], 2) == pytest.approx(want), (col_name, row)
            assert got["derived"] is None, (col_name, row)
        assert c["phases"]["unaccounted"]["value_s"] == pytest.approx(
            values["actual_total_time"] - values["total_time"], abs=0.006)


# ---------------------------------------------------------------------------------------------
