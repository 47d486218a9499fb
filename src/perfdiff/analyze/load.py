"""Load as a covariate (docs/STATISTICS.md, "Load as a covariate"): what each cycle carried
(the framework's step_* samples joined to the cycles), whether the two runs carried
materially different load, and the cycle time and each function's own time compared at a
common load.

Under different load, step times are not comparable: a step carrying twice the tokens takes
longer at the same cost per token.  Each run's per-cycle time is regressed on its tokens per
cycle over the load range both runs cover, and the two lines are compared at the pooled
median load (perfdiff.stats.adjusted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from perfdiff import stats
from perfdiff.analyze.evidence import LoadNoticeDetail
from perfdiff.analyze.records import CycleLoad, FunctionLoad, LoadComparison, Notice, NoticeCode
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.attribute import CycleMatrix
from perfdiff.bundle import RunData
from perfdiff.model.cycles import Cycles
from perfdiff.stats.adjusted import MIN_POINTS, AdjustedDifference, adjusted_difference, fit_strata

NAN = float("nan")
STEP_METRICS = ("step_requests", "step_tokens", "step_prefill_tokens", "step_decode_tokens")
STRATA = 4  # equal-frequency load strata per phase (fewer when a run has few cycles)
STRATUM_MIN = 30  # cycles of each run a stratum needs: the HAC variance is poor on fewer
SUPPORT_QUANTILES = (0.05, 0.95)  # each run's central 90 % of load; the common support is their overlap
CHUNK_CELLS = 2_000_000  # (functions × cycles) fitted at once: bounds the copies of the own-time rows


def is_step_metric(metric: str) -> bool:
    """A framework step's load (a covariate of the comparison, not a resource metric)."""
    return metric in STEP_METRICS


def cycle_load(run: RunData, cycles: Cycles) -> CycleLoad:
    """Per cycle, the sum of each step_* metric over the samples whose interval's midpoint
    lies in the cycle; NaN where none does.  Tokens are step_tokens, else prefill + decode."""
    s = run.samples
    K = cycles.n
    sums: dict[str, np.ndarray] = {}
    if len(s):
        is_step = s["metric"].isin(STEP_METRICS).to_numpy()
        steps = s[is_step]
    else:
        steps = s
    # Cycles are sorted by start; the cycle holding a midpoint is the last one starting at or
    # before it, provided the midpoint lies before that cycle's end.
    for metric in STEP_METRICS:
        rows = steps[steps["metric"] == metric] if len(steps) else steps
        out = np.full(K, NAN)
        if len(rows):
            t0 = rows["t_start_ns"].to_numpy()
            mid = t0 + (rows["t_end_ns"].to_numpy() - t0) // 2
            v = rows["value"].to_numpy(dtype=np.float64)
            c = np.searchsorted(cycles.start_ns, mid, side="right") - 1
            ok = (c >= 0) & np.isfinite(v)
            ok[ok] &= mid[ok] < cycles.end_ns[c[ok]]
            count = np.bincount(c[ok], minlength=K)
            total = np.bincount(c[ok], weights=v[ok], minlength=K)
            out = np.where(count > 0, total, NAN)
        sums[metric] = out
    tokens = sums["step_tokens"]
    if not np.isfinite(tokens).any():
        tokens = sums["step_prefill_tokens"] + sums["step_decode_tokens"]
    reason = ""
    if not np.isfinite(tokens).any():
        reason = "no step_* samples in any cycle" if len(steps) else "the run recorded no step load (step_* samples)"
    return CycleLoad(requests=sums["step_requests"], tokens=tokens, prefill_tokens=sums["step_prefill_tokens"],
                     decode_tokens=sums["step_decode_tokens"], reason=reason)


