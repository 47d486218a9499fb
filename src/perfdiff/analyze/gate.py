"""The CI gate: judge a comparison against a threshold, as PASS, REGRESSION or CANNOT_JUDGE
with a stable reason (perfdiff.analyze.gate_records; docs/CI.md, docs/STATISTICS.md "The CI
gate").

A gate never passes on what it did not measure: identical inputs, a run with no GPU work where
the other has some, runs compared by totals (no cycles) or in fixed windows (a window's
duration is the window's, no iteration's), runs on other hardware, and too few cycles for the
test all give CANNOT_JUDGE.  Otherwise a gate is a REGRESSION when its metric grew by at least
the threshold and significantly:

- median: the cycles' Mann–Whitney test (Wilcoxon signed-rank over matched cycles), p ≤ α;
- mean: Welch's t test, p ≤ α (the mean cycle is what throughput feels);
- p95: both runs' distribution-free 95 % CIs of the P95 apart (the abnormal's lower bound
  above the normal's upper bound), as the report's headline states them;
- function:REGEX: each matching function's own time per cycle, its Benjamini–Hochberg q ≤ α.

The numbers are the analysis's (the CYCLE_TIME finding's evidence, the functions' tests);
only the mean's interval (Welch's CI of the difference) is computed here.
"""
from __future__ import annotations

import functools
import math
import re

import numpy as np

from perfdiff.analyze.evidence import CycleTimeEvidence, Finding, FindingCode
from perfdiff.analyze.gate_records import (CycleStats, Gate, GateCheck, GateDecision, GateMetric, GateOutcome, GateReason,
                                           GateSpec, GateTest)
from perfdiff.analyze.records import Analysis
from perfdiff.analyze.verdict_records import VerdictClass, VerdictCode
from perfdiff.model.cycles import PassReason, Regime
from perfdiff.model.schema import GPU_KINDS, CycleSource

NAN = math.nan
P95 = 0.95

__all__ = ["cycle_stats", "cycle_stats_of", "judge", "judge_cycles", "judge_job", "parse_gate",
           "quantile_cycles_needed"]


def parse_gate(text: str) -> Gate:
    """A `--gate-on` value: median, mean, p95 or function:REGEX; ValueError (its message one
    line) for anything else or a regex that does not compile."""
    t = text.strip()
    if t.startswith("function:"):
        pattern = t[len("function:"):]
        if not pattern:
            raise ValueError("function: needs a regular expression, e.g. function:gemm")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
        return Gate(GateMetric.FUNCTION, pattern)
    try:
        metric = GateMetric(t.lower())
    except ValueError:
        raise ValueError(f"expected median, mean, p95 or function:REGEX, not {text!r}") from None
    if metric is GateMetric.FUNCTION:
        raise ValueError("function: needs a regular expression, e.g. function:gemm")
    return Gate(metric)


