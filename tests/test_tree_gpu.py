"""GPU-side ranges in the range tree: Kineto ``gpu_user_annotation`` imported as
RunData.gpu_ranges (not activity, not markers), nested per stream as trees of their own, with
the span of their GPU work and its change."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from test_segment_attribute import run_of
from test_tree import kernel

import perfdiff
from perfdiff.importers.kineto import import_kineto
from perfdiff.importers.kineto.reference import reference_tables
from perfdiff.importers.common import canonical
from perfdiff.rangetree import range_profile
from perfdiff.render.tree import GPU_SIDE_MARK, tree_lines

QWEN = "AMD-AGI/TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
STEP_US = 10_000
STEPS = 8


def kineto_trace(path: Path, *, fwd_kernel_us: float, seed: int, steps: int = STEPS) -> Path:
    """A Kineto trace of `steps` training steps on one thread and one stream: per step a CPU
    ``ProfilerStep#N`` holding ``forward`` and ``backward`` annotations, each launching two
    kernels (cudaLaunchKernel, joined by correlation), and Kineto's GPU-side copies of the
    three annotations (``gpu_user_annotation``: from their first kernel's start to their last
    one's end on stream 7).  The CPU side does not depend on `fwd_kernel_us`."""
    rng = np.random.default_rng(seed)
    ev: list[dict] = []
    corr = 0
    gpu_free = 0.0
    for i in range(steps):
        t0 = i * STEP_US
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 3}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": STEP_US - 100})
        first_step_kernel = None
        for name, at, kernel_us in (("forward", 100, fwd_kernel_us), ("backward", 3000, 400.0)):
            ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": t0 + at,
                       "dur": 2000 + rng.normal(0, 5)})
            spans = []
            for k in range(2):
                corr += 1
                launch = t0 + at + 100 + 300 * k
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": launch, "dur": 10, "args": {"correlation": corr}})
                start = max(launch + 20, gpu_free)
                dur = kernel_us * (1 + rng.normal(0, 0.02))
                gpu_free = start + dur
                ev.append({"ph": "X", "cat": "kernel", "name": f"{name}_kernel_{k}", "pid": 0, "tid": 7,
                           "ts": start, "dur": dur, "args": {"correlation": corr, "device": 0, "stream": 7}})
                spans.append((start, gpu_free))
            first_step_kernel = spans[0][0] if first_step_kernel is None else first_step_kernel
            ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7,
                       "ts": spans[0][0], "dur": spans[-1][1] - spans[0][0]})
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{i + 3}", "pid": 0, "tid": 7,
                   "ts": first_step_kernel, "dur": gpu_free - first_step_kernel})
    path.write_text(json.dumps({"traceEvents": ev, "baseTimeNanoseconds": 1_700_000_000_000_000_000}))
    return path


def test_gpu_annotations_are_gpu_ranges_not_activity_or_markers(tmp_path: Path) -> None:
    run = import_kineto(kineto_trace(tmp_path / "t.json", fwd_kernel_us=300, seed=1))
    g = run.gpu_ranges
    assert g is not None and len(g) == 3 * STEPS
    assert set(g["name"].astype(str)) == {"forward", "backward"} | {f"ProfilerStep#{i + 3}" for i in range(STEPS)}
    assert set(g["device"].astype(str)) == {"GPU 0"} and set(g["stream"]) == {7}
    assert (run.activity["device"].astype(str) != "Host").sum() == 4 * STEPS  # the kernels only
    assert len(run.markers) == 3 * STEPS  # the CPU-side annotations and steps only
    assert "category gpu_user_annotation (not imported)" not in run.manifest["dropped"]
    assert run.manifest["import"]["gpu_ranges"] == 3 * STEPS
    # The plain reader agrees, and the stream column stays for a comparison.
    ref = reference_tables(tmp_path / "t.json")
    assert canonical(g).equals(canonical(ref["gpu_ranges"]))
    assert (perfdiff.load(tmp_path / "t.json").activity["stream"] == 7).sum() == 4 * STEPS