def _median(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else NAN


def _prefill_share_pct(load: CycleLoad) -> float:
    ok = np.isfinite(load.prefill_tokens) & np.isfinite(load.tokens)
    total = float(load.tokens[ok].sum())
    return 100.0 * float(load.prefill_tokens[ok].sum()) / total if total > 0 else NAN


def _per_cycle_prefill_share(load: CycleLoad) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(load.tokens > 0, load.prefill_tokens / load.tokens, NAN)


def _material(res: stats.TwoSample | None, th: Thresholds) -> bool:
    """Significant (U test p ≤ α) and a known effect of at least a small size (|Cliff's δ| ≥
    th.material_delta)."""
    if res is None:
        return False
    d = res.cliffs_delta
    return th.significant(res.p_mwu) and math.isfinite(d) and not th.small_effect(d)


def _test(a: np.ndarray, n: np.ndarray, alpha: float) -> stats.TwoSample | None:
    a, n = a[np.isfinite(a)], n[np.isfinite(n)]
    if a.size < 2 or n.size < 2:
        return None
    return stats.compare_samples(a, n, floor=1.0, alpha=alpha)


def compare_load(ln: CycleLoad, la: CycleLoad, dur_n_us: np.ndarray, dur_a_us: np.ndarray, *,
                 thresholds: Thresholds,
                 own: tuple[CycleMatrix, CycleMatrix, np.ndarray, np.ndarray] | None = None,
                 tested: list[int] | tuple[int, ...] = ()) -> LoadComparison | None:
    """The two runs' load, whether it differs materially, and the cycle time (and each tested
    function's own time, from `own` = (matrix N, matrix A, aligned index N, aligned index A))
    compared at a common load.  None when neither run recorded load."""
    if not ln.recorded and not la.recorded:
        return None
    alpha = thresholds.alpha
    tests = {"tokens": _test(la.tokens, ln.tokens, alpha), "requests": _test(la.requests, ln.requests, alpha),
             "prefill-share": _test(_per_cycle_prefill_share(la), _per_cycle_prefill_share(ln), alpha)}
    basis = tuple(k for k, r in tests.items() if _material(r, thresholds))
    base = LoadComparison(
        normal=ln, abnormal=la, median_tokens_n=_median(ln.tokens), median_tokens_a=_median(la.tokens),
        median_requests_n=_median(ln.requests), median_requests_a=_median(la.requests),
        prefill_share_n_pct=_prefill_share_pct(ln), prefill_share_a_pct=_prefill_share_pct(la),
        tokens_test=tests["tokens"], requests_test=tests["requests"], prefill_test=tests["prefill-share"],
        differs=bool(basis), basis=basis)
    if not (ln.recorded and la.recorded):
        return _replace(base, reason=(ln.reason or la.reason) + (" (normal run)" if ln.reason else " (abnormal run)"))
    # The common support: the load range both runs cover (each run's central 90 %).
    lo = max(_quantile(ln.tokens, SUPPORT_QUANTILES[0]), _quantile(la.tokens, SUPPORT_QUANTILES[0]))
    hi = min(_quantile(ln.tokens, SUPPORT_QUANTILES[1]), _quantile(la.tokens, SUPPORT_QUANTILES[1]))
    in_n = np.isfinite(ln.tokens) & (ln.tokens >= lo) & (ln.tokens <= hi)
    in_a = np.isfinite(la.tokens) & (la.tokens >= lo) & (la.tokens <= hi)
    base = _replace(base, support_lo_tokens=lo, support_hi_tokens=hi, n_support_n=int(in_n.sum()),
                    n_support_a=int(in_a.sum()))
    if not (lo <= hi) or in_n.sum() < MIN_POINTS or in_a.sum() < MIN_POINTS:
        return _replace(base, reason=f"the runs' loads overlap in fewer than {MIN_POINTS} cycles of each run")
    x0 = float(np.median(np.concatenate([ln.tokens[in_n], la.tokens[in_a]])))
    strata = _strata(ln, la, in_n, in_a)
    d = _compare(strata, dur_n_us[strata.of_n >= 0], dur_a_us[strata.of_a >= 0])
    # One line per run over the whole support, for its slope (µs per token).
    whole_n = fit_strata(dur_n_us[in_n], ln.tokens[in_n], np.zeros(int(in_n.sum()), dtype=np.int64), x0)
    whole_a = fit_strata(dur_a_us[in_a], la.tokens[in_a], np.zeros(int(in_a.sum()), dtype=np.int64), x0)
    assert whole_n is not None and whole_a is not None  # both have ≥ MIN_POINTS
    cycle_n, cycle_a = float(d.at_n[0]), float(d.at_a[0])
    functions = _function_fits(own, tested, strata, cycle_a) if own is not None else ()
    return _replace(base, x0_tokens=x0, n_strata=len(strata.x0), cycle_n_us=cycle_n, cycle_a_us=cycle_a,
                    change_us=float(d.diff[0]), change_lo_us=float(d.lo[0]), change_hi_us=float(d.hi[0]),
                    change_pct=100.0 * float(d.diff[0]) / cycle_n if cycle_n > 0 else NAN,
                    p=float(d.p[0]), slope_n_us=float(whole_n.slope[0, 0]), slope_a_us=float(whole_a.slope[0, 0]),
                    functions=functions)


@dataclass(frozen=True)
class Strata:
    """Load strata of the common support: each cycle's stratum in each run (−1: in none), and
    each stratum's load x0 (pooled median tokens) and weight (its share of the pooled cycles)."""

    of_n: np.ndarray
    of_a: np.ndarray
    x0: np.ndarray
    weight: np.ndarray
    tokens_n: np.ndarray  # each cycle's tokens, the covariate
    tokens_a: np.ndarray


def _strata(ln: CycleLoad, la: CycleLoad, in_n: np.ndarray, in_a: np.ndarray) -> Strata:
    """The common support cut into strata: by phase (cycles with prefill tokens and decode-only
    cycles, when both runs have enough of each), then into up to STRATA equal-frequency bins
    of the pooled tokens; a stratum needs STRATUM_MIN cycles of each run (the whole support is
    one stratum when none has)."""
    phases = [(in_n, in_a)]
    pre_n, pre_a = ln.prefill_tokens > 0, la.prefill_tokens > 0  # NaN compares False: decode-only
    split = [(in_n & pre_n, in_a & pre_a), (in_n & ~pre_n, in_a & ~pre_a)]
    if all(m_n.sum() >= 2 * STRATUM_MIN and m_a.sum() >= 2 * STRATUM_MIN for m_n, m_a in split):
        phases = split
    of_n, of_a = np.full(len(ln.tokens), -1), np.full(len(la.tokens), -1)
    x0: list[float] = []
    weight: list[float] = []
    for p_n, p_a in phases:
        bins = max(1, min(STRATA, int(min(p_n.sum(), p_a.sum()) // (2 * STRATUM_MIN))))
        pooled = np.concatenate([ln.tokens[p_n], la.tokens[p_a]])
        edges = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, bins + 1)))
        last = max(len(edges) - 2, 0)
        # Bin b holds [edges[b], edges[b+1]), the last one closed; ties stay in one bin.
        b_n = np.clip(np.searchsorted(edges, ln.tokens, side="right") - 1, 0, last)
        b_a = np.clip(np.searchsorted(edges, la.tokens, side="right") - 1, 0, last)
        for b in range(last + 1):
            m_n, m_a = p_n & (b_n == b), p_a & (b_a == b)
            if m_n.sum() < STRATUM_MIN or m_a.sum() < STRATUM_MIN:
                continue
            of_n[m_n], of_a[m_a] = len(x0), len(x0)
            x0.append(float(np.median(np.concatenate([ln.tokens[m_n], la.tokens[m_a]]))))
            weight.append(float(m_n.sum() + m_a.sum()))
    if not x0:  # no stratum holds enough of both runs: the whole support as one
        of_n, of_a = np.where(in_n, 0, -1), np.where(in_a, 0, -1)
        x0, weight = [float(np.median(np.concatenate([ln.tokens[in_n], la.tokens[in_a]])))], [1.0]
    return Strata(of_n=of_n, of_a=of_a, x0=np.array(x0), weight=np.array(weight), tokens_n=ln.tokens,
                  tokens_a=la.tokens)


def _compare(strata: Strata, y_n: np.ndarray, y_a: np.ndarray) -> AdjustedDifference:
    """Responses over each run's cycles in a stratum (in time order), fitted within the strata
    and compared standardised to the strata's weights."""
    keep_n, keep_a = strata.of_n >= 0, strata.of_a >= 0
    fn = fit_strata(y_n, strata.tokens_n[keep_n], strata.of_n[keep_n], strata.x0, strata.weight)
    fa = fit_strata(y_a, strata.tokens_a[keep_a], strata.of_a[keep_a], strata.x0, strata.weight)
    assert fn is not None and fa is not None  # every stratum holds ≥ STRATUM_MIN of each run
    return adjusted_difference(fn, fa)


def _function_fits(own: tuple[CycleMatrix, CycleMatrix, np.ndarray, np.ndarray], tested: list[int] | tuple[int, ...],
                   strata: Strata, cycle_a_us: float) -> tuple[FunctionLoad, ...]:
    """Each tested function's own time per cycle (µs) compared at the common load as the cycle
    time is, a chunk of functions at a time; q by Benjamini–Hochberg over them."""
    mn, ma, idx_n, idx_a = own
    tested = list(tested)
    rows: list[tuple[int, float, float, float, float, float, float]] = []
    per_chunk = max(1, CHUNK_CELLS // max(int((strata.of_n >= 0).sum() + (strata.of_a >= 0).sum()), 1))
    for start in range(0, len(tested), per_chunk):
        chunk = tested[start:start + per_chunk]
        rn, ra = [int(idx_n[f]) for f in chunk], [int(idx_a[f]) for f in chunk]
        d = _compare(strata, _rows(mn.own_ns, rn, strata.of_n >= 0), _rows(ma.own_ns, ra, strata.of_a >= 0))
        for j, f in enumerate(chunk):
            rows.append((f, float(d.at_n[j]), float(d.at_a[j]), float(d.diff[j]), float(d.lo[j]),
                         float(d.hi[j]), float(d.p[j])))
    q = stats.bh_qvalues(np.array([r[6] for r in rows], dtype=float)) if rows else np.zeros(0)
    return tuple(FunctionLoad(func=f, t_n_us=tn, t_a_us=ta, diff_us=df, lo_us=lo, hi_us=hi, p=p, q=float(qv),
                              tau_pp=100.0 * df / cycle_a_us if cycle_a_us > 0 else NAN)
                 for (f, tn, ta, df, lo, hi, p), qv in zip(rows, q, strict=True))


def _rows(own_ns: np.ndarray, idx: list[int], keep: np.ndarray) -> np.ndarray:
    """Rows `idx` of an own-time matrix over the kept cycles, in µs; zeros for -1 (absent)."""
    out = np.zeros((len(idx), int(keep.sum())))
    present = [j for j, i in enumerate(idx) if i >= 0]
    if present:
        out[present] = own_ns[np.ix_([idx[j] for j in present], np.flatnonzero(keep))]
        out /= 1e3
    return out


def _quantile(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if x.size else NAN


def _replace(x: LoadComparison, **kw: object) -> LoadComparison:
    return replace(x, **kw)  # type: ignore[arg-type]


def load_notice(lc: LoadComparison | None) -> Notice | None:
    """The comparability notice when the runs carried materially different load."""
    if lc is None or not lc.differs:
        return None
    return Notice(NoticeCode.LOAD, normal=lc.median_tokens_n, abnormal=lc.median_tokens_a, detail=LoadNoticeDetail(
        basis=tuple(lc.basis), requests_n=lc.median_requests_n, requests_a=lc.median_requests_a,
        prefill_share_n_pct=lc.prefill_share_n_pct, prefill_share_a_pct=lc.prefill_share_a_pct,
        adjusted=lc.adjusted, x0_tokens=lc.x0_tokens, cycle_n_us=lc.cycle_n_us,
        cycle_a_us=lc.cycle_a_us, change_pct=lc.change_pct,
        change_lo_pct=100.0 * lc.change_lo_us / lc.cycle_n_us if lc.cycle_n_us > 0 else NAN,
        change_hi_pct=100.0 * lc.change_hi_us / lc.cycle_n_us if lc.cycle_n_us > 0 else NAN,
        p=lc.p, reason=lc.reason))
