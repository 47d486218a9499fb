"""Framework adapters in the agent: stand-ins laid out like vLLM V1, SGLang and PyTorch
(tests/fakes/frameworks) run under the agent's bootstrap, engine cores and schedulers in
spawned child processes; their marks files must hold one cycle per engine step, the phases
as CPU ranges and the load of each step."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfdiff.collectors.base import RowBuffer
from perfdiff.collectors.cupti import reader as rd
from perfdiff.collectors.markers import parse_marks

FRAMEWORKS = Path(__file__).resolve().parent / "fakes" / "frameworks"
PY = sys.executable


def run_under_agent(tmp_path: Path, argv: list[str], **env_extra: str) -> tuple[dict[str, Any], str]:
    """Run `argv` as `collect -- CMD` would start it (the agent bootstrap first on PYTHONPATH, a
    marks directory announced), then parse every marks file; (tables as columns, stderr)."""
    src = rd.AgentTraceSource.announce(lambda m: None)
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "NVTX_", "FAKE_", "RANK"))}
    env.update(src.env(env), PERFDIFF_MARKER_DIR=str(marks), **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(FRAMEWORKS)])
    try:
        proc = subprocess.run([PY, *argv], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        src.close()
    assert proc.returncode == 0, proc.stderr
    out = RowBuffer()
    bad = 0
    for f in sorted(marks.glob("*.marks")):
        bad += parse_marks(f.read_bytes(), out)[1]
    assert bad == 0
    return out.take(), proc.stderr


def phases(tables: dict[str, Any]) -> dict[str, int]:
    a = tables.get("activity", {"function": []})
    return {f: a["function"].count(f) for f in set(a["function"])}


def loads(tables: dict[str, Any], metric: str) -> list[float]:
    s = tables.get("samples", {"metric": [], "value": []})
    return [v for m, v in zip(s["metric"], s["value"], strict=True) if m == metric]


def agent_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("perfdiff agent:")]


# 6 requests, batch 4, prompt 32, 3 outputs: steps = prefill 4 | decode ×2 … (counted by the fake)
VLLM_ENV = {"FAKE_PROMPT": "32", "FAKE_OUTPUT": "3", "FAKE_BATCH": "4", "FAKE_EXEC_MS": "0.2"}


def expected_vllm_steps(requests: int = 6, batch: int = 4, output: int = 3) -> list[tuple[int, int, int, int]]:
    """The fake scheduler's steps as (requests, tokens, prefill, decode)."""
    waiting, running, steps = list(range(requests)), {}, []
    while waiting or running:
        cached = list(running)
        new = []
        while waiting and len(running) < batch:
            r = waiting.pop(0)
            running[r] = output
            new.append(r)
        steps.append((len(cached) + len(new), len(cached) + 32 * len(new), 32 * len(new), len(cached)))
        for r in cached + new:
            running[r] -= 1
            if running[r] <= 0:
                del running[r]
    return steps


# vLLM layouts of tests/fakes/frameworks/vllm (its docstring maps them to the releases they stand for)
@pytest.mark.parametrize("version", ["0.11.2", "0.8.5", "0.6.4"])
def test_vllm_engine_steps_are_cycles_with_phases_and_load(tmp_path: Path, version: str) -> None:
    # two idle steps at the end (nothing scheduled, as an idle data-parallel rank): no cycles
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"], FAKE_VLLM_VERSION=version,
                                  FAKE_IDLE_STEPS="2", **VLLM_ENV)
    expected = expected_vllm_steps()
    n = len(expected)
    assert f"engine steps {n}" in err and agent_warnings(err) == [], err
    m = tables["markers"]
    assert m["name"] == ["EngineCore.step"] * n and set(m["source"]) == {"perfdiff"}
    assert len(set(m["tid"])) == 1  # the engine core's thread, in the child process
    p = phases(tables)
    api = "Detokenizer.step" if version == "0.6.4" else "OutputProcessor.process_outputs"
    want = {"Scheduler.schedule": n, "Scheduler.update_from_output": n, "Executor.execute_model": n, api: n}
    if version == "0.11.2":
        want |= {"Executor.execute_model (wait)": n, "Executor.sample_tokens": n}
    assert p == want
    # the load of every step, from the fake's SchedulerOutput, in step order
    order = sorted(range(n), key=lambda i: m["start_ns"][i])
    got = [tuple(int(loads(tables, k)[i]) for k in ("step_requests", "step_tokens", "step_prefill_tokens",
                                                    "step_decode_tokens")) for i in order]
    assert got == expected
    # phases lie inside their step; the engine's phases never on the API server's thread
    a = tables["activity"]
    cycles = sorted(zip(m["start_ns"], m["end_ns"], strict=True))
    for f, s, e, tid in zip(a["function"], a["start_ns"], a["end_ns"], a["tid"], strict=True):
        if f != api:
            assert tid == m["tid"][0] and any(cs <= s and e <= ce for cs, ce in cycles), f
        else:
            assert tid != m["tid"][0]
    assert all(0 <= b <= e - s for b, s, e in zip(a["busy_ns"], a["start_ns"], a["end_ns"], strict=True))