def test_gpu_side_paths_are_their_own_tree(tmp_path: Path) -> None:
    run = import_kineto(kineto_trace(tmp_path / "t.json", fwd_kernel_us=300, seed=1))
    p = range_profile(run)
    assert p.gpu_side is not None and p.gpu_ns is not None
    paths = {(p.names_of(i), bool(p.gpu_side[i])): i for i in range(p.n_paths)}
    assert set(paths) == {(("ProfilerStep#*",), False), (("ProfilerStep#*", "forward"), False),
                          (("ProfilerStep#*", "backward"), False), (("ProfilerStep#*",), True),
                          (("ProfilerStep#*", "forward"), True), (("ProfilerStep#*", "backward"), True)}
    fwd = paths[(("ProfilerStep#*", "forward"), True)]
    a = run.activity
    kernels = a[a["function"].astype(str).str.startswith("forward") & (a["kind"] == "kernel")]
    spans = run.gpu_ranges[run.gpu_ranges["name"].astype(str) == "forward"]
    assert p.incl_ns[fwd] == (spans["end_ns"] - spans["start_ns"]).sum()
    assert p.gpu_ns[fwd] == kernels["busy_ns"].sum()  # the work on its stream inside its spans
    assert p.calls[fwd] == STEPS and p.threads[fwd] == 1
    # The GPU side of a step is a cycle marker as its CPU side is: holding forward is no nesting.
    assert not p.nested
    # The CPU-side forward holds the same kernels by launch.
    assert p.gpu_ns[paths[(("ProfilerStep#*", "forward"), False)]] == kernels["busy_ns"].sum()


