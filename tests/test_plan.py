"""One cycle plan for the pair: both runs are cut by the same definition, chosen from what
both offer; a source one run lacks is passed over, never compared."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_segment_attribute import k, run_of

import perfdiff
from perfdiff.errors import InputError
from perfdiff.model.schema import CycleSource
from perfdiff.parallel import Parallel
from perfdiff.cycles import cut_cycles, plan_pair, summarize_cycles
from perfdiff.render.text import NameTable
from perfdiff.render.wording import plan_text
from perfdiff.bundle import RunData
from perfdiff.segment import kernel_period

RODINIA = "kmcho2019/Rodinia_3.1_Gaussian"

PLAIN = NameTable.plain()  # sentences worded outside a report: every name its plain cut


def ranges(name: str, n: int, length: int, t0: int = 0, every: int = 1000) -> list[dict]:
    return [{"name": name, "start_ns": t0 + i * every, "end_ns": t0 + i * every + length, "source": "nvtx"}
            for i in range(n)]


def kernels(n: int, every: int = 1000) -> list[dict]:
    return [k("K", i * every + 5, i * every + 15) for i in range(n)]


def plan_of(run_n, run_a, **kw):
    return plan_pair(summarize_cycles(run_n), summarize_cycles(run_a), **kw)


def test_repeated_ranges_that_differ_in_count_get_one_plan() -> None:
    """Each run on its own would take a different range (the one covering most of it); the
    pair takes one range both have, and both runs are cut by it."""
    a = run_of(kernels(40), ranges("clear", 7, 5, 0, 5000) + ranges("step", 4, 600, 100, 9000))
    b = run_of(kernels(40), ranges("clear", 30, 5, 0, 1000) + ranges("step", 4, 90, 100, 9000))
    assert summarize_cycles(a).ranges["step"][1] > summarize_cycles(a).ranges["clear"][1]
    assert summarize_cycles(b).ranges["clear"][1] < summarize_cycles(b).ranges["step"][1] * 2
    plan = plan_of(a, b)
    assert plan.source == CycleSource.ANNOTATION and plan.name == "step"
    ca, cb = cut_cycles(a, plan), cut_cycles(b, plan)
    assert "'step'" in ca.detail and "'step'" in cb.detail
    # 'step' holds few of the kernels: each cycle runs to the next one's start (see below)
    assert plan.to_next_start and ca.n == cb.n == 3


def test_a_repeating_range_cuts_from_start_to_start_whatever_it_holds() -> None:
    """A data-loader range before each step's kernels was the cycle by itself: every kernel
    fell outside the cycles and a slower kernel read "no material change".  A range around
    the compute only hid a slower data loader, and one run's range holding the loader while
    the other's did not read as an input stall.  Cycles now run from one range's start to
    the next's: the whole iteration, whatever the range holds."""
    def steps(kernel_ns: int, loader_ns: int = 50, around: str = "loader") -> tuple[list[dict], list[dict]]:
        rows, marks, t = [], [], 0
        for _ in range(6):
            step = t
            rows.append(k("loader", t, t + loader_ns, kind="cpu", device="Host"))
            t += loader_ns
            for _ in range(10):
                rows.append(k("K", t, t + kernel_ns))
                t += kernel_ns + 10
            start, end = {"loader": (step, step + loader_ns), "compute": (step + loader_ns, t),
                          "step": (step, t)}[around]
            marks.append({"name": "step_range", "start_ns": start, "end_ns": end, "source": "nvtx"})
        return rows, marks
    a, b = run_of(*steps(100)), run_of(*steps(300))
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.to_next_start) == (CycleSource.ANNOTATION, "step_range", True)
    ca, cb = cut_cycles(a, plan), cut_cycles(b, plan)
    assert ca.n == cb.n == 5 and np.all(np.diff(ca.start_ns) == 50 + 10 * 110)
    assert "running to the next one's start" in ca.detail and "from one's start to the next's" in plan_text(plan, PLAIN)
    a, b = run_of(*steps(100, around="compute")), run_of(*steps(100, loader_ns=500, around="compute"))
    assert np.all(np.diff(cut_cycles(b, plan_of(a, b)).start_ns) == 500 + 10 * 110)  # the loader is in the cycle
    a, b = run_of(*steps(100, 500, around="compute")), run_of(*steps(100, 500, around="step"))
    ca, cb = cut_cycles(a, plan_of(a, b)), cut_cycles(b, plan_of(a, b))
    assert np.array_equal(ca.dur_ns, cb.dur_ns)  # the range moved, the iterations did not



def test_a_range_repeated_within_each_step_is_no_iteration() -> None:
    """A per-layer range (8 a step) made each layer a cycle, and a slower data loader fell in
    one of eight.  The step's kernel sequence (its own embedding, loss and optimizer kernels)
    shows the range repeats within it: the kernel sequence cuts the steps."""
    rows = _loss_steps(30, 1, loader_ns=2_000)
    layer_starts = [r["start_ns"] for r in rows if r["function"] == "A"]
    marks = [{"name": "TransformerLayer", "start_ns": t, "end_ns": t + 350, "source": "nvtx"} for t in layer_starts]
    run = run_of(rows, marks)
    plan = plan_of(run, run)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and cut_cycles(run, plan).n == 29