@pytest.mark.parametrize("version", ["0.11.2", "0.8.5"])
def test_vllm_data_parallel_rank_other_than_zero_writes_phases_only(tmp_path: Path, version: str) -> None:
    """Data-parallel engines step at once: only rank 0's steps are cycles, its rank read from
    the engine's config (0.9 on) or, before, from its executor's."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"], FAKE_VLLM_VERSION=version,
                                  FAKE_DP_RANK="1", **VLLM_ENV)
    assert agent_warnings(err) == [], err
    assert "markers" not in tables and "samples" not in tables
    assert phases(tables)["Scheduler.schedule"] == len(expected_vllm_steps())


def test_vllm_batch_queue_steps(tmp_path: Path) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"], FAKE_BATCH_QUEUE="2",
                                  **VLLM_ENV)
    steps = int(err.split("engine steps ")[1].split()[0])
    assert tables["markers"]["name"] == ["EngineCore.step_with_batch_queue"] * steps
    p = phases(tables)
    assert p["Executor.sample_tokens (wait)"] == p["Scheduler.schedule"] == p["Scheduler.update_from_output"] < steps


@pytest.mark.parametrize("version", ["0.11.2", "0.6.4"])
def test_unknown_vllm_version_runs_unwrapped_with_one_warning(tmp_path: Path, version: str) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"], FAKE_VLLM_RENAME="1",
                                  FAKE_VLLM_VERSION=version, **VLLM_ENV)
    warnings = agent_warnings(err)
    assert len(warnings) == 1 and "EngineCore.step" in warnings[0] and "vllm.v1.engine.core" in warnings[0], err
    assert tables == {}  # the whole process is left unwrapped, the output processor too


SGLANG_ENV = {"FAKE_REQUESTS": "6", "FAKE_BATCH": "4", "FAKE_OUTPUT": "3", "FAKE_EXEC_MS": "0.2"}


# SGLang layouts of tests/fakes/frameworks/sglang (its docstring maps them to the releases they stand for)
@pytest.mark.parametrize(("version", "overlap"), [("0.5.23", ""), ("0.5.23", "1"), ("0.5.13", ""), ("0.4.6", "")])
def test_sglang_iterations_are_cycles(tmp_path: Path, version: str, overlap: str) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_SGLANG_VERSION=version,
                                  FAKE_SGLANG_OVERLAP=overlap, **SGLANG_ENV)
    assert agent_warnings(err) == [], err
    # prefill 4 | decode ×3 | prefill 2 (the batch has room again) … as the fake schedules
    p = phases(tables)
    runs = p["Scheduler.run_batch"]
    assert runs >= 6 and p["Scheduler.process_batch_result"] == runs
    n = len(tables["markers"]["name"])
    assert set(tables["markers"]["name"]) == {"Scheduler.iteration"}
    # overlap: the last batch's result is processed in an iteration of its own
    assert n == runs + (1 if overlap else 0)
    assert p["TokenizerManager._handle_batch_output"] == runs
    assert p["DetokenizerManager.handle_batch_token_id_out"] == runs
    assert p["Scheduler.recv_requests"] >= n and p["Scheduler.get_next_batch_to_run"] >= n
    prefill = loads(tables, "step_prefill_tokens")
    decode = loads(tables, "step_decode_tokens")
    assert sum(prefill) == 6 * 32 and sorted(set(prefill)) == [0, 64, 128]
    assert sum(decode) == sum(loads(tables, "step_tokens")) - 6 * 32


def test_sglang_mixed_batches_split_prefill_and_decode(tmp_path: Path) -> None:
    """A prefill mixed with the running decodes (chunked prefill's MIXED mode): its tokens
    count one per decoding request, and the load says which are which."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_MIXED="1",
                                  **SGLANG_ENV | {"FAKE_REQUESTS": "7", "FAKE_BATCH": "3"})
    assert agent_warnings(err) == [], err
    rows = list(zip(*(loads(tables, k) for k in ("step_requests", "step_tokens", "step_prefill_tokens",
                                                  "step_decode_tokens")), strict=True))
    assert len(rows) == len(tables["markers"]["name"])
    assert all(t == pf + d for _, t, pf, d in rows)
    mixed = [r for r in rows if r[2] > 0 and r[3] > 0]
    assert mixed and all(pf % 32 == 0 and d == req - pf // 32 for req, _, pf, d in mixed)
    assert sum(r[2] for r in rows) == 7 * 32


@pytest.mark.parametrize("version", ["0.5.23", "0.5.13", "0.4.6"])
def test_sglang_rank_other_than_zero_writes_phases_only(tmp_path: Path, version: str) -> None:
    """Tensor-parallel ranks step together: only rank 0's iterations are cycles, wherever the
    version keeps the rank (the scheduler, its ``ps``, or runtime_context.get_parallel())."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_SGLANG_VERSION=version,
                                  FAKE_TP_RANK="1", **SGLANG_ENV)
    assert agent_warnings(err) == [], err
    assert "markers" not in tables and "samples" not in tables
    assert phases(tables)["Scheduler.run_batch"] >= 6


def test_sglang_before_batch_output_methods_keeps_the_scheduler(tmp_path: Path) -> None:
    """Versions before TokenizerManager._handle_batch_output (0.4.1) and
    DetokenizerManager.handle_batch_token_id_out (0.4.3): one warning each, and the scheduler
    in every process stays wrapped."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_SGLANG_VERSION="0.4.0",
                                  **SGLANG_ENV)
    warnings = agent_warnings(err)
    assert len(warnings) == 2 and "TokenizerManager._handle_batch_output" in warnings[0] + warnings[1], err
    assert "DetokenizerManager.handle_batch_token_id_out" in warnings[0] + warnings[1]
    p = phases(tables)
    assert "TokenizerManager._handle_batch_output" not in p
    assert len(tables["markers"]["name"]) == p["Scheduler.run_batch"] >= 6


