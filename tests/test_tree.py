"""`perfdiff tree`: range trees per run (paths, calls, inclusive, self and GPU time, per
cycle), their diff (matching, tests, material changes) and its Markdown and CSV."""
from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import run_cli
from test_segment_attribute import run_of

import perfdiff
from perfdiff.analyze.tree import diff_trees
from perfdiff.model.schema import MISSING
from perfdiff.parallel import Parallel
from perfdiff.bundle import write_bundle
from perfdiff.rangetree import fold_name, range_profile
from perfdiff.render.tree import CSV_COLUMNS, tree_lines
from perfdiff.model.cycles import Cycles
from perfdiff.model.schema import CycleSource

KINETO = "pytorch/kineto/tb_plugin/samples"


def cpu(name: str, s: int, e: int, tid: int = 1) -> dict:
    return {"function": name, "kind": "cpu", "device": "Host", "start_ns": s, "end_ns": e, "busy_ns": e - s,
            "tid": tid}


def kernel(s: int, e: int, launch: int, tid: int = 1) -> dict:
    return {"function": "k", "kind": "kernel", "device": "GPU 0", "start_ns": s, "end_ns": e, "busy_ns": e - s,
            "launch_ns": launch, "tid": tid}


def step(n: int, s: int, e: int, tid: int = 1) -> dict:
    return {"name": f"ProfilerStep#{n}", "start_ns": s, "end_ns": e, "tid": tid, "source": "profiler_step"}


@pytest.mark.parametrize("name, folded", [
    ("ProfilerStep#12", "ProfilerStep#*"), ("layer_3", "layer_*"), ("step 7", "step *"), ("iter=5", "iter=*"),
    ("aten::conv2d", "aten::conv2d"), ("fp16", "fp16"), ("a#b", "a#b"), ("", "")])
def test_step_numbers_fold(name: str, folded: str) -> None:
    assert fold_name(name) == folded


def test_paths_calls_self_and_gpu_time() -> None:
    """Steps (markers) hold fwd, which holds attn twice (one node, two calls); a kernel
    launched inside attn counts in attn, fwd and the step; another thread is its own root."""
    run = run_of([
        cpu("fwd", 10, 90), cpu("attn", 20, 40), cpu("attn", 50, 60),
        cpu("fwd", 110, 150), cpu("attn", 120, 130),
        cpu("bwd", 30, 170, tid=2),  # another thread, across both steps
        kernel(200, 205, launch=25), kernel(300, 310, launch=95),  # in attn; in the step only
        kernel(400, 401, launch=MISSING),  # no launch: in no range
    ], markers=[step(12, 0, 100), step(13, 100, 200)])
    p = range_profile(run)
    by = {"/".join(p.names_of(i)): i for i in range(p.n_paths)}
    assert set(by) == {"ProfilerStep#*", "ProfilerStep#*/fwd", "ProfilerStep#*/fwd/attn", "bwd"}
    attn, fwd, st = by["ProfilerStep#*/fwd/attn"], by["ProfilerStep#*/fwd"], by["ProfilerStep#*"]
    assert p.calls[attn] == 3 and p.incl_ns[attn] == 40 and p.self_ns[attn] == 40
    assert p.incl_ns[fwd] == 120 and p.self_ns[fwd] == 80
    assert p.self_ns[st] == 200 - 120
    assert p.gpu_ns is not None and p.gpu_ns[attn] == 5 and p.gpu_ns[fwd] == 5 and p.gpu_ns[st] == 15
    assert p.gpu_ns[by["bwd"]] == 0
    assert p.nested  # fwd holds attn: the process's own ranges nest
    # Per cycle: bwd spans both steps (70 + 70); calls where a range starts.
    c = range_profile(run, Cycles(np.array([0, 100]), np.array([100, 200]), CycleSource.WINDOW, ""))
    assert c.incl_cyc_ns is not None and c.calls_cyc is not None
    assert c.incl_cyc_ns[by["bwd"]] == 140 and c.calls_cyc[by["bwd"]] == 1
    path, cyc, val = c.incl_coo
    rows = path == by["bwd"]
    assert cyc[rows].tolist() == [0, 1] and val[rows].tolist() == [70, 70]
    assert c.cycle_share == pytest.approx(1.0)


def test_cycle_markers_alone_are_not_nesting() -> None:
    """Ranges inside a step but not inside each other: no nesting of the process's own."""
    run = run_of([cpu("a", 10, 20), cpu("b", 30, 40)], markers=[step(1, 0, 100)])
    assert not range_profile(run).nested