def test_a_gpu_span_ten_times_longer_leads_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Forward's kernels take 10× longer; the CPU side is unchanged.  The GPU-side step and
    its forward come first, per cycle and significant; the CPU side and backward stay quiet."""
    n = kineto_trace(tmp_path / "n.json", fwd_kernel_us=300, seed=1)
    a = kineto_trace(tmp_path / "a.json", fwd_kernel_us=3000, seed=2)
    t = perfdiff.tree(n, a)
    d = t.diff
    assert t.paths["gpu_side"].tolist()[:2] == [True, True]
    assert d.basis.value == "per-cycle" and d.n_cycles == (STEPS, STEPS)
    root = d.nodes[d.roots[0]]
    assert root.gpu_side and root.name == "ProfilerStep#*" and root.material
    fwd = d.nodes[root.children[0]]
    assert fwd.gpu_side and fwd.name == "forward" and fwd.material and fwd.q <= 0.05
    assert fwd.ratio == pytest.approx(10, rel=0.05) and fwd.gpu_a_us == pytest.approx(6000, rel=0.05)
    assert {(m.name, m.gpu_side) for m in d.nodes if m.material} == {("ProfilerStep#*", True), ("forward", True)}
    lines = tree_lines(d)
    assert lines[0].startswith("- **ProfilerStep\\#\\***" + GPU_SIDE_MARK) and lines[1].startswith("  - **forward**")
    code, out, _ = run_cli(["tree", n, a, "--csv", tmp_path / "t.csv"], capsys)
    assert code == 0 and "GPU timeline" in out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert [(r["path"], r["side"]) for r in rows[:2]] == [("ProfilerStep#*", "gpu"), ("ProfilerStep#*;forward", "gpu")]


def test_gpu_side_null_pairs_stay_quiet(tmp_path: Path) -> None:
    for seed in (3, 5, 7):
        n = kineto_trace(tmp_path / f"n{seed}.json", fwd_kernel_us=300, seed=seed)
        a = kineto_trace(tmp_path / f"a{seed}.json", fwd_kernel_us=300, seed=seed + 1)
        d = perfdiff.tree(n, a).diff
        assert d.basis.value == "per-cycle" and d.n_tests >= 6 and d.n_material == 0


def test_gpu_annotations_leave_compare_unchanged(tmp_path: Path) -> None:
    """The function table, the cycles and the verdict do not see GPU-side ranges."""
    n = kineto_trace(tmp_path / "n.json", fwd_kernel_us=300, seed=1)
    a = kineto_trace(tmp_path / "a.json", fwd_kernel_us=3000, seed=2)
    strip = {}
    for name in ("n", "a"):
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "gpu_user_annotation"]
        strip[name] = tmp_path / f"{name}-plain.json"
        strip[name].write_text(json.dumps(doc))
    with_gpu, without = perfdiff.compare(n, a), perfdiff.compare(strip["n"], strip["a"])
    cols = ["name", "device", "kind", "t_n_us", "t_a_us", "q_t"]
    assert with_gpu.functions[cols].equals(without.functions[cols])
    assert with_gpu.cycles.equals(without.cycles)
    assert [v.code for v in with_gpu.verdict] == [v.code for v in without.verdict]


def test_gpu_side_ranges_follow_a_renamed_gpu(tmp_path: Path) -> None:
    """The abnormal run ran on GPU 1, the normal one on GPU 0: the plan maps GPU 1 to GPU 0,
    and the abnormal run's GPU-side ranges move with its kernels, so their GPU time is the
    work on their stream (not zero for want of a GPU 1), in `tree` and in `compare` (an
    ``attn`` range inside forward makes the runs nest, so compare shows the tree)."""
    paths = {}
    for side, seed, device in (("n", 1, 0), ("a", 2, 1)):
        path = kineto_trace(tmp_path / f"{side}.json", fwd_kernel_us=300, seed=seed)
        doc = json.loads(path.read_text())
        doc["traceEvents"] += [{**e, "name": "attn", "ts": e["ts"] + 1, "dur": e["dur"] / 2}
                               for e in doc["traceEvents"] if e["cat"] == "gpu_user_annotation"
                               and e["name"] == "forward"]
        for e in doc["traceEvents"]:
            if e["cat"] in ("kernel", "gpu_user_annotation"):
                e["pid"] = device
                if "args" in e:
                    e["args"]["device"] = device
        path.write_text(json.dumps(doc))
        paths[side] = path
    c = perfdiff.compare(paths["n"], paths["a"])
    assert c.analysis.plan.device_map == (("GPU 1", "GPU 0"),)
    seen = []
    for nodes in (perfdiff.tree(paths["n"], paths["a"]).diff.nodes, c.tree.nodes):
        gpu = {m.name: m for m in nodes if m.gpu_side}
        assert {"forward", "attn", "backward"} <= set(gpu) and all(m.gpu_a_us > 0 for m in gpu.values())
        for name in ("forward", "backward"):  # the same kernels on the renamed GPU
            assert gpu[name].gpu_a_us == pytest.approx(gpu[name].gpu_n_us, rel=0.1), name
        seen.append({f"{name} {side}": v for name, m in gpu.items() for side, v in (("N", m.gpu_n_us), ("A", m.gpu_a_us))})
    assert seen[1] == pytest.approx(seen[0])  # compare's tree reads as the tree command's


def test_imported_bundles_keep_the_gpu_side_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`perfdiff import` keeps the GPU-side ranges: comparing the bundles gives the range tree
    that comparing the traces does.  Here only the GPU side nests (attn inside forward), so a
    bundle without them would have no Range tree section at all."""
    traces = {}
    for side, fwd_us, seed in (("n", 300, 1), ("a", 3000, 2)):
        path = kineto_trace(tmp_path / f"{side}.json", fwd_kernel_us=fwd_us, seed=seed)
        doc = json.loads(path.read_text())
        doc["traceEvents"] += [{**e, "name": "attn", "ts": e["ts"] + 1, "dur": e["dur"] / 2}
                               for e in doc["traceEvents"] if e["cat"] == "gpu_user_annotation"
                               and e["name"] == "forward"]
        path.write_text(json.dumps(doc))
        traces[side] = path
        code, out, err = run_cli(["import", path, "-o", tmp_path / f"{side}.b"], capsys)
        assert code == 0 and f"{3 * STEPS + STEPS} GPU-side ranges" in out, err
    trees = {}
    for kind, (n, a) in (("trace", (traces["n"], traces["a"])), ("bundle", (tmp_path / "n.b", tmp_path / "a.b"))):
        code, _, err = run_cli(["compare", n, a, "-o", tmp_path / f"{kind}.md", "--json", tmp_path / f"{kind}.json"],
                               capsys)
        assert code == 0, err
        trees[kind] = json.loads((tmp_path / f"{kind}.json").read_text())["tree"]
        md = (tmp_path / f"{kind}.md").read_text()
        assert "GPU timeline" in md and md.count("**attn**") == 1
    assert trees["bundle"] == trees["trace"]
    assert ["ProfilerStep#*", "forward", "attn"] in [x["path"] for x in trees["bundle"]["nodes"] if x["gpu_side"]]