def test_a_source_one_run_lacks_is_passed_over() -> None:
    steps = [{"name": f"ProfilerStep#{i}", "start_ns": i * 1000, "end_ns": i * 1000 + 900,
              "source": "profiler_step"} for i in range(5)]
    a = run_of(kernels(40), steps)
    b = run_of(kernels(40))
    plan = plan_of(a, b)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and plan.name == "K"
    assert ("profiler-step", 5, 0) in plan.one_sided
    assert cut_cycles(a, plan).source == cut_cycles(b, plan).source == "kernel-sequence"


def test_kernel_anchor_found_in_one_run_is_used_in_both() -> None:
    """The abnormal run's kernel order is scrambled (no period), but it launches the normal
    run's anchor kernel: both are cut at it."""
    rng = np.random.default_rng(1)
    a = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(["A", "B", "C"] * 20)])
    names = ["A"] + list(rng.permutation(["B", "C"] * 19 + ["A"] * 19))
    b = run_of([k(str(n), t * 100, t * 100 + 10) for t, n in enumerate(names)])
    assert summarize_cycles(b).period is None
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.period) == (CycleSource.KERNEL_SEQUENCE, "A", 3)
    assert cut_cycles(b, plan).n == 19


def test_idle_gaps_use_one_threshold_from_both_runs() -> None:
    def bursts(gap: int, n: int = 20) -> list[dict]:
        rng = np.random.default_rng(gap)
        rows, t = [], 0
        for _ in range(n):
            for name in rng.permutation(["A", "B", "C", "D", "E"])[: rng.integers(2, 5)]:
                rows.append(k(str(name), t, t + 100))
                t += 110
            t += gap
        return rows
    a, b = run_of(bursts(50_000)), run_of(bursts(20_000))
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS and plan.threshold_ns is not None
    assert cut_cycles(a, plan).n == 20 and cut_cycles(b, plan).n == 20


def test_nothing_in_common_falls_back_to_windows_and_says_why() -> None:
    a = run_of([k("A", i * 10_000_000, i * 10_000_000 + 10) for i in range(50)])
    plan = plan_of(a, run_of([k("B", 0, 10), k("C", 900_000_000, 900_000_010)]))
    assert plan.source == CycleSource.WINDOW and not plan.chosen_by_user
    md_plan = plan_text(plan, PLAIN)
    assert "no cycle source exists in both runs" in md_plan and "perfdiff.cycle()" in md_plan


def test_user_choice_wins() -> None:
    a = run_of(kernels(40), ranges("step", 10, 500))
    assert plan_of(a, a, window_ns=5000).source == CycleSource.WINDOW
    assert plan_of(a, a, cycle_regex="K").source == CycleSource.REGEX
    with pytest.raises(InputError, match="no marker or kernel matches"):
        cut_cycles(a, plan_of(a, a, cycle_regex="nothing"))


@pytest.mark.real
def test_rodinia_pair_is_cut_by_one_kernel_sequence_plan(real: Path) -> None:
    c = perfdiff.compare(real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite")
    a = c.analysis
    assert a.plan is not None and a.plan.source == CycleSource.KERNEL_SEQUENCE and a.plan.name.startswith("Fan1")
    assert a.normal.cycle_detail == a.abnormal.cycle_detail and a.normal.n_cycles == a.abnormal.n_cycles == 4094
    assert not c.warnings  # one plan: no "segmented differently", no ratio warning
    causes = [f for f in c.findings if f.code.value == "cause"]
    assert causes and causes[0].function.startswith("Fan2")
    md = c.to_markdown()
    assert "Both runs are cut into cycles by one plan: a repeating kernel sequence (2 kernels)" in md
    assert c.to_json()["plan"]["source"] == "kernel-sequence"


def _side(arg: tuple[str, int], cores: int) -> tuple[dict, int]:
    if arg[0] == "bad-first":
        raise InputError("bad in the first step", path="/x/a")
    return {"name": arg[0], "values": np.arange(arg[1])}, arg[1]


def _meet(summaries: list[int]) -> int:
    return sum(summaries)


def _finish(state: dict, decision: int) -> dict:
    if state["name"] == "bad-second":
        raise InputError("bad in the second step", path="/x/b")
    return {**state, "total": decision}


@pytest.mark.parametrize("par", [Parallel.serial(), Parallel(cores=2, pair_min_bytes=0)], ids=["serial", "forked"])
def test_meet_pair_hands_the_summaries_over_and_the_decision_back(par: Parallel) -> None:
    out = par.meet_pair(_side, _meet, _finish, (("a", 10), ("b", 1000)), (1, 1))
    assert [o["total"] for o in out] == [1010, 1010]
    assert np.array_equal(out[1]["values"], np.arange(1000))
    for args, msg in (((("a", 1), ("bad-first", 1)), "/x/a: bad in the first step"),
                      ((("bad-second", 1), ("bad-first", 1)), "/x/a: bad in the first step"),
                      ((("bad-second", 1), ("b", 1)), "/x/b: bad in the second step")):
        with pytest.raises(InputError) as err:
            par.meet_pair(_side, _meet, _finish, args, (1, 1))
        assert str(err.value) == msg


def test_an_anchor_launched_twice_per_step_in_the_other_run_is_not_used() -> None:
    """The normal run's period starts at A; the abnormal run launches A twice a step: cutting
    it at A would halve its cycles, so the plan does not use A there."""
    a = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(["A", "B", "C"] * 20)])
    b = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(["A", "B", "A", "C"] * 20)])
    plan = plan_of(a, b)
    assert not (plan.source == CycleSource.KERNEL_SEQUENCE and plan.name == "A")
    if plan.source == CycleSource.KERNEL_SEQUENCE:
        assert cut_cycles(a, plan).n == cut_cycles(b, plan).n