def test_gpu_time_unknown_without_kernels() -> None:
    p = range_profile(run_of([cpu("a", 0, 10), cpu("b", 2, 5)]))
    assert p.gpu_ns is None and p.gpu_reason == "no GPU work in the run"
    d = diff_trees(p, p)
    assert all(np.isnan(n.gpu_n_us) for n in d.nodes)



# ------------------------------------------------------------------ synthetic trees, known truth

LEAVES = ("attention", "mlp", "norm")


def _iterations(rng: np.random.Generator, k: int, slow: float, t0: int = 0) -> tuple[list[dict], list[dict]]:
    """k iterations (cycles) on thread 1: iteration > forward > (attention, mlp, norm), and
    iteration > backward, optimizer; times in ns with 3 % noise; attention × `slow`."""
    rows, marks, t = [], [], t0
    for _ in range(k):
        start = t
        t += int(rng.normal(20_000, 600))  # before forward
        f0 = t
        for leaf in LEAVES:
            d = int(rng.normal(100_000, 3_000) * (slow if leaf == "attention" else 1.0))
            rows.append(cpu(leaf, t, t + d))
            t += d + 1_000
        rows.append(cpu("forward", f0, t))
        for name, mean in (("backward", 200_000), ("optimizer", 50_000)):
            d = int(rng.normal(mean, 0.03 * mean))
            rows.append(cpu(name, t, t + d))
            t += d
        rows.append(cpu("iteration", start, t))
        marks.append((start, t))
        t += 5_000
    return rows, marks


def _pair(seed: int, slow: float) -> tuple:
    rng = np.random.default_rng(seed)
    out = []
    for factor in (1.0, slow):
        rows, marks = _iterations(rng, 12, factor)
        cyc = Cycles(np.array([m[0] for m in marks]), np.array([m[1] for m in marks]), CycleSource.ANNOTATION, "iteration")
        out.append((range_profile(run_of(rows), cyc), cyc))
    (pn, cn), (pa, ca) = out
    return diff_trees(pn, pa, cycle_ns=(cn.dur_ns, ca.dur_ns))


def test_ten_times_slower_range_and_its_ancestors_lead() -> None:
    d = _pair(1, 10.0)
    first = [d.nodes[i] for i in (0, 1, 2)]
    assert [n.path for n in first] == [("iteration",), ("iteration", "forward"),
                                       ("iteration", "forward", "attention")]
    attn = first[2]
    assert attn.material and attn.ratio == pytest.approx(10.0, rel=0.1) and attn.q <= 0.05
    assert not any(n.material for n in d.nodes if n.name in ("mlp", "norm", "backward", "optimizer"))
    lines = tree_lines(d)
    assert lines[2].lstrip().startswith("- **attention**")
    assert lines[3].startswith("    - … 2 paths without a material change")
    assert lines[4].startswith("  - … 2 paths without a material change")


def test_null_pairs_stay_quiet() -> None:
    """Same-distribution pairs: a material change in at most a few of 40 simulated pairs."""
    noisy = sum(1 for seed in range(40) if _pair(100 + seed, 1.0).n_material)
    assert noisy <= 4


def test_a_tenth_slower_leaf_is_found_in_most_pairs() -> None:
    found = sum(1 for seed in range(20) if any(n.material and n.name == "attention"
                                                for n in _pair(500 + seed, 1.1).nodes))
    assert found >= 18


def test_paths_in_one_run_only_are_marked() -> None:
    rng = np.random.default_rng(3)
    rows_n, _ = _iterations(rng, 3, 1.0)
    rows_a, _ = _iterations(rng, 3, 1.0)
    rows_a.append(cpu("softmax", rows_a[0]["start_ns"] + 1, rows_a[0]["start_ns"] + 90_000))  # inside attention
    d = diff_trees(range_profile(run_of(rows_n)), range_profile(run_of(rows_a)))
    new = next(n for n in d.nodes if n.name == "softmax")
    assert new.presence == "new" and new.material and d.basis.value == "total"
    assert any("**softmax** *(abnormal only)*: — →" in line for line in tree_lines(d))


def test_names_are_escaped() -> None:
    bad = "a|b *c* <d>\n`e`"
    run = run_of([cpu("outer", 0, 100), cpu(bad, 10, 20)])
    other = run_of([cpu("outer", 0, 100), cpu(bad, 10, 90)])
    lines = tree_lines(diff_trees(range_profile(run), range_profile(other)))
    assert any(r"a\|b \*c\* &lt;d&gt; \`e\`" in line for line in lines)
    assert not any("<d>" in line or "\n" in line for line in lines)


