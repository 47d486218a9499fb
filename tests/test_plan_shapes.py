"""No plan cuts pieces shorter than the work they must hold: an idle-gap threshold under a
launch's latency, or cycles shorter than the median kernel, is passed over (and said); fixed
windows only over stationary work; where nothing passes, the pair is compared by totals."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_segment_attribute import k, run_of

from perfdiff.cycles import cut_cycles, plan_pair, summarize_cycles
from perfdiff.model.cycles import PassReason, Regime
from perfdiff.model.schema import CycleSource


def plan_of(a, b):
    return plan_pair(summarize_cycles(a), summarize_cycles(b))


@st.composite
def timelines(draw) -> list[dict]:
    """Kernels in bursts (some of one short kernel, where `mixed`): each kernel 1 ns – 2 ms, the gaps inside a burst up to 10 ns or 3 µs
    (launch gaps), between bursts up to 40 ns (a diffusion step's, "idle gaps longer than
    4.69 ns") … 5 ms; names from a few."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bursts = draw(st.integers(1, 40))
    scale = draw(st.sampled_from([10, 1_000, 100_000, 2_000_000]))
    inside = draw(st.sampled_from([10, 3_000]))
    between = draw(st.sampled_from([0, 40, 3_000, 50_000, 5_000_000]))
    rows, t = [], 0
    mixed = draw(st.booleans())  # bursts of one short kernel among bursts of many long ones
    for _ in range(bursts):
        short = mixed and rng.random() < 0.6
        for _ in range(1 if short else int(rng.integers(1, 30))):
            d = int(rng.integers(1, (10 if short else scale) + 1))
            rows.append(k(str(rng.choice(list("ABCDE"))), t, t + d))
            t += d + int(rng.integers(0, inside + 1))
        t += int(rng.integers(0, between + 1))
    return rows


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines(), timelines())
def test_no_plan_cuts_pieces_shorter_than_their_work(rows_n: list[dict], rows_a: list[dict]) -> None:
    a, b = run_of(rows_n), run_of(rows_a)
    plan = plan_of(a, b)
    if plan.source == CycleSource.IDLE_GAPS:
        assert plan.threshold_ns is not None and plan.threshold_ns >= 2_000  # a launch's latency
    if plan.regime is Regime.TOTALS:
        return
    for run in (a, b):
        cyc = cut_cycles(run, plan)
        kern = run.activity
        median_kernel = float(np.median((kern["end_ns"] - kern["start_ns"]).to_numpy()))
        if plan.source == CycleSource.IDLE_GAPS:  # the plan checks the median cycle exactly here
            assert float(np.median(cyc.dur_ns)) >= median_kernel