def test_iteration_gaps_beyond_the_gap_sample_still_give_cycles() -> None:
    """Many small launch gaps and a few long iteration gaps: the long ones are kept exactly in
    the summary, so the pair is cut at them."""
    from perfdiff.segment import gaps as segment

    rng = np.random.default_rng(7)
    rows, t = [], 0
    for _ in range(25):
        for name in rng.choice(["A", "B", "C", "D", "E"], size=int(rng.integers(300, 500))):
            rows.append(k(str(name), t, t + 100))
            t += 100 + int(rng.integers(1, 2_000))
        t += 5_000_000
    run = run_of(rows)
    small = segment.GAP_SAMPLE, segment.GAP_TOP
    try:
        segment.GAP_SAMPLE, segment.GAP_TOP = 200, 50  # the sample far smaller than the gaps
        plan = plan_of(run, run)
    finally:
        segment.GAP_SAMPLE, segment.GAP_TOP = small
    assert plan.source == CycleSource.IDLE_GAPS
    assert cut_cycles(run, plan).n == 25


def test_one_sided_ranges_are_worded_as_ranges_not_cycles() -> None:
    a = run_of(kernels(40), ranges("fwd", 20, 100, 0, 1000))
    b = run_of(kernels(40), ranges("forward", 20, 100, 0, 1000))
    plan = plan_of(a, b)
    assert (CycleSource.ANNOTATION.value, 20, 20) in plan.one_sided
    assert "no name in both" in plan_text(plan, PLAIN) and "annotation (20 cycles" not in plan_text(plan, PLAIN)


def _side_killed_first(arg: tuple[str, int], cores: int) -> tuple[dict, int]:
    import os

    if arg[0] == "oom":
        os.kill(os.getpid(), 9)  # as the kernel's OOM killer would, in the first step
    return _side(arg, cores)


def test_meet_pair_raises_the_first_sides_failure_even_when_it_was_killed() -> None:
    from perfdiff.errors import PerfdiffError

    par = Parallel(cores=2, pair_min_bytes=0)
    with pytest.raises(PerfdiffError, match=r"killed by signal 9"):
        par.meet_pair(_side_killed_first, _meet, _finish, (("oom", 1), ("bad-first", 1)), (1, 1))


def test_meet_pair_runs_here_when_it_cannot_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from perfdiff import parallel

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(parallel.os, "fork", no_fork)
    fds_before = len(os.listdir("/proc/self/fd"))
    out = Parallel(cores=2, pair_min_bytes=0).meet_pair(_side, _meet, _finish, (("a", 3), ("b", 4)), (1, 1))
    assert [o["total"] for o in out] == [7, 7]
    assert len(os.listdir("/proc/self/fd")) == fds_before  # no pipe left open


def test_devices_are_matched_by_activity_only_when_the_indexes_differ() -> None:
    from perfdiff.cycles import match_devices

    def on(device: str, n: int) -> list[dict]:
        return [k("K", i * 1000, i * 1000 + 500, device=device) for i in range(n)]
    a = run_of(on("GPU 3", 40) + on("GPU 5", 10))
    b = run_of(on("GPU 1", 40) + on("GPU 0", 10))
    assert match_devices(summarize_cycles(a), summarize_cycles(b)) == (("GPU 1", "GPU 3"), ("GPU 0", "GPU 5"))
    assert match_devices(summarize_cycles(a), summarize_cycles(a)) == ()
    assert match_devices(summarize_cycles(a), summarize_cycles(run_of(on("GPU 0", 40)))) == ()  # 2 vs 1 GPU
    from perfdiff.cycles import rename_devices

    renamed = rename_devices(b, (("GPU 1", "GPU 3"), ("GPU 0", "GPU 5")))
    assert sorted(set(renamed.activity["device"].astype(str))) == ["GPU 3", "GPU 5"]