# ------------------------------------------------------------------ nsys exports with NVTX_EVENTS

NVTX_COLUMNS = ("start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
                "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
                "textId INTEGER, domainId INTEGER")


def make_nvtx_export(path: Path, *, slow: float, seed: int, kernels: bool = False) -> Path:
    """An nsys export, NVTX-only unless `kernels`: 12 iterations of a three-level push/pop tree
    on one thread (as _iterations), with a start/end range and a range in a named domain inside
    norm; with `kernels`, each attention launches one 40 µs kernel (runtime call and kernel
    joined by correlation id)."""
    rows, _ = _iterations(np.random.default_rng(seed), 12, slow, t0=1_000_000)
    gtid = (4242 << 24) | 4243
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO StringIds VALUES (1, 'load weights')")
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [("EXPORT_SCHEMA_VERSION", "3.11.0"),
                                                                  ("EXPORT_PRODUCT_VERSION", "2024.2.1")])
    con.execute(f"CREATE TABLE NVTX_EVENTS ({NVTX_COLUMNS})")
    events = [(r["start_ns"], r["end_ns"], 59, None, None, None, r["name"] if "name" in r else r["function"],
               gtid, None, None, 0) for r in rows]
    norm = [r for r in rows if r["function"] == "norm"]
    events += [(r["start_ns"] + 10, r["start_ns"] + 5_000, 60, 1, None, None, None, gtid, gtid, 1, 0)
               for r in norm]  # a start/end range named by textId, inside norm
    events += [(0, None, 75, None, None, None, "MyDomain", gtid, None, None, 7)]
    events += [(r["start_ns"] + 6_000, r["start_ns"] + 9_000, 59, None, None, None, "fuse", gtid, None, None, 7)
               for r in norm]
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", events)
    if kernels:
        attn = [r for r in rows if r["function"] == "attention"]
        con.execute("INSERT INTO StringIds VALUES (2, 'cudaLaunchKernel_v7000'), (3, 'attn_kernel')")
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER)")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)",
                        [(r["start_ns"] + 100, r["start_ns"] + 200, 0, gtid, i, 2) for i, r in enumerate(attn)])
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER NOT NULL, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
                    "demangledName INTEGER, shortName INTEGER)")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?)",
                        [(r["start_ns"] + 500, r["start_ns"] + 40_500, 0, 7, i, 4242 << 24, 3, 3)
                         for i, r in enumerate(attn)])
    con.commit()
    con.close()
    return path


def test_tree_of_two_nsys_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One range 10× slower inside a three-level tree: it and its ancestors come first, the
    rest is collapsed; the CSV has the sample's columns first, the slow range ×10."""
    a = make_nvtx_export(tmp_path / "normal.sqlite", slow=1.0, seed=1)
    b = make_nvtx_export(tmp_path / "abnormal.sqlite", slow=10.0, seed=2)
    out = tmp_path / "tree.md"
    code, _, err = run_cli(["tree", a, b, "-o", out], capsys)
    assert code == 0, err
    md = out.read_text(encoding="utf-8")
    tree = [line for line in md.splitlines() if line.lstrip().startswith("- ")]
    assert tree[0].startswith("- **iteration**:") and "q " in tree[0]
    assert tree[1].startswith("  - **forward**:")
    assert tree[2].startswith("    - **attention**:") and ("×10" in tree[2] or "×9." in tree[2])
    assert [x.split(" (")[0] for x in tree[3:]] == ["    - … 4 paths without a material change",
                                                    "  - … 2 paths without a material change"]
    assert "per cycle (11 normal and 11 abnormal cycles" in md  # from one range start to the next
    rows = list(csv.DictReader(io.StringIO((tmp_path / "tree.csv").read_text(encoding="utf-8"))))
    assert list(rows[0])[:5] == ["leaf", "path", "N_ms", "A_ms", "A-N_ms"] and list(rows[0]) == CSV_COLUMNS
    paths = {r["path"]: r for r in rows}
    assert float(paths["iteration;forward;attention"]["ratio"]) == pytest.approx(10.0, rel=0.1)
    assert "iteration;forward;norm;load weights" in paths and "iteration;forward;norm;MyDomain:fuse" in paths
    assert paths["iteration"]["gpu_N_ms"] == ""  # NVTX only: GPU time unknown, not 0