def test_launch_gaps_give_no_idle_gap_cycles_and_the_report_says_why() -> None:
    """A diffusion step's kernels, 5 ns apart with a 40 ns gap now and then: cut at "GPU idle
    gaps longer than 4.69 ns" it gave ~560 cycles of 42 µs; now passed over, said, and the
    pair is compared by totals."""
    def step(seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for i in range(3_000):
            d = int(rng.integers(20_000, 60_000))
            rows.append(k(f"K{rng.integers(0, 7)}", t, t + d))
            t += d + (40 if i % 5 == 4 else 2)
        return rows
    plan = plan_of(run_of(step(1)), run_of(step(2)))
    assert plan.regime is Regime.TOTALS
    assert any(r.why is PassReason.GAP_UNDER_LAUNCH for r in plan.rejected)
    from perfdiff.render.totals import rejected_text
    assert "under a kernel launch's latency" in rejected_text(plan)


def one_shot(kernel: str, launches: int, span_ns: int) -> list[dict]:
    """A one-shot program: a copy in, `launches` launches of one kernel back to back (launch
    gaps of 1 µs), a copy out."""
    rows = [k("memcpy HtoD", 0, 2_000_000, kind="memcpy")]
    each = (span_ns - 4_000_000) // launches
    t = 2_000_000
    for _ in range(launches):
        rows.append(k(kernel, t, t + each - 1_000))
        t += each
    rows.append(k("memcpy DtoH", t, t + 2_000_000, kind="memcpy"))
    return rows


def test_a_one_shot_program_is_compared_by_totals_not_windows() -> None:
    """862 launches of one kernel become 18 of another, GPU span 128 → 96 ms: cut into fixed
    100 ms windows of unrelated work the verdict read "new or added work: ioctl".  Now the
    pair is compared by totals, no windows, and the verdict says fewer, longer launches: A's
    800 became B's 20."""
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.evidence import FindingCode
    from perfdiff.analyze.findings import build_findings
    from perfdiff.analyze.verdict import build_verdict
    from perfdiff.analyze.verdict_records import LaunchStructureDetail, VerdictCode
    from perfdiff.render.text import NameTable
    from perfdiff.render.totals import totals_head
    from perfdiff.render.wording import verdict_lines

    a, b = run_of(one_shot("A", 800, 128_000_000)), run_of(one_shot("B", 20, 96_000_000))
    plan = plan_of(a, b)
    assert plan.regime is Regime.TOTALS and plan.source == CycleSource.WINDOW
    assert any(r.source == CycleSource.WINDOW for r in plan.rejected)
    cn, ca = cut_cycles(a, plan), cut_cycles(b, plan)
    assert cn.n == ca.n == 1 and "whole run" in cn.detail
    c = compare_runs(a, b, cn, ca, plan=plan)
    findings = build_findings(c)
    verdict = build_verdict(c, findings)
    assert [x.code for x in findings][:2] == [FindingCode.STEP_CHANGE, FindingCode.LAUNCH_STRUCTURE]
    assert [v.code for v in verdict] == [VerdictCode.FEWER_LONGER_LAUNCHES]
    d = verdict[0].detail
    assert isinstance(d, LaunchStructureDetail) and (d.gone, d.new, d.calls_n, d.calls_a) == ("A", "B", 800, 20)
    lines = " ".join(verdict_lines(c, verdict, findings, NameTable.plain()))
    assert "**fewer, longer launches**: 800 calls of **A** (" in lines and "became 20 of **B**" in lines
    assert totals_head(c, findings).startswith("run 128 ms → 96 ms, -25.0%")
    assert "not tested" in totals_head(c, findings)


def test_a_stationary_loop_still_gets_windows() -> None:
    """Work with no repeating order and no idle gaps, alike over the run: fixed windows."""
    rng = np.random.default_rng(3)
    rows, t = [], 0
    while t < 2_000_000_000:
        d = int(rng.integers(1_000_000, 3_000_000))
        rows.append(k(str(rng.choice(list("ABCD"))), t, t + d))
        t += d
    plan = plan_of(run_of(rows), run_of(rows))
    assert plan.source == CycleSource.WINDOW and plan.regime is Regime.CYCLES


def test_a_kernel_slower_per_call_in_one_shot_runs_is_named_and_tested_per_call() -> None:
    """One piece per run: the launches are the samples; a kernel ×1.5 per launch is named
    "slower per call" with its calls counted, the totals untested."""
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.findings import build_findings
    from perfdiff.analyze.verdict import build_verdict
    from perfdiff.analyze.verdict_records import VerdictCode
    from perfdiff.render.text import NameTable
    from perfdiff.render.totals import totals_lines

    def run(scale: float, seed: int):
        rng = np.random.default_rng(seed)
        rows, t = [k("memcpy HtoD", 0, 2_000_000, kind="memcpy")], 2_000_000
        for name in rng.permutation(["A"] * 100 + ["B"] * 100):  # in no repeating order
            d = int((200_000 * scale if name == "A" else 100_000) * rng.uniform(0.95, 1.05))
            rows.append(k(str(name), t, t + d))
            t += d + 1_000
        return run_of(rows)
    a, b = run(1.0, 1), run(1.5, 2)
    plan = plan_of(a, b)
    assert plan.regime is Regime.TOTALS
    c = compare_runs(a, b, cut_cycles(a, plan), cut_cycles(b, plan), plan=plan)
    tested = {t.name: t for t in c.per_call}
    assert tested["A"].q < 0.05 and tested["B"].q > 0.05 and tested["A"].calls_n == 100
    findings = build_findings(c)
    lines = " ".join(totals_lines(c, findings, NameTable.plain()))
    assert "**slower per call**: A median" in lines and "B median" not in lines
    assert [v.code for v in build_verdict(c, findings)] == [VerdictCode.GPU_KERNEL]


def test_one_step_of_repeated_blocks_is_cut_at_the_block() -> None:
    """One profiler step per run holding 28 repeats of a block, one kernel swapped in the
    abnormal run: the runs are cut at the block (sub-cycles), the report says so at the top,
    and the swap is named."""
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.findings import build_findings
    from perfdiff.analyze.result import ComparisonResult, CycleTimes
    from perfdiff.render.markdown import render_markdown

    def step(swap: bool):
        rows, t = [], 1_000
        for _ in range(28):
            for name in ("A", "B", "E" if swap else "C", "D"):
                rows.append(k(name, t, t + 20_000))
                t += 21_000
            t += 500
        return run_of(rows, [{"name": "ProfilerStep#7", "start_ns": 0, "end_ns": t + 1_000, "source": "kineto"}])
    a, b = step(False), step(True)
    plan = plan_of(a, b)
    assert plan.source == CycleSource.KERNEL_SEQUENCE and plan.regime is Regime.CYCLES
    cn, ca = cut_cycles(a, plan), cut_cycles(b, plan)
    assert cn.n == ca.n == 27
    c = compare_runs(a, b, cn, ca, plan=plan)
    found = build_findings(c)
    md = render_markdown(ComparisonResult(analysis=c, findings=tuple(found), verdict=(), manifests=(a.manifest, b.manifest),
                                          cycle_times=(CycleTimes(cn.start_ns, cn.end_ns), CycleTimes(ca.start_ns, ca.end_ns))))
    assert "**Cycles: 27 repeats of a kernel sequence inside 1 step per run.**" in "\n".join(md.splitlines()[:8])
    assert {f.name: f.presence for f in c.functions if f.name in "CE"} == {"C": "vanished", "E": "new"}


def test_idle_gap_cycles_shorter_than_the_median_kernel_are_passed_over() -> None:
    """Bursts of one 1 µs kernel 10 µs apart between a few bursts of long kernels: cut at the
    10 µs gaps most cycles would hold less than the median kernel (1 ms)."""
    def run(seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for _ in range(60):
            if rng.random() < 0.3:  # in no repeating order
                for _ in range(int(rng.integers(6, 10))):
                    d = int(rng.integers(900_000, 1_100_000))
                    rows.append(k("long", t, t + d))
                    t += d + 10
            else:
                rows.append(k("tiny", t, t + 1_000))
                t += 1_000
            t += 10_000
        return rows
    plan = plan_of(run_of(run(1)), run_of(run(2)))
    assert plan.source != CycleSource.IDLE_GAPS
    assert any(r.why is PassReason.SHORTER_THAN_KERNEL and r.source == CycleSource.IDLE_GAPS for r in plan.rejected)


def test_the_plans_regime_not_the_count_of_cycles_makes_calls_samples() -> None:
    """A pair compared by totals can still hold MIN_CYCLES steps on one side (1 step against 8):
    its calls are the per-call tests' samples all the same.  The side's attribution once asked
    'fewer than MIN_CYCLES cycles?' of its own, and that side then had no calls to test."""
    from dataclasses import replace

    from perfdiff.api import _attribute_side
    from perfdiff.cycles import CutSide
    from perfdiff.model.cycles import CyclePlan
    from perfdiff.rangetree import range_nesting

    run = run_of([k("A", i * 1_000, i * 1_000 + 400) for i in range(8)], None)
    plan = CyclePlan(CycleSource.WINDOW, window_ns=1_000, regime=Regime.TOTALS)
    cut = CutSide(run, cut_cycles(run, replace(plan, regime=Regime.CYCLES)), totals=True)
    assert cut.cycles is not None and cut.cycles.n >= 5
    side = _attribute_side(cut, range_nesting(run), (False, False))
    starts = np.arange(8) * 1_000  # the launches that start inside the cut's cycles are the samples
    inside = int(((starts >= cut.cycles.start_ns[0]) & (starts < cut.cycles.end_ns[-1])).sum())
    assert side.calls is not None and len(next(iter(side.calls.values()))) == inside >= 5
    cycles = _attribute_side(replace(cut, totals=False), range_nesting(run), (False, False))
    assert cycles.calls is None