def test_runs_without_a_common_cycle_source_are_compared_as_rates() -> None:
    """Fixed windows the tool had to choose: the headline says the runs are compared as rates
    and the causes speak of time per window of wall clock, not per cycle."""
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.findings import build_findings
    from perfdiff.attribute import attribute_activity
    from perfdiff.render.wording import finding_text

    def run(seed: int, slow: float):
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        while t < 2_000_000_000:  # 2 s of work in no repeating order, no idle gaps
            name = str(rng.choice(["A", "B", "C", "D"]))
            d = int(rng.integers(1_000_000, 3_000_000) * (slow if name == "B" else 1.0))
            rows.append(k(name, t, t + d))
            t += d
        return run_of(rows)
    a, b = run(1, 1.0), run(2, 2.0)
    plan = plan_of(a, b)
    assert plan.source == CycleSource.WINDOW and not plan.chosen_by_user
    cn, ca = cut_cycles(a, plan), cut_cycles(b, plan)
    c = compare_runs(a, b, cn, ca, plan=plan, matrices=(attribute_activity(a, cn), attribute_activity(b, ca)))
    found = build_findings(c)
    assert "compared as rates" in finding_text(c, found[0], PLAIN)
    causes = [x for x in found if x.code.value == "cause"]
    assert causes and causes[0].function == "B" and "per 100 ms of wall clock" in finding_text(c, causes[0], PLAIN)
    assert "calls per 100 ms of wall clock" in finding_text(c, causes[0], PLAIN)  # a rate of calls too


def _layered_steps(steps: int, layers: int = 40, loader_ns: int = 5_000, inserts: tuple[int, ...] = (60, 100),
                   x_every: int = 0, warm: int = 0) -> list[dict]:
    """Training steps of `layers` × [A, B, C] kernels, an all-reduce N inserted after the
    kernels at `inserts` (twice a step: no kernel runs once per step), a kernel X at the end
    of every `x_every`-th step, and a host data loader of `loader_ns` before each step (longer
    than a launch's latency, or its idle gap parts no steps: plan.MIN_GAP_NS); first,
    `warm` warm-up kernels W0, W1 … launched five times each."""
    rows, t = [], 0
    for w in range(warm * 5):
        rows.append(k(f"W{w % warm}", t, t + 90))
        t += 100
    for step in range(steps):
        rows.append(k("loader", t, t + loader_ns, kind="cpu", device="Host"))
        t += loader_ns + 10
        names = [n for _ in range(layers) for n in "ABC"]
        for at in sorted(inserts, reverse=True):
            names.insert(at, "N")
        if x_every and step % x_every == x_every - 1:
            names.append("X")
        for name in names:
            rows.append(k(name, t, t + 90))
            t += 100
    return rows


def test_a_step_is_the_period_not_the_layer_inside_it() -> None:
    """The layer's three kernels repeat in 97 % of the positions, but the step's all-reduces
    break it; the step (122 kernels) repeats exactly and is the cycle, cut at every second
    all-reduce.  Each cycle then holds one data-loader call, so a loader ten times slower is
    seen per cycle, where per layer it would fall in one cycle in 40."""
    a, b = run_of(_layered_steps(10)), run_of(_layered_steps(10, loader_ns=100_000))
    assert summarize_cycles(a).period[:5] == (122, "N", 20, 2, False)
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.period, plan.anchor_every, plan.confirmed) == \
        (CycleSource.KERNEL_SEQUENCE, "N", 122, 2, True)
    ca, cb = cut_cycles(a, plan), cut_cycles(b, plan)
    assert ca.n == cb.n == 9 and "every 2 launches of N" in ca.detail
    assert "a cycle starting every 2 launches of **N**" in plan_text(plan, PLAIN)
    dur_a, dur_b = np.diff(ca.start_ns), np.diff(cb.start_ns)
    assert np.all(dur_b - dur_a == 95_000)  # every cycle holds one loader call


def test_a_kernel_every_few_steps_in_one_run_still_shares_the_steps() -> None:
    """The abnormal run launches X every fifth step, so on its own it repeats every five steps;
    it still launches N twice per step, and both runs are cut at the steps."""
    a, b = run_of(_layered_steps(20, loader_ns=0)), run_of(_layered_steps(20, loader_ns=0, x_every=5))
    assert summarize_cycles(b).period[:2] == (611, "X")
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.period, plan.anchor_every, plan.confirmed) == \
        (CycleSource.KERNEL_SEQUENCE, "N", 122, 2, True)
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 19


def test_warm_up_kernels_do_not_crowd_out_the_step() -> None:
    """Eight kernels launched five times at the start were the 'rarest' kernels, and the
    step's period was no longer a candidate: the layer was taken, or nothing."""
    run = run_of(_layered_steps(10, warm=8))
    assert summarize_cycles(run).period[:5] == (122, "N", 20, 2, False)


def test_a_kernel_without_a_name_is_left_out_of_the_sequence() -> None:
    """A null name (category code -1) made np.bincount raise."""
    run = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(list("ABC") * 10 + [None])])
    assert summarize_cycles(run).period[:5] == (3, "A", 10, 1, True)


def test_a_pattern_and_a_window_are_refused_together() -> None:
    a = run_of(kernels(40))
    with pytest.raises(InputError, match="--cycle and --window both choose the cycles"):
        plan_of(a, a, cycle_regex="K", window_ns=5_000)