def test_gpu_side_ranges_nest_per_stream() -> None:
    """On one stream, inner lies inside outer; on another stream, a range at the same time is
    a root of its own.  Kernels count in the innermost range of their stream holding their
    start; nesting GPU-side annotations count as the process's own nesting."""
    run = run_of([kernel(10, 20, launch=1), kernel(30, 60, launch=2), kernel(12, 18, launch=3)])
    run.activity["stream"] = np.array([7, 7, 9])
    run.gpu_ranges = pd.DataFrame({"name": pd.Categorical(["outer", "inner", "outer"]),
                                   "device": pd.Categorical(["GPU 0"] * 3), "stream": np.array([7, 7, 9]),
                                   "start_ns": np.array([10, 30, 12]), "end_ns": np.array([60, 60, 18])})
    p = range_profile(run)
    by = {p.names_of(i): i for i in range(p.n_paths)}
    assert set(by) == {("outer",), ("outer", "inner")} and p.nested
    assert p.calls[by[("outer",)]] == 2 and p.threads[by[("outer",)]] == 2  # two streams
    assert p.gpu_ns is not None and p.gpu_ns[by[("outer", "inner")]] == 30 and p.gpu_ns[by[("outer",)]] == 46
    assert p.incl_ns[by[("outer",)]] == 56 and p.self_ns[by[("outer",)]] == 26


@pytest.mark.real
def test_real_gpu_annotation_of_a_profiler_step(real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The TraceLens H100 trace holds one gpu_user_annotation, the GPU side of ProfilerStep#6
    (stream 7, 34.892421 ms): a GPU-side root holding the work of stream 7 inside it."""
    path = real / QWEN
    run = import_kineto(path)
    g = run.gpu_ranges
    assert g is not None and g["name"].astype(str).tolist() == ["ProfilerStep#6"]
    assert int(g["end_ns"].iloc[0] - g["start_ns"].iloc[0]) == 34_892_421 and int(g["stream"].iloc[0]) == 7
    p = range_profile(run)
    gpu = [i for i in range(p.n_paths) if p.is_gpu_side(i)]
    assert [p.name[i] for i in gpu] == ["ProfilerStep#*"] and p.gpu_ns is not None
    a = run.activity
    on = ((a["kind"].astype(str).isin(["kernel", "memcpy", "memset"])) & (a["stream"] == 7)
          & (a["start_ns"] >= g["start_ns"].iloc[0]) & (a["start_ns"] < g["end_ns"].iloc[0]))
    assert p.gpu_ns[gpu[0]] == a.loc[on, "busy_ns"].sum() > 0
    code, out, _ = run_cli(["tree", path, path], capsys)
    assert code == 0 and "No path of" in out and "GPU timeline" in out

