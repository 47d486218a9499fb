"""Cycles and per-(function, cycle) attribution on small literal inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfdiff.analyze.compare import compare_runs
from perfdiff.attribute import attribute_activity, sample_series
from perfdiff.bundle import MISSING, RunData, base_manifest, empty_table, normalize_table
from perfdiff.errors import InputError
from perfdiff.model.durations import parse_duration_ns
from perfdiff.cycles import cut_cycles, plan_pair, summarize_cycles
from perfdiff.model.cycles import Cycles
from perfdiff.model.schema import CycleSource


def run_of(rows: list[dict], markers: list[dict] | None = None, samples: list[dict] | None = None) -> RunData:
    act = normalize_table("activity", pd.DataFrame(rows)) if rows else empty_table("activity")
    mk = normalize_table("markers", pd.DataFrame(markers)) if markers else empty_table("markers")
    sm = normalize_table("samples", pd.DataFrame(samples)) if samples else empty_table("samples")
    return RunData(base_manifest(run_name="t"), act, sm, mk, path="t")


def segment_cycles(run: RunData, *, cycle_regex: str | None = None, window_ns: int | None = None) -> Cycles:
    """The cycles of one run on its own: the plan it would share with itself."""
    s = summarize_cycles(run)
    return cut_cycles(run, plan_pair(s, s, cycle_regex=cycle_regex, window_ns=window_ns))


def k(name: str, s: int, e: int, launch: int = MISSING, kind: str = "kernel", device: str = "GPU 0") -> dict:
    return {"function": name, "kind": kind, "device": device, "start_ns": s, "end_ns": e, "busy_ns": e - s,
            "launch_ns": launch}


def test_launch_attribution_and_clipping() -> None:
    cyc = Cycles(np.array([0, 100]), np.array([100, 200]), CycleSource.WINDOW, "")
    run = run_of([
        k("late", 150, 170, launch=90),  # launched in cycle 0, runs in cycle 1: counts whole in 0
        k("span", 80, 120, kind="cpu", device="Host"),  # no launch: 20 in cycle 0, 20 in cycle 1
        k("point", 130, 130, kind="cpu", device="Host"),  # zero length: one call in cycle 1
        k("outside", 300, 310),  # after the last cycle: unattributed
    ])
    m = attribute_activity(run, cyc)
    own = {n: m.own_ns[i] for i, n in enumerate(m.keys["name"])}
    names = list(m.keys["name"])
    # The cycle each row counts as a call in: where it started (or was launched), -1 outside.
    call_cycle = {names[f]: int(c) for f, c in zip(m.row_func, m.row_cycle, strict=True)}
    assert own["late"].tolist() == [20, 0]
    assert own["span"].tolist() == [20, 20]
    assert call_cycle == {"late": 0, "span": 0, "point": 1, "outside": -1}
    assert dict(zip(names, m.calls_total.tolist(), strict=True)) == {"late": 1, "span": 1, "point": 1, "outside": 0}
    assert dict(zip(names, m.incl_total_ns.tolist(), strict=True)) == {"late": 20, "span": 40, "point": 0, "outside": 0}
    assert own["outside"].tolist() == [0, 0]
    assert m.unattributed_rows == 1


def test_host_counter_busy_can_exceed_duration_and_is_prorated() -> None:
    cyc = Cycles(np.array([0, 50]), np.array([50, 100]), CycleSource.WINDOW, "")
    run = run_of([{"function": "oncpu", "kind": "host", "device": "Host", "start_ns": 0, "end_ns": 100,
                   "busy_ns": 300}])  # three threads busy all interval
    m = attribute_activity(run, cyc)
    # Prorated over the two cycles, and per thread of the three the counter sums over: a host
    # state is never more than its cycle (docs/STATISTICS.md, host states per thread).
    assert m.own_ns[0].tolist() == [50, 50]


def test_kernel_sequence_period() -> None:
    rows = []
    t = 1000
    for _ in range(30):  # warm-up kernel once, then A B B C repeated
        for name in ("A", "B", "B", "C"):
            rows.append(k(name, t, t + 10))
            t += 20
        t += 100
    rows.insert(0, k("warmup", 0, 10))
    cyc = segment_cycles(run_of(rows))
    assert cyc.source == "kernel-sequence"
    assert "period 4" in cyc.detail and "launch of A" in cyc.detail
    assert cyc.n == 29  # the open-ended last one is dropped
    assert set(np.diff(cyc.start_ns)) == {180}


def test_idle_gap_fallback() -> None:
    rng = np.random.default_rng(0)
    rows, t = [], 0
    for _ in range(20):
        names = rng.permutation(["A", "B", "C", "D", "E"])[: rng.integers(2, 5)]  # no repeating sequence
        for n in names:
            rows.append(k(str(n), t, t + 100))
            t += 110
        t += 50_000
    cyc = segment_cycles(run_of(rows))
    assert cyc.source == "idle-gaps"
    assert cyc.n == 20


def test_marker_priority_and_point_marks() -> None:
    rows = [k("A", i * 100, i * 100 + 10) for i in range(10)]
    steps = [{"name": f"ProfilerStep#{i}", "start_ns": i * 100, "end_ns": i * 100 + 90, "source": "profiler_step"}
             for i in range(5)]
    cyc = segment_cycles(run_of(rows, steps))
    assert cyc.source is CycleSource.PROFILER_STEP and cyc.n == 5  # the enum the plan names too
    marks = [{"name": "cycle", "start_ns": t, "end_ns": t, "source": "perfdiff"} for t in (0, 250, 500, 900)]
    cyc = segment_cycles(run_of(rows, steps + marks))
    assert cyc.source is CycleSource.PERFDIFF_MARKERS
    assert cyc.start_ns.tolist() == [0, 250, 500] and cyc.end_ns.tolist() == [250, 500, 900]


def test_regex_on_kernels_and_windows() -> None:
    rows = [k("Fan1" if i % 2 == 0 else "Fan2", i * 100, i * 100 + 10) for i in range(10)]
    cyc = segment_cycles(run_of(rows), cycle_regex="Fan1")
    assert cyc.source is CycleSource.REGEX and cyc.n == 4
    cyc = segment_cycles(run_of(rows), window_ns=200)
    assert cyc.source == "window" and cyc.start_ns.tolist() == [0, 200, 400, 600, 800]
    with pytest.raises(InputError, match="no marker or kernel matches"):
        segment_cycles(run_of(rows), cycle_regex="nothing")


def test_parse_duration() -> None:
    assert parse_duration_ns("100ms") == 100_000_000
    assert parse_duration_ns("2s") == 2_000_000_000
    assert parse_duration_ns("1.5us") == 1500
    with pytest.raises(InputError):
        parse_duration_ns("0ms")


def test_tau_over_a_partition_is_the_cycle_change() -> None:
    """τ summed over functions that tile every cycle equals the relative cycle-time change."""
    def tiled(durs_a: list[int], durs_b: list[int], n: int, offset: int) -> RunData:
        rows, marks, t = [], [], 0
        for c in range(n):
            a, b = durs_a[c % len(durs_a)], durs_b[c % len(durs_b)]
            rows += [k("A", t, t + a, kind="cpu", device="Host"), k("B", t + a, t + a + b, kind="cpu", device="Host")]
            marks.append({"name": "step", "start_ns": t, "end_ns": t + a + b, "source": "perfdiff"})
            t += a + b + offset * 0
        return run_of(rows, marks)
    n_run = tiled([1000, 1100, 900], [500, 520, 480], 12, 0)
    a_run = tiled([1000, 1100, 900], [1500, 1560, 1440], 12, 0)
    cn, ca = segment_cycles(n_run), segment_cycles(a_run)
    c = compare_runs(n_run, a_run, cn, ca)
    tau = {f.name: f.tau_pp for f in c.functions}
    d_n, d_a = cn.dur_ns.mean(), ca.dur_ns.mean()
    assert tau["A"] == pytest.approx(0.0, abs=1e-9)
    assert sum(tau.values()) == pytest.approx(100 * (d_a - d_n) / d_a)
    assert c.functions[[f.name for f in c.functions].index("B")].q_t <= 0.05


def test_samples_point_intervals() -> None:
    samples = [{"metric": "m", "device": "Host", "t_start_ns": t, "t_end_ns": t, "value": v}
               for t, v in ((0, 1.0), (100, 3.0), (200, float("nan")), (300, 5.0))]
    s = sample_series(run_of([], None, samples))[("m", "Host")]
    assert s.dropped_nonfinite == 1
    assert s.t1.tolist() == [100, 200, 400]  # a point reading lasts until the next one


def test_renamed_cpu_range_is_matched_across_runs() -> None:
    def one(name: str, d: int) -> RunData:
        rows = [k(name, i * 1000, i * 1000 + d, kind="cpu", device="Host") for i in range(8)]
        rows += [k("train_step", i * 1000 + 500, i * 1000 + 900, kind="cpu", device="Host") for i in range(8)]
        marks = [{"name": "ProfilerStep#%d" % i, "start_ns": i * 1000, "end_ns": i * 1000 + 1000,
                  "source": "profiler_step"} for i in range(8)]
        return run_of(rows, marks)
    n = one("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 10)
    a = one("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 400)
    c = compare_runs(n, a, segment_cycles(n), segment_cycles(a))
    loader = [f for f in c.functions if f.name.startswith("enumerate")]
    assert len(loader) == 1 and loader[0].presence == "both"
    assert "⇄" in loader[0].name and loader[0].t_a_us > loader[0].t_n_us
    assert c.renames == (("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                          "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),)


def test_names_alike_only_by_a_wrapper_or_run_apart_are_two_steps() -> None:
    """A rename is the same step under another name: the parts only one name has share a word
    of their own, or are numbers (a source line that moved), and where cycles are iterations
    it runs about as often.  HTA's pair matched "…evaluate_function: CloneBackward0" (5 calls)
    with "…: CompiledFunctionBackward" (1) by their shared wrapper alone, and read a new
    compiled function as a clone ×156 slower; "Backward0" alone made Mul and Div alike."""
    from perfdiff.analyze.align import match_renamed

    def keys(*names: str) -> list[tuple[str, str, str]]:
        return [(x, "Host", "cpu") for x in names]

    wrap = "autograd::engine::evaluate_function: "
    for a, b in [("CloneBackward0", "CompiledFunctionBackward"), ("SplitBackward0", "CompiledFunctionBackward"),
                 ("MulBackward0", "DivBackward0"), ("AddBackward0", "SubBackward0"),
                 ("ReluBackward0", "GeluBackward0")]:
        assert match_renamed(keys(wrap + a), keys(wrap + b)) == [], (a, b)
    assert match_renamed(keys("aten::relu"), keys("aten::gelu")) == []
    for a, b in [("torch/nn/modules/linear.py(114): forward", "torch/nn/modules/linear.py(116): forward"),
                 ("loader.DataLoaderIter.next", "loader.DataLoaderIterator.next")]:
        assert match_renamed(keys(a), keys(b)) == [(keys(a)[0], keys(b)[0])], (a, b)
    moved = keys("torch/nn/modules/linear.py(114): forward"), keys("torch/nn/modules/linear.py(116): forward")
    assert match_renamed(*moved, {moved[0][0]: 1.0}, {moved[1][0]: 1.4}) == [(moved[0][0], moved[1][0])]
    assert match_renamed(*moved, {moved[0][0]: 5.0}, {moved[1][0]: 1.0}) == []  # five calls against one
    assert match_renamed(*moved, {moved[0][0]: 0.0}, {moved[1][0]: 1.0}) == []


def test_a_renamed_step_in_windows_is_matched_whatever_its_speed() -> None:
    """Calls per window scale with speed: a step renamed and 3× slower runs 3 → 1 times a
    window, which the calls rule (for iterations) would take for two steps."""
    from perfdiff.segment import fixed_windows

    def one(name: str, step: int) -> RunData:
        rows = [k(name, i * step, i * step + step // 2, kind="cpu", device="Host") for i in range(60 // (step // 1000))]
        return run_of(rows)
    n = one("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 1000)
    a = one("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 3000)
    c = compare_runs(n, a, fixed_windows(n, 3000), fixed_windows(a, 3000))
    assert len(c.renames) == 1


def test_overlapping_cycles_count_a_row_in_each_it_overlaps() -> None:
    """Marker ranges from several threads can overlap: no fast path to a single cycle then."""
    cyc = Cycles(np.array([0, 50, 200]), np.array([100, 150, 300]), CycleSource.WINDOW, "")
    m = attribute_activity(run_of([k("r", 60, 90, kind="cpu", device="Host")]), cyc)
    assert m.own_ns[0].tolist() == [30, 30, 0]


def test_zero_length_rows_outside_every_cycle_are_unattributed() -> None:
    cyc = Cycles(np.array([100, 300]), np.array([200, 400]), CycleSource.WINDOW, "")
    run = run_of([
        k("before", 50, 50, kind="cpu", device="Host"),  # before the first cycle
        k("gap", 250, 250, kind="cpu", device="Host"),  # between two cycles
        k("start", 300, 300, kind="cpu", device="Host"),  # at a cycle's start: inside it
        k("busy", 120, 150, kind="cpu", device="Host"),
    ])
    m = attribute_activity(run, cyc)
    names = list(m.keys["name"])
    cycle_of = {names[f]: int(c) for f, c in zip(m.row_func, m.row_cycle, strict=True)}
    assert cycle_of == {"before": -1, "gap": -1, "start": 1, "busy": 0}
    assert dict(zip(names, m.calls_total.tolist(), strict=True)) == {"before": 0, "gap": 0, "start": 1, "busy": 1}
    assert m.own_ns[names.index("busy")].tolist() == [30, 0] and m.unattributed_rows == 2


@pytest.mark.parametrize("cycles", [2, 5000])
def test_split_rows_add_to_whole_rows_the_same_with_few_or_many_cycles(cycles: int) -> None:
    """Rows split over cycles are added after the whole ones, by np.add.at when they are few
    against functions × cycles (5000 cycles here) and by a bincount when many (2 cycles)."""
    cyc = Cycles(np.arange(cycles) * 100, np.arange(cycles) * 100 + 100, CycleSource.WINDOW, "")
    run = run_of([
        k("w", 10, 40, launch=5), k("w", 120, 130, launch=110),  # whole, by launch
        k("h", 20, 30, kind="cpu", device="Host"),  # whole, fast path
        k("h", 90, 130, kind="cpu", device="Host"),  # split: 10 in cycle 0, 30 in cycle 1
        k("x", 50, 250, kind="cpu", device="Host"),  # split over three cycles (or two)
    ])
    m = attribute_activity(run, cyc)
    own = {n: m.own_ns[i] for i, n in enumerate(m.keys["name"])}
    assert own["w"][:2].tolist() == [30, 10] and own["h"][:2].tolist() == [20, 30]
    assert own["x"][:3].tolist() == ([50, 100, 50] if cycles > 2 else [50, 100])
    assert sum(v.sum() for v in own.values()) == 40 + 50 + (200 if cycles > 2 else 150)
    names = list(m.keys["name"])
    assert dict(zip(names, m.calls_total.tolist(), strict=True)) == {"w": 2, "h": 2, "x": 1}
    assert dict(zip(names, m.incl_total_ns.tolist(), strict=True)) == {
        "w": 40, "h": 50, "x": 200 if cycles > 2 else 150}


def test_a_run_without_collective_kernels_is_not_ordered_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """closing_collective reads the names before it orders the kernels (millions, at 0.1 s a
    side on the 2 M-kernel nsys pair): without a collective kernel it never orders them."""
    from perfdiff.segment import sequence

    seq = [k(f"k{i % 3}", 10 * i, 10 * i + 5) for i in range(60)]
    plain = run_of(seq)
    ordered: list[int] = []
    real_order = sequence.kernel_order
    monkeypatch.setattr(sequence, "kernel_order", lambda r: ordered.append(1) or real_order(r))
    assert sequence.closing_collective(plain) is None and not ordered
    nccl = run_of(seq + [k("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                           10 * i + 6, 10 * i + 8) for i in range(0, 60, 3)])
    sequence.closing_collective(nccl)
    assert ordered


def test_sampled_marks_the_host_states_read_as_counters_only() -> None:
    """keys.sampled: a host function whose rows are all a counter's (no thread); with no
    counter row at all (a trace) nothing is, and the two sums over the rows are skipped."""
    cyc = Cycles(np.array([0, 100]), np.array([100, 200]), CycleSource.WINDOW, "")
    rows = [k("kern", 10, 20), {**k("oncpu", 0, 100, kind="host", device="Host"), "tid": 7},
            k("iowait", 0, 100, kind="host", device="Host"), k("iowait", 100, 200, kind="host", device="Host")]
    keys = attribute_activity(run_of(rows), cyc).keys
    assert dict(zip(keys["name"], keys["sampled"], strict=True)) == {"kern": False, "oncpu": False, "iowait": True}
    keys = attribute_activity(run_of(rows[:2]), cyc).keys
    assert dict(zip(keys["name"], keys["sampled"], strict=True)) == {"kern": False, "oncpu": False}
    assert keys["sampled"].dtype == bool


@pytest.mark.parametrize("scale", [1, 2 ** 52])  # exact sums in float64; beyond 2**53 the groupby
def test_gpu_busy_by_device_sums_each_gpus_work(scale: int) -> None:
    from perfdiff.segment import gpu_busy_by_device

    rows = [k("a", 0, 10, device="GPU 1"), k("b", 10, 40, device="GPU 0"), k("c", 40, 41, device="GPU 1"),
            k("z", 50, 50, device="GPU 2"),  # busy 0: left out
            k("cpu", 0, 500, kind="cpu", device="Host")]
    run = run_of(rows)
    run.activity["busy_ns"] *= scale
    got = gpu_busy_by_device(run)
    assert got == {"GPU 0": 30.0 * scale, "GPU 1": 11.0 * scale}
    assert list(got) == ["GPU 0", "GPU 1"]  # the devices' order