def welch_ci(a: np.ndarray, n: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Welch's CI of mean(a) − mean(n) (Welch 1947; the Satterthwaite degrees of freedom), in
    the samples' unit; NaN where a side has fewer than two values or no spread."""
    a, n = np.asarray(a, np.float64), np.asarray(n, np.float64)
    a, n = a[np.isfinite(a)], n[np.isfinite(n)]
    if a.size < 2 or n.size < 2:
        return NAN, NAN
    va, vn = a.var(ddof=1) / a.size, n.var(ddof=1) / n.size
    se2 = va + vn
    if not se2 > 0:
        return NAN, NAN
    from perfdiff.stats import special

    df = se2 ** 2 / (va ** 2 / (a.size - 1) + vn ** 2 / (n.size - 1))
    half = float(special.stdtrit(df, 0.5 + level / 2.0)) * math.sqrt(se2)
    d = float(a.mean() - n.mean())
    return d - half, d + half


@functools.lru_cache(maxsize=None)
def quantile_cycles_needed(q: float = P95, level: float = 0.95) -> int:
    """The fewest values from which perfdiff.stats.quantile_ci gives a `level` CI of the
    q-quantile (92 for the P95 at 95 %)."""
    from perfdiff import stats

    n = 2
    while math.isnan(stats.quantile_ci(np.arange(n, dtype=np.float64), q, level)[0]):
        n += 1
    return n


def cycle_stats(c: Analysis, findings: tuple[Finding, ...] | list[Finding]) -> CycleStats | None:
    """The cycle time's statistics the report's headline states (the CYCLE_TIME finding's
    evidence), with the Hodges–Lehmann CI of the median's shift and Welch's CI of the mean's
    difference; None where there is no such finding (identical inputs)."""
    v = next((f.evidence for f in findings if f.code == FindingCode.CYCLE_TIME
              and isinstance(f.evidence, CycleTimeEvidence)), None)
    if v is None:
        return None
    t = c.cycle_test
    lo, hi = welch_ci(c.abnormal.dur_us, c.normal.dur_us)
    return CycleStats(n_n=v.n_n, n_a=v.n_a, median_n_us=v.median_n_us, median_a_us=v.median_a_us, p_median=v.p_mwu,
                      mean_n_us=v.mean_n_us, mean_a_us=v.mean_a_us, p_welch=v.p_welch, p95_n_us=v.p95_n_us,
                      p95_a_us=v.p95_a_us, p_median_min=t.p_mwu_min, shift_lo_us=t.hl_lo, shift_hi_us=t.hl_hi,
                      paired=v.paired, diff_lo_us=lo, diff_hi_us=hi, p95_n_lo_us=v.p95_n_lo_us,
                      p95_n_hi_us=v.p95_n_hi_us, p95_a_lo_us=v.p95_a_lo_us, p95_a_hi_us=v.p95_a_hi_us)


def _pct(x: float, base: float) -> float:
    """x as % of base (NaN where base is not positive or either is unknown)."""
    return 100.0 * x / base if base > 0 and math.isfinite(x) else NAN


def _change_pct(n: float, a: float) -> float:
    return 100.0 * (a / n - 1.0) if n > 0 else (math.inf if a > 0 else NAN)


def _judged(metric: GateMetric, test: GateTest, threshold: float, alpha: float, change: float,
            significant: bool, **kw: object) -> GateCheck:
    """A check that could be judged: REGRESSION when `change` reached the threshold and the
    test says significant; else PASS, below the threshold or not significant."""
    if not change >= threshold:
        outcome, reason = GateOutcome.PASS, GateReason.BELOW_THRESHOLD
    elif significant:
        outcome, reason = GateOutcome.REGRESSION, GateReason.GREW
    else:
        outcome, reason = GateOutcome.PASS, GateReason.NOT_SIGNIFICANT
    return GateCheck(metric, outcome, reason, threshold, alpha, test, change_pct=change, **kw)  # type: ignore[arg-type]


def _test_of(metric: GateMetric, paired: bool) -> GateTest:
    if metric is GateMetric.MEDIAN:
        return GateTest.SIGNED_RANK if paired else GateTest.MANN_WHITNEY
    return {GateMetric.MEAN: GateTest.WELCH, GateMetric.P95: GateTest.QUANTILE_CI}.get(metric, GateTest.FUNCTION_Q)


def judge_cycles(s: CycleStats, metric: GateMetric, threshold_pct: float, alpha: float) -> GateCheck:
    """One cycle-time gate (median, mean or p95) over `s`."""
    test = _test_of(metric, s.paired)
    base = {"cycles_n": s.n_n, "cycles_a": s.n_a}
    if metric is GateMetric.MEDIAN:
        kw = dict(base, n_us=s.median_n_us, a_us=s.median_a_us, p=s.p_median,
                  lo_pct=_pct(s.shift_lo_us, s.median_n_us), hi_pct=_pct(s.shift_hi_us, s.median_n_us))
        if math.isnan(s.p_median) or s.p_median_min > alpha:
            return _too_few(metric, test, threshold_pct, alpha, kw)
        return _judged(metric, test, threshold_pct, alpha, _change_pct(s.median_n_us, s.median_a_us),
                       s.p_median <= alpha, **kw)
    if metric is GateMetric.MEAN:
        kw = dict(base, n_us=s.mean_n_us, a_us=s.mean_a_us, p=s.p_welch,
                  lo_pct=_pct(s.diff_lo_us, s.mean_n_us), hi_pct=_pct(s.diff_hi_us, s.mean_n_us))
        if math.isnan(s.p_welch):
            return _too_few(metric, test, threshold_pct, alpha, kw)
        return _judged(metric, test, threshold_pct, alpha, _change_pct(s.mean_n_us, s.mean_a_us), s.p_welch <= alpha,
                       **kw)
    # P95: the change's interval from both runs' CIs, at its widest (lower over upper, upper over lower).
    kw = dict(base, n_us=s.p95_n_us, a_us=s.p95_a_us,
              lo_pct=_change_pct(s.p95_n_hi_us, s.p95_a_lo_us), hi_pct=_change_pct(s.p95_n_lo_us, s.p95_a_hi_us))
    if any(math.isnan(x) for x in (s.p95_n_lo_us, s.p95_n_hi_us, s.p95_a_lo_us, s.p95_a_hi_us)):
        return _too_few(metric, test, threshold_pct, alpha, dict(kw, needed=quantile_cycles_needed()))
    return _judged(metric, test, threshold_pct, alpha, _change_pct(s.p95_n_us, s.p95_a_us),
                   s.p95_a_lo_us > s.p95_n_hi_us, **kw)


def _too_few(metric: GateMetric, test: GateTest, threshold: float, alpha: float, kw: dict) -> GateCheck:
    return GateCheck(metric, GateOutcome.CANNOT_JUDGE, GateReason.TOO_FEW_CYCLES, threshold, alpha, test, **kw)


def _judge_functions(c: Analysis, gate: Gate, threshold: float, alpha: float) -> list[GateCheck]:
    """One check per function whose name matches the gate's regex (re.search), in the
    analysis's order; one NO_FUNCTION check where none does."""
    rx = re.compile(gate.pattern)
    test = GateTest.FUNCTION_Q
    out = []
    for f in c.functions:
        if not rx.search(f.name):
            continue
        kw = {"pattern": gate.pattern, "function": f.name, "device": f.device, "n_us": f.t_n_us, "a_us": f.t_a_us,
              "cycles_n": c.normal.n_cycles, "cycles_a": c.abnormal.n_cycles}
        if f.t is not None:
            kw |= {"p": f.q_t, "lo_pct": _pct(f.t.hl_lo, f.t_n_us), "hi_pct": _pct(f.t.hl_hi, f.t_n_us)}
        if not f.tested or f.t is None or math.isnan(f.q_t):
            few = f.t is not None and f.t.p_mwu_min > alpha
            reason = GateReason.TOO_FEW_CYCLES if few else GateReason.UNTESTED
            out.append(GateCheck(GateMetric.FUNCTION, GateOutcome.CANNOT_JUDGE, reason, threshold, alpha, test,
                                 change_pct=_change_pct(f.t_n_us, f.t_a_us), **kw))  # type: ignore[arg-type]
            continue
        out.append(_judged(GateMetric.FUNCTION, test, threshold, alpha, _change_pct(f.t_n_us, f.t_a_us),
                           f.q_t <= alpha, **kw))
    if not out:
        out.append(GateCheck(GateMetric.FUNCTION, GateOutcome.CANNOT_JUDGE, GateReason.NO_FUNCTION, threshold, alpha,
                             test, pattern=gate.pattern, cycles_n=c.normal.n_cycles, cycles_a=c.abnormal.n_cycles))
    return out


def _gpu_us(c: Analysis, side: int) -> float:
    """A run's GPU work per cycle (µs), every GPU row together."""
    return sum((f.t_a_us if side else f.t_n_us) for f in c.functions if f.kind in GPU_KINDS)


def _cannot_judge(c: Analysis, findings: tuple[Finding, ...] | list[Finding],
                  verdict: tuple[VerdictClass, ...] | list[VerdictClass]) -> GateReason | None:
    """Why no gate of this comparison can be judged, whatever its metric (the first reason,
    in CANNOT_JUDGE_REASONS' order), or None."""
    if any(f.code == FindingCode.IDENTICAL for f in findings):
        return GateReason.IDENTICAL
    gpu = _gpu_us(c, 0), _gpu_us(c, 1)
    if min(c.normal.n_cycles, c.abnormal.n_cycles) == 0 or (max(gpu) > 0 and min(gpu) <= 0):
        return GateReason.EMPTY_CAPTURE
    plan = c.plan
    if plan is not None and plan.regime is Regime.TOTALS:
        moving = any(r.why is PassReason.NOT_STATIONARY for r in plan.rejected)
        return GateReason.NOT_STATIONARY if moving else GateReason.NO_CYCLES
    if c.hardware_differs or any(v.code == VerdictCode.DIFFERENT_HARDWARE for v in verdict):
        return GateReason.DIFFERENT_HARDWARE
    return None


def _windows(c: Analysis) -> bool:
    """The cycles are fixed windows: the cycle time is the window's by construction."""
    if c.plan is not None:
        return c.plan.source == CycleSource.WINDOW
    return c.normal.cycle_source == CycleSource.WINDOW.value


def judge(c: Analysis, findings: tuple[Finding, ...] | list[Finding],
          verdict: tuple[VerdictClass, ...] | list[VerdictClass], spec: GateSpec) -> GateDecision:
    """The gate's decision on one comparison (its analysis, findings and verdict) for `spec`:
    one check per cycle-time gate, one per function a function:REGEX gate matches."""
    alpha, th = c.alpha, spec.threshold_pct
    why = _cannot_judge(c, findings, verdict)
    stats = cycle_stats(c, findings) if why is None else None
    checks: list[GateCheck] = []
    for gate in spec.gates:
        test = _test_of(gate.metric, c.matched)
        counts = {"cycles_n": c.normal.n_cycles, "cycles_a": c.abnormal.n_cycles, "pattern": gate.pattern}
        if why is not None:
            checks.append(GateCheck(gate.metric, GateOutcome.CANNOT_JUDGE, why, th, alpha, test, **counts))
        elif gate.metric is GateMetric.FUNCTION:
            checks.extend(_judge_functions(c, gate, th, alpha))
        elif _windows(c):
            checks.append(GateCheck(gate.metric, GateOutcome.CANNOT_JUDGE, GateReason.WINDOWS, th, alpha, test,
                                    **counts))
        else:
            assert stats is not None  # a comparison that is not identical states its cycle time
            checks.append(judge_cycles(stats, gate.metric, th, alpha))
    return GateDecision(tuple(checks), th, spec.allow_inconclusive)


def cycle_stats_of(n_us: np.ndarray, a_us: np.ndarray, floor_us: float) -> CycleStats:
    """A cycle time's statistics from both runs' cycles (µs), by the same methods as a pair's
    (perfdiff.stats: the U test and Hodges–Lehmann CI, Welch, linear-interpolation P95 and
    its distribution-free CI): the job's iteration time of runs of many ranks."""
    from perfdiff import stats

    n, a = np.asarray(n_us, np.float64), np.asarray(a_us, np.float64)
    t = stats.compare_samples(a, n, floor=floor_us)
    qn, qa = stats.quantile_table(n), stats.quantile_table(a)
    (nlo, nhi), (alo, ahi) = stats.quantile_ci(n, P95), stats.quantile_ci(a, P95)
    lo, hi = welch_ci(a, n)
    return CycleStats(n_n=int(n.size), n_a=int(a.size), median_n_us=float(np.median(n)) if n.size else NAN,
                      median_a_us=float(np.median(a)) if a.size else NAN, p_median=t.p_mwu, mean_n_us=qn["mean"],
                      mean_a_us=qa["mean"], p_welch=t.p_welch, p95_n_us=qn["P95"], p95_a_us=qa["P95"],
                      p_median_min=t.p_mwu_min, shift_lo_us=t.hl_lo, shift_hi_us=t.hl_hi, diff_lo_us=lo, diff_hi_us=hi,
                      p95_n_lo_us=nlo, p95_n_hi_us=nhi, p95_a_lo_us=alo, p95_a_hi_us=ahi)


def judge_job(s: CycleStats | None, spec: GateSpec, alpha: float) -> GateDecision:
    """The gate's decision on runs of many ranks: each cycle-time gate over the job's iteration
    time (`s`; None where the runs share no iterations: NO_CYCLES).  A function gate is the
    single pair's (InputError before this, in perfdiff.api)."""
    th = spec.threshold_pct
    checks = []
    for gate in spec.gates:
        if s is None:
            checks.append(GateCheck(gate.metric, GateOutcome.CANNOT_JUDGE, GateReason.NO_CYCLES, th, alpha,
                                    _test_of(gate.metric, False), pattern=gate.pattern))
        else:
            checks.append(judge_cycles(s, gate.metric, th, alpha))
    return GateDecision(tuple(checks), th, spec.allow_inconclusive)