def test_a_sequence_with_no_longer_structure_keeps_its_shortest_period() -> None:
    """Without kernels of its own, a step is indistinguishable from its layers: the shortest
    period that repeats as well as any other is kept."""
    run = run_of(_layered_steps(10, inserts=()))
    assert summarize_cycles(run).period[:5] == (3, "A", 400, 1, True)


def test_an_anchor_launched_other_than_as_often_per_period_is_unconfirmed() -> None:
    """The abnormal run launches the all-reduce three times a step: cutting it at every second
    launch would not give its steps, so the normal run's anchor is refused there."""
    a, b = run_of(_layered_steps(10)), run_of(_layered_steps(10, inserts=(30, 60, 100)))
    assert summarize_cycles(b).period[:5] == (123, "N", 30, 3, False)
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS  # the gap the data loader leaves before each step
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 10


def _gapped(iterations: int, inner_ns: tuple[int, int], seed: int, *, syncs: int = 0, sync_ns: int = 0,
            between_ns: int = 0, pauses: tuple[int, ...] = (), pause_ns: int = 0,
            kernels: tuple[int, int] = (20, 40)) -> list[dict]:
    """Iterations of `kernels` (a range) kernels in random order (no repeating sequence),
    `inner_ns` apart (a range), `syncs` of them followed by a `sync_ns` wait; `between_ns` of
    idle GPU after each iteration, `pause_ns` more after the iterations in `pauses`."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0
    for it in range(iterations):
        n = int(rng.integers(*kernels))
        waits = set(rng.choice(n - 1, size=syncs, replace=False).tolist()) if syncs else set()
        for i, name in enumerate(rng.choice(list("ABCDEFGH"), size=n)):
            rows.append(k(str(name), t, t + 1_000))
            t += 1_000 + int(rng.integers(*inner_ns)) + (sync_ns if i in waits else 0)
        t += between_ns + (pause_ns if it in pauses else 0)
    return rows


def test_idle_gaps_cut_whole_steps_not_the_waits_inside_them() -> None:
    """Kernels almost back to back (1–3 ns apart), a step's seven 10 µs waits for a
    collective, 1 ms of idle GPU between steps.  The jump from launch gaps to waits is wider
    than the one to step gaps, but only the steps give cycles alike in size."""
    a = run_of(_gapped(12, (1, 4), 1, syncs=7, sync_ns=10_000, between_ns=1_000_000))
    b = run_of(_gapped(12, (1, 4), 2, syncs=7, sync_ns=10_000, between_ns=1_000_000))
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS and 14_000 < (plan.threshold_ns or 0) < 1_000_000
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 12


def test_a_few_pauses_do_not_make_iterations_of_the_runs_between_them() -> None:
    """60 iterations, 100 µs apart with launch gaps of 2–8 µs, and three 50 ms pauses: the
    pauses are the widest jump, but the iterations are the cycles."""
    a = run_of(_gapped(60, (2_000, 8_000), 3, between_ns=100_000, pauses=(13, 31, 47), pause_ns=50_000_000))
    b = run_of(_gapped(60, (2_000, 8_000), 4, between_ns=100_000, pauses=(9, 30, 44), pause_ns=50_000_000))
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS and 8_000 < (plan.threshold_ns or 0) < 100_000
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 60


def test_default_windows_widen_for_runs_too_long_for_a_million_of_them() -> None:
    """A run of 30 h with nothing to cut it by was refused: 100 ms windows, which nobody
    chose, would be more than the million windows a run may have."""
    hours = 3_600 * 10**9
    a = run_of([k("A", 0, 10), k("B", 30 * hours, 30 * hours + 10)])
    b = run_of([k("A", 0, 10), k("B", 20 * hours, 20 * hours + 10)])
    plan = plan_of(a, b)
    assert (plan.source, plan.window_ns, plan.chosen_by_user) == (CycleSource.WINDOW, 200_000_000, False)
    assert cut_cycles(a, plan).n == 540_000 and "fixed windows of 200 ms" in plan_text(plan, PLAIN)
    assert plan_of(b, b).window_ns == 100_000_000  # 20 h: 720,000 windows of the default
    with pytest.raises(InputError, match="choose a window of at least"):
        cut_cycles(a, plan_of(a, b, window_ns=100_000_000))  # one the user chose is refused, as before


def test_regular_pauses_do_not_make_groups_of_iterations_the_cycle() -> None:
    """A 400 µs pause after every 10th iteration: groups of ten are more alike than single
    iterations (their spread shrinks as √10), but the iterations are alike enough and the
    shortest such cut is the cycle."""
    pauses = tuple(range(9, 60, 10))
    a = run_of(_gapped(60, (2_000, 8_000), 5, between_ns=100_000, pauses=pauses, pause_ns=400_000))
    b = run_of(_gapped(60, (2_000, 8_000), 6, between_ns=100_000, pauses=pauses, pause_ns=400_000))
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS and cut_cycles(a, plan).n == cut_cycles(b, plan).n == 60


def test_iterations_beyond_the_longest_gaps_kept_are_judged_on_a_block_of_the_run() -> None:
    """More iterations than long gaps kept: their spread was unknown and three pauses won.
    It is now measured on the cycles within the first gaps of the run."""
    from perfdiff.segment import gaps as segment

    def run(seed: int):
        return run_of(_gapped(300, (2_000, 8_000), seed, between_ns=100_000, pauses=(50, 150, 250),
                              pause_ns=50_000_000, kernels=(3, 6)))
    a, b = run(7), run(8)
    small = segment.GAP_SAMPLE, segment.GAP_TOP
    try:
        segment.GAP_SAMPLE, segment.GAP_TOP = 300, 100
        plan = plan_of(a, b)
    finally:
        segment.GAP_SAMPLE, segment.GAP_TOP = small
    assert plan.source == CycleSource.IDLE_GAPS and cut_cycles(a, plan).n == cut_cycles(b, plan).n == 300


def test_steps_of_identical_layers_are_cut_at_the_idle_gpu_between_them() -> None:
    """Steps of 40 identical layers and nothing else: the sequence repeats per layer (three
    kernels), and a data-loader stall fell in one cycle in 40 ("no material change").  The
    GPU idles between steps, and those alike cycles, of 40 layers each, are the iterations."""
    a = run_of(_layered_steps(10, inserts=()))
    b = run_of(_layered_steps(10, inserts=(), loader_ns=10_000))
    assert summarize_cycles(a).period[:5] == (3, "A", 400, 1, True)
    plan = plan_of(a, b)
    assert plan.source == CycleSource.IDLE_GAPS
    ca, cb = cut_cycles(a, plan), cut_cycles(b, plan)
    assert ca.n == cb.n == 10 and np.all(np.diff(cb.start_ns) - np.diff(ca.start_ns) == 5_000)


def test_a_kernel_of_some_steps_only_leaves_the_loss_kernel_as_anchor() -> None:
    """A kernel launched in half the steps shifts every position after it: no period repeats,
    and the plan fell to 100 ms windows.  The loss kernel still comes once a step, at alike
    distances, and cuts the steps."""
    rng = np.random.default_rng(3)
    rows, t = [], 0
    for _ in range(40):
        names = [n for _ in range(8) for n in "ABCD"] + ["loss", "optim"] + (["amp"] if rng.random() < 0.5 else [])
        for name in names:
            rows.append(k(name, t, t + 90))
            t += 100
    run = run_of(rows)
    period = summarize_cycles(run).period
    assert period is not None and (period.anchor, period.every) == ("loss", 1) and 34 <= period.period <= 35
    plan = plan_of(run, run)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and cut_cycles(run, plan).n == 39


def test_every_mth_launch_starts_at_the_same_place_wherever_the_trace_began() -> None:
    """Cut at every second all-reduce, a trace that began after a step's first all-reduce was
    cut half a step away from one that began before it: ranks of one job, whose cycles are
    matched by number, would then compare half steps."""
    rows = _layered_steps(10)
    second_n = sorted(r["start_ns"] for r in rows if r["function"] == "N")[1]
    late = run_of([r for r in rows if r["start_ns"] >= second_n])
    full = run_of(rows)
    plan = plan_of(full, late)
    assert (plan.name, plan.anchor_every) == ("N", 2)
    step_ns = 5_010 + 122 * 100
    phase_full = set(cut_cycles(full, plan).start_ns % step_ns)
    phase_late = set(cut_cycles(late, plan).start_ns % step_ns)
    assert len(phase_full) == 1 and phase_full == phase_late


def test_too_few_anchor_launches_say_so_not_no_activity() -> None:
    """An anchor launched too rarely in the other run read "no cycles found: no activity"."""
    from perfdiff.model.cycles import CyclePlan

    run = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(list("ABC") * 10)])
    plan = CyclePlan(CycleSource.KERNEL_SEQUENCE, name="A", period=3, anchor_every=8)
    with pytest.raises(InputError, match=r"no cycles found: the anchor kernel A gives 2 cycle start\(s\) "
                                          r"\(10 launch\(es\), one in 8\)"):
        cut_cycles(run, plan)
    gaps = CyclePlan(CycleSource.IDLE_GAPS, threshold_ns=1e9)
    with pytest.raises(InputError, match="split the timeline into only 1 burst"):
        cut_cycles(run, gaps)


def test_segment_says_why_a_cut_found_no_cycles_as_data() -> None:
    """The algorithms return why they found no cycles as a code with its numbers, no sentence."""
    from perfdiff.model.cycles import NoCycles, NoCyclesCode
    from perfdiff.segment import cut_at_gaps, cut_at_kernel, fixed_windows

    run = run_of([k(n, t * 100, t * 100 + 10) for t, n in enumerate(list("ABC") * 10)])
    anchor = cut_at_kernel(run, "A", 3, 8)
    assert anchor is not None and anchor.n == 0 and anchor.detail == ""
    assert anchor.none_found == NoCycles(NoCyclesCode.FEW_ANCHOR_STARTS, name="A", launches=10, every=8, count=2)
    gaps = cut_at_gaps(run, 1e9)
    assert gaps is not None and gaps.none_found == NoCycles(NoCyclesCode.FEW_BURSTS, threshold_ns=1e9, count=1)
    window = fixed_windows(run, 100_000)
    assert window.none_found == NoCycles(NoCyclesCode.UNDER_HALF_WINDOW, span_ns=2910, window_ns=100_000)
    assert fixed_windows(run_of([]), 100).none_found == NoCycles(NoCyclesCode.NO_ACTIVITY)


def test_cycles_counted_from_a_thinned_sample_stand_for_the_gaps_left_out() -> None:
    """Beyond GAP_SAMPLE gaps the sample is thinned, and the count of gaps over a threshold
    read low (31,251 for 50,000), making cycles look larger than they are."""
    from perfdiff.segment import gaps as segment

    rows, t = [], 0
    for _ in range(500):
        for _ in range(10):
            rows.append(k("K", t, t + 100))
            t += 110
        t += 10_000
    run = run_of(rows)
    small = segment.GAP_SAMPLE, segment.GAP_TOP
    try:
        segment.GAP_SAMPLE, segment.GAP_TOP = 1_000, 100
        gaps = summarize_cycles(run).gaps
    finally:
        segment.GAP_SAMPLE, segment.GAP_TOP = small
    assert len(gaps.sample_ns) == 1_000 and abs(gaps.cycles(1_000) - 500) <= 10  # an estimate: 504


def _loss_steps(steps: int, seed: int, *, extra: tuple[str, ...] = (), amp_share: float = 0.0,
                occasional: int = 0, stall_every: int = 0, loader_ns: int = 0) -> list[dict]:
    """Steps of an embedding kernel, 8 layers of A B C D, `extra` kernels, a loss and an
    optimizer kernel, back to back; an AMP kernel in a share of the steps; `occasional`
    kernels launched in 4–6 random steps each; 100 µs of idle GPU after every
    `stall_every`-th step (a logging sync); a host data loader of `loader_ns` before each."""
    rng = np.random.default_rng(seed)
    occ = {f"occ{j}": set(rng.choice(steps, size=int(rng.integers(4, 7)), replace=False).tolist())
           for j in range(occasional)}
    rows, t = [], 0
    for step in range(steps):
        if loader_ns:
            rows.append(k("loader", t, t + loader_ns, kind="cpu", device="Host"))
            t += loader_ns
        names = ["embed"] + [n for _ in range(8) for n in ("A", "B", "C", "D", *extra)] + ["loss", "optim"]
        names += ["amp"] if rng.random() < amp_share else []
        names += [name for name, at in occ.items() if step in at]
        for name in names:
            rows.append(k(name, t, t + 90))
            t += 100
        if stall_every and step % stall_every == stall_every - 1:
            t += 100_000
    return rows


def test_a_kernel_more_per_step_in_one_run_still_shares_the_anchor() -> None:
    """One more kernel per layer in the abnormal run (an unfused op) changes its kernels per
    step; its own period has the same anchor, launched as often, and the runs share it.  The
    rate check refused it and the plan fell to 100 ms windows."""
    a, b = run_of(_loss_steps(60, 1)), run_of(_loss_steps(60, 2, extra=("cast",)))
    assert summarize_cycles(a).period.anchor == summarize_cycles(b).period.anchor == "embed"
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.confirmed) == (CycleSource.KERNEL_SEQUENCE, "embed", True)
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 59


def test_kernels_of_a_few_steps_are_no_regular_anchor() -> None:
    """Kernels launched in 4–6 steps each could look regular by chance (three distances) and
    cut 200 steps into three cycles; a regular anchor needs ten launches, and the loss
    kernel, once a step, is it."""
    for seed in range(6):
        run = run_of(_loss_steps(200, seed, amp_share=0.5, occasional=20))
        period = summarize_cycles(run).period
        assert period is not None and period.anchor in ("embed", "loss", "optim"), (seed, period)


def test_a_sync_every_ten_steps_does_not_make_ten_steps_the_cycle() -> None:
    """The step (its own embedding, loss and optimizer kernels) is the period; the GPU idles
    only at a logging sync every tenth step.  Those gaps give alike cycles of ten periods,
    which replaced the steps: 9 cycles instead of 99."""
    a, b = run_of(_loss_steps(100, 1, stall_every=10)), run_of(_loss_steps(100, 2, stall_every=10))
    assert summarize_cycles(a).period.flat is False
    plan = plan_of(a, b)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and cut_cycles(a, plan).n == 99


def test_an_anchor_renamed_in_one_run_gives_way_to_another_of_the_step() -> None:
    """The abnormal run's embedding kernel got a new name (a kernel library update): the
    normal run's anchor was missing there and, with no idle gaps, the plan fell to 100 ms
    windows.  The step's other once-per-step kernels anchor it instead."""
    a = run_of(_loss_steps(60, 1))
    b = run_of([dict(r, function="embed_v2") if r["function"] == "embed" else r for r in _loss_steps(60, 2)])
    plan = plan_of(a, b)
    assert (plan.source, plan.name, plan.confirmed) == (CycleSource.KERNEL_SEQUENCE, "loss", True)
    assert cut_cycles(a, plan).n == cut_cycles(b, plan).n == 59


