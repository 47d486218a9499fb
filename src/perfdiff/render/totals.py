"""Words for a pair compared by totals (Regime.TOTALS: one or a few steps per run, or a
one-shot program), and for the cycle sources a plan passed over (PassReason): no cycles were
invented, so the report says so at the top and reads each run's step, each function's totals
(described, not tested) and the per-call tests (docs/STATISTICS.md, "One step per run")."""
from __future__ import annotations

from perfdiff.analyze.evidence import (Finding, FindingCode, LaunchStructureEvidence, PerCallEvidence,
                                       PerCallNoneEvidence, StepChangeEvidence, TotalsEvidence)
from perfdiff.analyze.records import Analysis
from perfdiff.analyze.verdict_records import VerdictCode
from perfdiff.model.cycles import CyclePlan, PassReason, Regime, Rejected
from perfdiff.model.schema import CycleSource
from perfdiff.render.names import shorten
from perfdiff.render.text import NameTable, fmt_p, fmt_pct, fmt_time_us, md_escape

__all__ = ["TOTALS_CLASSES", "is_totals", "rejected_text", "subcycles_text", "totals_finding", "totals_head",
           "totals_lines", "totals_text", "unfit_text"]

SUB_SOURCES = {CycleSource.KERNEL_SEQUENCE: "a kernel sequence", CycleSource.IDLE_GAPS: "a burst between GPU idle gaps",
               CycleSource.ANNOTATION: "a range"}  # what repeats inside a step, as the report names it


def is_totals(c: Analysis) -> bool:
    """Whether the pair was compared by totals."""
    return c.plan is not None and c.plan.regime is Regime.TOTALS


def _pieces(c: Analysis) -> str:
    """"1 step per run", "2 / 3 steps", "one piece per run (a one-shot program)"."""
    kn, ka = c.normal.n_cycles, c.abnormal.n_cycles
    if c.plan is not None and c.plan.source == CycleSource.PROFILER_STEP:
        count = f"{kn}" if kn == ka else f"{kn} / {ka}"
        return f"{count} step{'s' if max(kn, ka) > 1 else ''} per run"
    return "one piece per run (the whole run)"


def totals_text(c: Analysis) -> str:
    """The lines at the top of a report compared by totals (each narrower than a screen)."""
    return (f"**{_pieces(c).capitalize()}: totals compared; per-call tests.**  No cycles are invented: totals are "
            "described, not tested;\neach call (a kernel's launch, an op's call) is a sample of the per-call "
            "Mann–Whitney tests.")


def subcycles_text(c: Analysis) -> str:
    """"Cycles: 27 repeats of a kernel sequence inside 1 step per run." where the runs hold too
    few profiler steps to compare and the plan cut them at what repeats inside a step (a
    transformer's layers, a diffusion's denoising steps); else ""."""
    plan = c.plan
    if plan is None or plan.regime is not Regime.CYCLES or plan.source not in SUB_SOURCES:
        return ""
    steps = next(((n_n, n_a) for src, n_n, n_a in plan.one_sided if src == CycleSource.PROFILER_STEP.value), None)
    if steps is None or not (steps[0] and steps[1]):
        return ""
    count = f"{steps[0]}" if steps[0] == steps[1] else f"{steps[0]} / {steps[1]}"
    repeats = f"{c.normal.n_cycles}" if c.normal.n_cycles == c.abnormal.n_cycles else \
        f"{c.normal.n_cycles} / {c.abnormal.n_cycles}"
    return (f"**Cycles: {repeats} repeats of {SUB_SOURCES[plan.source]} inside {count} "
            f"step{'s' if max(steps) > 1 else ''} per run.**")



def totals_head(c: Analysis, findings: list[Finding]) -> str:
    """The verdict's first line: the step's (or the run's) change, not tested (STEP_CHANGE)."""
    x = next((f for f in findings if f.code == FindingCode.STEP_CHANGE), None)
    if x is None:  # identical inputs: that one finding
        return f"{_pieces(c)}, not tested."
    e = x.evidence_as(StepChangeEvidence)
    return (f"{'step' if e.step else 'run'} {fmt_time_us(e.n_us)} → {fmt_time_us(e.a_us)}, "
            f"{fmt_pct(e.change_pct, 1)}; {_pieces(c)}, not tested.")


# The verdict's classes a pair compared by totals states as classes; the rest (kernels slower
# per call, new work) rest on findings its own lines state (totals_lines).
TOTALS_CLASSES = (VerdictCode.DIFFERENT_HARDWARE, VerdictCode.IMPLEMENTATION_SWAPPED,
                  VerdictCode.FEWER_LONGER_LAUNCHES, VerdictCode.MORE_SHORTER_LAUNCHES)
LINE_CODES = (FindingCode.PER_CALL, FindingCode.PER_CALL_NONE, FindingCode.VANISHED, FindingCode.NEW)


def totals_lines(c: Analysis, findings: list[Finding], names: NameTable) -> list[str]:
    """The verdict's own lines for a pair compared by totals: the per-call changes, what
    vanished and what is new, one line per finding; a line that says so where there is none
    and no class either."""
    lines = [f"**{LINE_WORDS[x.code](x)}**: " + totals_finding(c, x, names, short=True)
             for x in findings if x.code in LINE_CODES]
    return lines