@pytest.mark.parametrize("version", ["0.5.23", "0.4.6"])
def test_unknown_sglang_version_one_warning(tmp_path: Path, version: str) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_SGLANG_RENAME="1",
                                  FAKE_SGLANG_VERSION=version, FAKE_REQUESTS="2", FAKE_EXEC_MS="0.1", FAKE_OUTPUT="2")
    warnings = agent_warnings(err)
    assert len(warnings) == 1 and "Scheduler.run_batch" in warnings[0], err
    assert "markers" not in tables and "Scheduler.recv_requests" not in phases(tables)


def _real_torch() -> str | None:
    """Why the real PyTorch cannot run here (None when it can)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([PY, "-c", "import torch"], capture_output=True, text=True, env=env)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["import torch failed"])[-1]


@pytest.mark.parametrize("profile", [False, True])
def test_pytorch_optimizer_steps_end_cycles(tmp_path: Path, profile: bool) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "train_torch.py"), "12", *(["p"] if profile else [])])
    assert agent_warnings(err) == [], err
    m = tables["markers"]
    # the first boundary only begins a cycle
    assert m["name"] == ["profiler.step" if profile else "Optimizer.step"] * 11
    assert phases(tables) == {"Optimizer.step": 12}
    assert "samples" not in tables  # no load in training


def test_pytorch_without_step_hooks_one_warning(tmp_path: Path) -> None:
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "train_torch.py"), "4"], FAKE_TORCH_OLD="1")
    warnings = agent_warnings(err)
    assert len(warnings) == 1 and "register_optimizer_step_pre_hook" in warnings[0], err
    assert tables == {}


def test_real_pytorch_optimizer(tmp_path: Path) -> None:
    why = _real_torch()
    if why is not None:
        pytest.skip(f"PyTorch is not installed here (not in the test extra): {why}")
    script = tmp_path / "train.py"
    script.write_text("import torch\nw = torch.nn.Parameter(torch.zeros(4))\nopt = torch.optim.SGD([w], lr=0.1)\n"
                      "for _ in range(5):\n    (w.sum() - 1).backward()\n    opt.step()\n    opt.zero_grad()\n")
    src = rd.AgentTraceSource.announce(lambda m: None)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "NVTX_", "RANK"))}
    env.update(src.env(env), PERFDIFF_MARKER_DIR=str(marks))
    try:
        r = subprocess.run([PY, str(script)], env=env, capture_output=True, text=True, timeout=300)
    finally:
        src.close()
    assert r.returncode == 0 and agent_warnings(r.stderr) == [], r.stderr
    out = RowBuffer()
    for f in marks.glob("*.marks"):
        parse_marks(f.read_bytes(), out)
    tables = out.take()
    assert tables["markers"]["name"] == ["Optimizer.step"] * 4 and phases(tables) == {"Optimizer.step": 5}


def other_python() -> str | None:
    """A Python other than this one (3.10 or later), where perfdiff is not installed."""
    import glob
    import shutil

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for v in ("3.13", "3.12", "3.10"):
        for found in [*glob.glob(f"/root/.pyenv/versions/{v}*/bin/python{v}"), shutil.which(f"python{v}")]:
            if not found or os.path.realpath(found) == os.path.realpath(PY):
                continue
            r = subprocess.run([found, "-c", "import perfdiff"], capture_output=True, text=True, env=env)
            if "ModuleNotFoundError" in r.stderr:
                return found
    return None


def test_vllm_in_a_python_without_perfdiff(tmp_path: Path) -> None:
    """The server's Python lacks perfdiff (another interpreter): the bootstrap loads the agent
    and the adapters from the collector's files, and the marker module by path."""
    py = other_python()
    if py is None:
        pytest.skip("no other Python ≥ 3.10 without perfdiff on this machine")
    global PY
    saved, PY = PY, py
    try:
        tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"], **VLLM_ENV)
    finally:
        PY = saved
    assert agent_warnings(err) == [], err
    assert tables["markers"]["name"] == ["EngineCore.step"] * len(expected_vllm_steps())
    assert phases(tables)["Executor.execute_model"] == len(expected_vllm_steps())