def test_gpu_time_of_kernels_launched_inside_a_range(tmp_path: Path) -> None:
    """A kernel launched inside attention counts in attention and its ancestors, not in mlp."""
    a = make_nvtx_export(tmp_path / "normal.sqlite", slow=1.0, seed=1, kernels=True)
    b = make_nvtx_export(tmp_path / "abnormal.sqlite", slow=1.0, seed=2, kernels=True)
    paths = {n.path[-1]: n for n in perfdiff.tree(a, b).diff.nodes}
    for name in ("attention", "forward", "iteration"):
        assert paths[name].gpu_n_us == pytest.approx(40.0) and paths[name].gpu_a_us == pytest.approx(40.0)
    assert paths["mlp"].gpu_n_us == 0 and paths["backward"].gpu_a_us == 0


def test_compare_report_has_a_range_tree_section(tmp_path: Path) -> None:
    a = make_nvtx_export(tmp_path / "normal.sqlite", slow=1.0, seed=1)
    b = make_nvtx_export(tmp_path / "abnormal.sqlite", slow=10.0, seed=2)
    c = perfdiff.compare(a, b)
    assert c.tree is not None and c.tree.nodes[2].name == "attention"
    md = c.to_markdown()
    section = md.split("### Range tree", 1)[1].split("## 4.", 1)[0]
    assert "    - **attention**:" in section and "<details>" not in section


def _bundle(path: Path, *, nest: bool) -> Path:
    """A run of 10 perfdiff cycles on thread 1, each launching one kernel from fwd; attn runs
    inside fwd when `nest`, after it otherwise."""
    rows, marks = [], []
    for i in range(10):
        t = i * 1_000
        marks.append({"name": "step", "start_ns": t, "end_ns": t + 900, "tid": 1, "source": "perfdiff"})
        rows += [cpu("fwd", t + 10, t + 300), cpu("attn", t + 100, t + 200) if nest else cpu("attn", t + 400, t + 500),
                 kernel(t + 50, t + 150 + i % 3, launch=t + 20)]
    write_bundle(path, run_of(rows, markers=marks))
    return path


