"""Every two-sample statistic of one row at once (`compare_samples` → `TwoSample`).

`n` is the normal side, `a` the abnormal one; non-finite values are dropped and counted;
a statistic that cannot be computed is NaN with a reason (docs/STATISTICS.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfdiff.stats.dependence import Dependence, TwoSampleDependence, robust
from perfdiff.stats.describe import _median_sorted, drop_nonfinite
from perfdiff.stats.effects import _ci_rank, _z_from
from perfdiff.stats.mannwhitney import (_exact_regime, _mann_whitney, _merge_counts, _merge_counts_rows,
                                        _normal_p, min_attainable_p)
from perfdiff.stats.pairwise import _pairwise_order_stats
from perfdiff.stats.welch import _welch


@dataclass(frozen=True)
class TwoSample:
    """Result of `compare_samples`: NaN means n/a, and `reasons` says why, one item per field."""

    n_n: int
    n_a: int
    dropped: int
    mean_n: float
    mean_a: float
    median_n: float
    median_a: float
    z: float
    p_welch: float
    p_mwu: float
    mwu_method: str
    hl: float
    hl_lo: float
    hl_hi: float
    cliffs_delta: float
    reasons: tuple[str, ...]
    p_mwu_min: float = math.nan  # smallest U-test p attainable at these sizes (untied)
    # Dependent cycles (perfdiff.stats.dependence): how the tests dealt with them, and the
    # effective number of cycles of each run (NaN: not estimated).
    dependence: Dependence = Dependence.NOT_ASSESSED
    n_eff_n: float = math.nan
    n_eff_a: float = math.nan


def compare_samples(a: object, n: object, floor: float, *, alpha: float | None = None,
                    level: float = 0.95, time_ordered: bool = False) -> TwoSample:
    """All two-sample statistics of one row: `n` normal side, `a` abnormal, `floor` in x's unit.

    Non-finite values are dropped and counted in `dropped`.  With `alpha`, the U-test p is
    n/a when even a perfect separation could not reach it (docs/STATISTICS.md,
    "smallest attainable p"); without, it is always reported and `p_mwu_min` lets the caller decide.
    Reasons read "<field>: <why>", e.g. "z: n_N < 3", "p_mwu: all tied (p = 1)".
    `time_ordered`: each side is a series in time order (a run's cycles): the p values hold
    under dependence between neighbouring values (perfdiff.stats.dependence).
    """
    av, drop_a = drop_nonfinite(a)
    nv, drop_n = drop_nonfinite(n)
    dep = TwoSampleDependence(av, nv) if time_ordered else None
    av.sort()  # our own copies: sorted once, every statistic below is faster on them
    nv.sort()
    reasons: list[str] = []
    if drop_a or drop_n:
        reasons.append(f"dropped: {drop_n} non-finite normal, {drop_a} non-finite abnormal")
    empty = av.size == 0 or nv.size == 0
    if empty:
        side = "n_N = 0" if nv.size == 0 else "n_A = 0"
        reasons.append(f"hl, cliffs_delta, p_mwu: {side}")

    hl = hl_lo = hl_hi = delta = math.nan
    u = None
    if not empty:
        mn = av.size * nv.size
        k = _ci_rank(av.size, nv.size, level)
        ranks = [k - 1, mn - k] if k >= 1 else []
        order_stats = _pairwise_order_stats(av, nv, ranks, median=True, presorted=True)
        hl = float(order_stats[-1])
        if k >= 1:
            hl_lo, hl_hi = float(order_stats[0]), float(order_stats[1])
        else:
            reasons.append(f"hl_ci: too few samples for a {level:.0%} CI "
                           f"({nv.size} / {av.size})")
        greater, less, ties, tie_term = _merge_counts(av, nv)
        u = greater + 0.5 * ties
        delta = (greater - less) / mn

    z, why = _z_from(hl, nv, floor, presorted=True) if nv.size >= 3 else (math.nan, "n_N < 3")
    if why:
        reasons.append(f"z: {why}")
    p_w, why = _welch(av, nv)
    if why:
        reasons.append(f"p_welch: {why}")
    p_u, method, p_min = _u_p(av, nv, u, None if empty else tie_term, alpha, reasons)
    if dep is not None and dep.status is Dependence.CORRECTED:
        p_w, p_u = robust(p_w, dep.p_welch), robust(p_u, dep.p_rank)

    return TwoSample(
        n_n=int(nv.size), n_a=int(av.size), dropped=drop_a + drop_n,
        mean_n=float(np.mean(nv)) if nv.size else math.nan,
        mean_a=float(np.mean(av)) if av.size else math.nan,
        median_n=_median_sorted(nv) if nv.size else math.nan,
        median_a=_median_sorted(av) if av.size else math.nan,
        z=z, p_welch=p_w, p_mwu=p_u, mwu_method=method,
        hl=hl, hl_lo=hl_lo, hl_hi=hl_hi, cliffs_delta=delta,
        reasons=tuple(reasons), p_mwu_min=p_min,
        dependence=dep.status if dep is not None else Dependence.NOT_ASSESSED,
        n_eff_n=dep.n_eff_n if dep is not None else math.nan, n_eff_a=dep.n_eff_a if dep is not None else math.nan,
    )


@dataclass(frozen=True)
class UTest:
    """Result of `u_test`: NaN means n/a, and `reasons` says why, as in TwoSample."""

    p_mwu: float
    cliffs_delta: float
    reasons: tuple[str, ...]


def u_test(a: object, n: object, *, alpha: float | None = None) -> UTest:
    """The Mann–Whitney p and Cliff's δ of one row (`n` normal side, `a` abnormal), the same
    values compare_samples gives, without its other statistics: a quarter of its cost, for
    callers that test many rows and read only these two (the multi-rank tests)."""
    av, drop_a = drop_nonfinite(a)
    nv, drop_n = drop_nonfinite(n)
    av.sort()
    nv.sort()
    reasons: list[str] = []
    if drop_a or drop_n:
        reasons.append(f"dropped: {drop_n} non-finite normal, {drop_a} non-finite abnormal")
    if av.size == 0 or nv.size == 0:
        reasons.append(f"cliffs_delta, p_mwu: {'n_N = 0' if nv.size == 0 else 'n_A = 0'}")
        return UTest(math.nan, math.nan, tuple(reasons))
    greater, less, ties, tie_term = _merge_counts(av, nv)
    p_u, _, _ = _u_p(av, nv, greater + 0.5 * ties, tie_term, alpha, reasons)
    return UTest(p_u, (greater - less) / (av.size * nv.size), tuple(reasons))


def u_test_rows(a: object, n: object, *, alpha: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """u_test of each row of `a` (rows × m, abnormal) against the same row of `n` (rows × k,
    normal): (p, Cliff's δ), one value a row, the values u_test gives row by row.  Rows share
    their sizes, so where the test is the normal approximation every row is counted in one
    sort of the pooled rows; rows with non-finite values, and sizes the test is exact at, go
    through u_test one by one."""
    a, n = np.asarray(a, dtype=np.float64), np.asarray(n, dtype=np.float64)
    rows, m = a.shape
    k = n.shape[1]
    p, delta = np.full(rows, math.nan), np.full(rows, math.nan)
    finite = np.isfinite(a).all(axis=1) & np.isfinite(n).all(axis=1)
    if m == 0 or k == 0 or _exact_regime(m, k):
        finite[:] = False
    for i in np.flatnonzero(~finite):
        res = u_test(a[i], n[i], alpha=alpha)
        p[i], delta[i] = res.p_mwu, res.cliffs_delta
    if not finite.any():
        return p, delta
    greater, less, ties, tie_term, constant = _merge_counts_rows(a[finite], n[finite])
    p_rows = np.where(constant, 1.0, _normal_p(greater + 0.5 * ties, m, k, tie_term))
    if alpha is not None and min_attainable_p(k, m) > alpha:
        p_rows[:] = math.nan
    p[finite], delta[finite] = p_rows, (greater - less) / (m * k)
    return p, delta


def _u_p(av: np.ndarray, nv: np.ndarray, u: float | None, tie_term: float | None, alpha: float | None,
         reasons: list[str]) -> tuple[float, str, float]:
    """(U-test p, its method, the smallest p attainable at these sizes) of sorted finite
    samples, with U and the tie term from _merge_counts (None: a side is empty); appends why
    p is n/a to `reasons`."""
    p_u, method = _mann_whitney(av, nv, u, tie_term)
    p_min = min_attainable_p(nv.size, av.size)
    if method == "all-tied":
        reasons.append("p_mwu: all tied (p = 1)")
    if alpha is not None and u is not None and p_min > alpha:
        reasons.append(f"p_mwu: smallest attainable p {p_min:.3g} > α = {alpha:g} "
                       f"at {nv.size} / {av.size}")
        p_u, method = math.nan, "n/a"
    return p_u, method, p_min