def test_a_kernel_every_tenth_step_does_not_make_ten_steps_the_cycle() -> None:
    """A metrics reduction every tenth step makes ten steps the sequence's best repeat: the
    cycles were ten steps long, two of them in 30 steps.  It is all that the step lacks, and
    the step is the cycle."""
    def steps(seed: int) -> list[dict]:
        rows = _loss_steps(30, seed, extra=("E", "F", "G", "H"))
        losses = [r["start_ns"] for r in rows if r["function"] == "loss"]
        return rows + [k("log_metrics", t + 50, t + 60) for t in losses[9::10]]
    a, b = run_of(steps(1)), run_of(steps(2))
    assert summarize_cycles(a).period.period == 67
    plan = plan_of(a, b)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and cut_cycles(a, plan).n == 29


def _named_sequence(names: list[str]) -> RunData:
    """Kernels of the given names back to back, 10 ns each."""
    return run_of([k(n, t * 11, t * 11 + 10, launch=t * 11) for t, n in enumerate(names)])


def test_a_step_with_few_kernels_of_its_own_is_not_cut_into_parts() -> None:
    """The rule for kernels every few steps took a half step that did not repeat at all (a
    kernel twice a step makes half a step a candidate), and a flat layer where the step has
    few kernels of its own (an inference forward pass: embedding and sampling around 32
    identical layers)."""
    fwd, bwd = [f"fwd{i}" for i in range(10)], [f"bwd{i}" for i in range(20)]
    step = ["memset"] + fwd * 12 + ["loss"] + bwd * 12 + ["memset", "allreduce", "adam"]
    assert kernel_period(_named_sequence(step[-3:] + step * 40)).period == len(step)
    layer = [f"layer{i}" for i in range(20)]
    forward = ["embedding"] + layer * 32 + ["argmax"]
    assert kernel_period(_named_sequence(forward * 40)).period == len(forward)