def _line_word(x: Finding) -> str:
    e = x.evidence
    return ("slower per call" if isinstance(e, PerCallEvidence) and e.slower else "faster per call")


LINE_WORDS = {FindingCode.PER_CALL: _line_word, FindingCode.PER_CALL_NONE: lambda x: "per call",
              FindingCode.VANISHED: lambda x: "vanished", FindingCode.NEW: lambda x: "new"}


def totals_finding(c: Analysis, x: Finding, names: NameTable, *, short: bool = False) -> str:
    """A finding of a pair compared by totals as Markdown (`short`: the verdict's line, its
    word said before it)."""
    if x.code == FindingCode.STEP_CHANGE:
        e = x.evidence_as(StepChangeEvidence)
        return (f"{'Step' if e.step else 'Run'} {fmt_time_us(e.n_us)} → {fmt_time_us(e.a_us)} "
                f"({fmt_pct(e.change_pct, 1)}); {_pieces(c)}: described, not tested.")
    if x.code == FindingCode.PER_CALL:
        p = x.evidence_as(PerCallEvidence)
        text = (f"{names.md(x.function or '', 60)} median {fmt_time_us(p.median_n_us)} → {fmt_time_us(p.median_a_us)} "
                f"(×{p.median_a_us / p.median_n_us:.2f}, {p.calls_n} vs {p.calls_a} calls, Mann–Whitney over the calls "
                f"q {fmt_p(x.q)})")
        return text if short else f"{_line_word(x).capitalize()}: {text}."
    if x.code == FindingCode.PER_CALL_NONE:
        k = x.evidence_as(PerCallNoneEvidence).n_tests
        text = (f"{k} function{'s' if k != 1 else ''} in both runs tested (Mann–Whitney over the calls); "
                f"none slower or faster at q ≤ {c.alpha:g}")
        return text if short else f"Per call: {text}."
    if x.code in (FindingCode.VANISHED, FindingCode.NEW):
        e = x.evidence_as(TotalsEvidence)
        text = f"{names.md(x.function or '', 60)} ({fmt_time_us(e.t_us)} in {e.calls:g} calls)"
        return text if short else f"{'Vanished' if x.code == FindingCode.VANISHED else 'New'}: {text}."
    e = x.evidence_as(LaunchStructureEvidence)
    gone, new = (c.functions[i].name for i in x.related)
    return (f"Launch structure changed on {names.md(x.device or '')}: {e.calls_n:g} calls of **{names.md(gone, 60)}** "
            f"({fmt_time_us(e.per_call_n_us)} each) became {e.calls_a:g} of **{names.md(new, 60)}** "
            f"({fmt_time_us(e.per_call_a_us)} each): "
            + ("fewer, longer launches." if e.fewer_longer else "more, shorter launches."))


_REASONS = {
    PassReason.GAP_UNDER_LAUNCH: lambda r: (f"GPU idle gaps (a threshold of {fmt_time_us(r.value_ns / 1e3)} is under "
                                            f"a kernel launch's latency, {fmt_time_us(r.limit_ns / 1e3)})"),
    PassReason.SHORTER_THAN_KERNEL: lambda r: (f"{r.source.value} (its median cycle, {fmt_time_us(r.value_ns / 1e3)}, "
                                               f"is shorter than the median kernel, {fmt_time_us(r.limit_ns / 1e3)})"),
    PassReason.NOT_STATIONARY: lambda r: (f"fixed windows (the work is not stationary: its kernel mix or GPU busy share "
                                          f"changes by {r.value_ns:.2f} between a run's halves, over {r.limit_ns:.2f})"),
    PassReason.TOO_FEW: lambda r: (f"fixed windows (a run spans {fmt_time_us(r.value_ns / 1e3)}, too few windows of "
                                   f"{fmt_time_us(r.limit_ns / 1e3)})"),
    PassReason.INSIDE_STEP: lambda r: (f"a repeating kernel sequence of {r.period_kernels} kernels (it repeats "
                                       f"{r.step_kernels / max(r.period_kernels, 1):.0f}× between two launches of the "
                                       f"collective that closes each step, **{md_escape(shorten(r.name, 60))}**, "
                                       f"{r.step_kernels} kernels apart: a layer, not the iteration)"),
    PassReason.RANGE_INSIDE_STEP: lambda r: (f"the range **{md_escape(shorten(r.name, 60))}** (it repeats "
                                             f"{r.per_step:.0f}× per iteration: a layer's, not the iteration)"),
}


def unfit_text(rejected: tuple[Rejected, ...]) -> str:
    """The sources a plan passed over as unfit, each with why, "; "-joined ("" for none)."""
    return "; ".join(_REASONS[r.why](r) for r in rejected)


def rejected_text(plan: CyclePlan | None) -> str:
    """"Passed over, too short or unfit: …" for the sources the plan rejected; "" for none."""
    if plan is None or not plan.rejected:
        return ""
    return "Passed over, unfit: " + unfit_text(plan.rejected) + "."