def test_compare_builds_the_range_trees_only_when_it_shows_them(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The range profiles are built when either run's own ranges nest (both of them, for the
    diff), and not at all when neither does: the report then has no Range tree section."""
    import perfdiff.api

    built: list[str] = []
    real = perfdiff.api.range_profile
    monkeypatch.setattr(perfdiff.api, "range_profile",
                        lambda run, *a, **k: built.append(Path(run.path).name) or real(run, *a, **k))
    flat, nested = _bundle(tmp_path / "flat", nest=False), _bundle(tmp_path / "nested", nest=True)
    for n, a, shown in ((flat, flat, False), (flat, nested, True), (nested, flat, True)):
        built.clear()
        c = perfdiff.compare(n, a, parallel=Parallel.serial(), force=True)
        assert (c.tree is not None) == shown and ("Range tree" in c.to_markdown()) == shown
        assert sorted(built) == (sorted([n.name, a.name]) if shown else [])
        if shown:
            assert c.tree.nested == (n == nested, a == nested)
    # Not built is no loss: the flat run's profile does not nest.
    assert not range_profile(perfdiff.load(flat)).nested


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_nvtx_export(tmp_path / "a.sqlite", slow=1.0, seed=1)
    code, out, err = run_cli(["tree", a, tmp_path / "missing.sqlite"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "missing.sqlite" in err
    junk = tmp_path / "junk.json"
    junk.write_text("not json", encoding="utf-8")
    code, _, err = run_cli(["tree", a, junk], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["tree", a, a, "--alpha", "2"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_runs_without_ranges_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Kineto trace of kernels and runtime calls only: no range to build a tree from."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1,
               "args": {"correlation": i}} for i in range(3)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 5 + i,
                "dur": 0.5, "args": {"correlation": i}} for i in range(3)]
    trace = tmp_path / "kernels.json"
    trace.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    code, _, err = run_cli(["tree", trace, trace], capsys)
    assert code == 2 and "hold no ranges" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ real traces


@pytest.mark.real
def test_kineto_resnet_pair_puts_the_dataloader_on_top(real: Path) -> None:
    """num_workers 4 vs 0: under ProfilerStep#* the DataLoader step leads (matched across its
    two class names), with the copies it now runs inside it."""
    base = real / KINETO
    t = perfdiff.tree(base / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                      base / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    d = t.diff
    assert d.basis.value == "per-cycle" and d.n_cycles == (6, 6)
    root = d.nodes[d.roots[0]]
    assert root.name == "ProfilerStep#*"
    top = d.nodes[root.children[0]]
    assert top.name.startswith("enumerate(DataLoader)") and top.name_a is not None and top.material
    assert top.delta_us > 50_000 and top.q <= 0.05
    md = t.to_markdown()
    tree = [line for line in md.splitlines() if line.lstrip().startswith("- ")]
    assert tree[0].startswith("- **ProfilerStep\\#\\***") and tree[1].startswith("  - **enumerate(DataLoader)")
    assert t.paths["leaf"].iloc[0] == "ProfilerStep#*"


@pytest.mark.real
def test_kineto_windows_of_one_config_stay_quiet(real: Path) -> None:
    base = real / KINETO / "resnet50_num_workers_4"
    t = perfdiff.tree(base / "worker0.1623212756351.pt.trace.json.gz", base / "worker0.1623213129365.pt.trace.json.gz")
    (line,) = tree_lines(t.diff)
    assert t.diff.n_material == 0 and line.startswith(f"- … {len(t.diff.nodes)} paths without a material change")


@pytest.mark.real
def test_what_paths_without_a_material_change_moved_stays_in_sight(real: Path) -> None:
    """HTA's pair: "## sparse_data_dist ##" grew 29.8 ms a cycle, its one material child
    3.3 ms; the rest of its children, none material with 6 cycles, moved +26.5 ms together
    (all2all_tw_data:init alone +23.9 ms), which the collapsed line once called "unchanged"."""
    root = real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff"
    t = perfdiff.tree(root / "control/control.json.gz", root / "test/test.json.gz")
    lines = tree_lines(t.diff)
    assert "Self time is a range's time outside the ranges inside it, its CUDA calls included" in t.to_markdown()
    i = next(i for i, x in enumerate(lines) if "**\\#\\# sparse\\_data\\_dist \\#\\#**" in x)
    under = [x for x in lines[i + 1:] if x.startswith("    - … ")]
    # 100 paths: ranges identical in time nest by their names now, not by the file's order (85).
    assert under[0].startswith("    - … 100 paths without a material change (+26.5 ms together")


def _nested_ranges(rng: np.random.Generator, n_threads: int) -> tuple[list[dict], list[dict]]:
    """Well-nested random ranges (names from a small set) on a few threads, and kernels
    launched at random instants of those threads."""
    rows, kernels = [], []
    for tid in range(1, n_threads + 1):
        stack = [(0, 10_000, 0)]
        while stack:
            s, e, depth = stack.pop()
            if e - s < 4 or depth > 5:
                continue
            a, b = sorted(rng.integers(s, e, size=2).tolist())
            if b > a:
                rows.append(cpu(f"r{rng.integers(0, 3)}_{rng.integers(0, 40)}", a, b, tid=tid))
                stack += [(a, b, depth + 1), (b, e, depth)]
        for t in rng.integers(0, 10_000, size=5).tolist():
            kernels.append(kernel(20_000, 20_000 + t % 7 + 1, launch=t, tid=tid))
    return rows, kernels


@given(st.integers(0, 2**31 - 1), st.integers(1, 3))
@settings(max_examples=25, deadline=None)
def test_tree_totals_add_up(seed: int, n_threads: int) -> None:
    """For well-nested ranges: the paths' self times add up to the top-level ranges' time; one
    cycle over everything gives the totals; the roots' GPU time is that of the kernels launched
    inside some range; names fold (`r1_7` → `r1_*`)."""
    rows, kernels = _nested_ranges(np.random.default_rng(seed), n_threads)
    if not rows:
        return
    p = range_profile(run_of(rows + kernels), Cycles(np.array([0]), np.array([10_000]), CycleSource.WINDOW, ""))
    roots = p.parent < 0
    assert p.self_ns.sum() == pytest.approx(p.incl_ns[roots].sum())
    assert p.incl_cyc_ns.tolist() == pytest.approx(p.incl_ns.tolist())
    assert p.calls.sum() == len(rows) and p.calls_cyc.sum() == len(rows)
    inside = sum(k["busy_ns"] for k in kernels
                 if any(r["tid"] == k["tid"] and r["start_ns"] <= k["launch_ns"] < r["end_ns"] for r in rows))
    assert p.gpu_ns[roots].sum() == pytest.approx(inside)
    assert set(p.name) <= {"r0_*", "r1_*", "r2_*"}