def test_an_optimizer_every_few_micro_batches_is_no_incidental_kernel() -> None:
    """Gradient accumulation: four micro-batches, each with its own loss, then an all-reduce
    and the optimizer, long kernels.  They are few among the names and launches, but not in
    GPU time: the optimizer step stays the period, and a slower all-reduce is seen in every
    cycle, not in one in four."""
    fwd, bwd = [f"fwd{i}" for i in range(10)], [f"bwd{i}" for i in range(10)]
    micro = fwd * 4 + ["loss"] + bwd * 4
    names = (micro * 4 + ["allreduce", "adam"]) * 30
    rows, t = [], 0
    for n in names:
        dur = 2_000 if n in ("allreduce", "adam") else 10
        rows.append(k(n, t, t + dur, launch=t))
        t += dur + 1
    assert kernel_period(run_of(rows)).period == len(micro) * 4 + 2


def test_why_windows_is_a_reason_the_renderer_words() -> None:
    """The cut records why it cut windows and which sources the plan passed over as data;
    the words (naming --window) are the renderer's, and an error still says them."""
    from perfdiff.model.cycles import WindowReason
    from perfdiff.render.cycles_words import cycle_detail

    a = run_of(kernels(40, every=10_000_000))
    chosen = cut_cycles(a, plan_of(a, a, window_ns=50_000_000))
    assert chosen.window_reason is WindowReason.CHOSEN and "--" not in chosen.detail
    assert cycle_detail(chosen) == "fixed windows of 50 ms (chosen with --window)"
    marks = [{"name": "step", "start_ns": i * 1000, "end_ns": i * 1000 + 500, "source": "perfdiff"} for i in range(3)]
    b = run_of([k("B", 0, 10), k("C", 900_000_000, 900_000_010)], marks)
    fallback = cut_cycles(a, plan_of(a, b))
    assert fallback.window_reason is WindowReason.NO_SOURCE and fallback.passed_over == (("perfdiff-markers", 0, 3),)
    assert cycle_detail(fallback) == ("fixed windows of 100 ms (no markers, no repeating kernel sequence, no clear "
                                      "GPU idle gaps) (only 0/3 perfdiff-markers cycle(s) in the normal/abnormal run: "
                                      "too few to compare)")
    with pytest.raises(InputError, match=r"under half a window of 1,000 ms \(chosen with --window\)"):
        cut_cycles(a, plan_of(a, a, window_ns=1_000_000_000))


def test_a_plan_at_markers_most_rank_pairs_offer() -> None:
    """The ranks' second plan: the first marker source both runs of more than half the pairs
    offer, in the order a pair's plan prefers them; none without a majority."""
    from perfdiff.cycles import marker_plan
    from perfdiff.model.cycles import CyclePlan

    both = {CycleSource.PERFDIFF_MARKERS: 3, CycleSource.PROFILER_STEP: 4}
    assert marker_plan(both, 4) == CyclePlan(CycleSource.PERFDIFF_MARKERS)
    assert marker_plan({CycleSource.PERFDIFF_MARKERS: 2, CycleSource.PROFILER_STEP: 3}, 4) == \
        CyclePlan(CycleSource.PROFILER_STEP)
    assert marker_plan({CycleSource.PROFILER_STEP: 2}, 4) is None
