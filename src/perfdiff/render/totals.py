"""Words for a pair compared by totals (Regime.TOTALS: one or a few steps per run, or a
one-shot program), and for the cycle sources a plan passed over (PassReason): no cycles were
invented, so the report says so at the top and reads each run's step, each function's totals
(described, not tested) and the per-call tests (docs/STATISTICS.md, "One step per run")."""
from __future__ import annotations

from perfdiff.analyze.records import Analysis, FunctionStats
from perfdiff.model.cycles import CyclePlan, PassReason, Regime
from perfdiff.model.schema import CycleSource
from perfdiff.render.names import shorten
from perfdiff.render.text import NameTable, fmt_p, fmt_pct, fmt_time_us, md_escape

__all__ = ["is_totals", "rejected_text", "subcycles_text", "totals_head", "totals_lines", "totals_text"]

LISTED = 3  # functions named per line
PER_CALL_LISTED = 2  # functions slower (and faster) per call named on the first screen; the tables hold the rest
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


def totals_head(c: Analysis) -> str:
    """The verdict's first line: the step's (or the run's) change, not tested."""
    what = "step" if c.plan is not None and c.plan.source == CycleSource.PROFILER_STEP else "run"
    n, a = c.normal.median_us, c.abnormal.median_us
    pct = 100.0 * (a / n - 1.0) if n > 0 else float("nan")
    return f"{what} {fmt_time_us(n)} → {fmt_time_us(a)}, {fmt_pct(pct, 1)}; {_pieces(c)}, not tested."


def _total(f: FunctionStats, side: str) -> str:
    return fmt_time_us(f.t_n_us if side == "n" else f.t_a_us)


def totals_lines(c: Analysis, names: NameTable, *, other_hardware: bool = False) -> list[str]:
    """The verdict's lines: the functions slower or faster per call (q ≤ α), and the largest
    vanished and new functions with their totals (fewer, longer launches said).  On
    `other_hardware` the vanished and new work is the other vendor's names for the same work
    (its category table says where the time went): not listed."""
    lines = []
    sig = sorted((t for t in c.per_call if t.q <= c.alpha), key=lambda t: t.p)
    for word, pick in (("slower per call", lambda t: t.median_a_us > t.median_n_us),
                       ("faster per call", lambda t: t.median_a_us < t.median_n_us)):
        lines += [f"**{word}**: {names.md(t.name, 60)} median {fmt_time_us(t.median_n_us)} → "
                  f"{fmt_time_us(t.median_a_us)} (×{t.median_a_us / t.median_n_us:.2f}, {t.calls_n} vs {t.calls_a} "
                  f"calls, Mann–Whitney over the calls q {fmt_p(t.q)})" for t in [t for t in sig if pick(t)][:PER_CALL_LISTED]]
    if c.per_call and not sig:
        lines.append(f"**per call**: {len(c.per_call)} functions in both runs tested (Mann–Whitney over the calls); "
                     f"none slower or faster at q ≤ {c.alpha:g}")
    listed = 0 if other_hardware else LISTED
    gone = sorted((f for f in c.functions if f.presence == "vanished"), key=lambda f: -f.t_n_us)[:listed]
    new = sorted((f for f in c.functions if f.presence == "new"), key=lambda f: -f.t_a_us)[:listed]
    lines += [f"**vanished**: {names.md(f.name, 60)} ({_total(f, 'n')} in {f.calls_n:g} calls)" for f in gone]
    lines += [f"**new**: {names.md(f.name, 60)} ({_total(f, 'a')} in {f.calls_a:g} calls)" for f in new]
    if gone and new and new[0].calls_a < gone[0].calls_n and new[0].per_call_a_us > gone[0].per_call_n_us:
        lines.append(f"fewer, longer launches: {gone[0].calls_n:g} calls of {fmt_time_us(gone[0].per_call_n_us)} "
                     f"became {new[0].calls_a:g} of {fmt_time_us(new[0].per_call_a_us)}")
    if not lines and not other_hardware:
        lines.append("no function is slower or faster per call at q ≤ "
                     f"{c.alpha:g}, and none vanished or is new; totals are in the tables below")
    return lines


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


def rejected_text(plan: CyclePlan | None) -> str:
    """"Passed over, too short or unfit: …" for the sources the plan rejected; "" for none."""
    if plan is None or not plan.rejected:
        return ""
    return "Passed over, unfit: " + "; ".join(_REASONS[r.why](r) for r in plan.rejected) + "."