LATE = """
import os, sys, threading
from sglang.srt.managers.scheduler import Scheduler
# The loop runs a few batches before the adapters exist, as in a server attached to, and then
# waits for them: whatever this machine's speed, the rest of its iterations come after.
ran, installed, done = threading.Event(), threading.Event(), [0]
plain = Scheduler.process_batch_result
def gated(self, batch, result):
    done[0] += 1
    if done[0] == 3:
        ran.set()
        installed.wait()
    return plain(self, batch, result)
Scheduler.process_batch_result = gated
sched = Scheduler()
loop = threading.Thread(target=sched.event_loop_normal)
loop.start()
ran.wait()
del os.environ["PERFDIFF_ADAPTERS"]
from perfdiff.collectors.cupti import adapters
try:
    assert adapters.install() is not None
finally:
    installed.set()
loop.join()
"""


def test_sglang_loop_running_before_the_adapters_is_wrapped(tmp_path: Path) -> None:
    """An attach finds the scheduler inside its loop: the iterations after it are cycles."""
    tables, err = run_under_agent(tmp_path, ["-c", LATE], FAKE_REQUESTS="200", FAKE_BATCH="4", FAKE_OUTPUT="4",
                                  FAKE_EXEC_MS="2", PERFDIFF_ADAPTERS="0")
    assert agent_warnings(err) == [], err
    n = len(tables["markers"]["name"])
    assert 5 < n < 250 and set(tables["markers"]["name"]) == {"Scheduler.iteration"}
    assert phases(tables)["Scheduler.run_batch"] == n
