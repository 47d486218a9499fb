"""Effect sizes of one row: the Hodges–Lehmann shift and its CI, Z, Cliff's δ, KS D.

Shifts keep the unit of the input (µs, pp, MHz, …); Z, δ and D are dimensionless
(docs/STATISTICS.md, "Hodges–Lehmann shift", "Z", "Cliff's δ").
"""
from __future__ import annotations

import math

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.describe import _mad_sorted, _median_sorted, _robust_scale_finite, drop_nonfinite, robust_scale
from perfdiff.stats.mannwhitney import _exact_regime, _u_statistic, _untied_u_cdf
from perfdiff.stats.pairwise import _pairwise_order_stats

# Z denominators: σ̂_N, this share of |median_N|, or the caller's floor — the largest.
MEDIAN_SHARE = 0.05


def hodges_lehmann(a: object, n: object) -> float:
    """Hodges–Lehmann shift: median of all pairwise a_i - n_j (x's unit); NaN if a side is empty."""
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    if av.size == 0 or nv.size == 0:
        return math.nan
    return float(_pairwise_order_stats(av, nv, [], median=True)[0])


def hl_confidence_interval(a: object, n: object, level: float = 0.95) -> tuple[float, float]:
    """Order-statistic CI of the HL shift: [D_(k), D_(mn+1-k)] of the sorted differences (x's unit).

    k = the largest integer with P(U ≤ k-1) ≤ (1 - level)/2 under the tie-free U
    distribution (coverage ≥ level): exact critical values when C(m + n, m) ≤ 200 000,
    else the normal approximation with continuity correction,
    k = floor(mn/2 + 0.5 - z·sqrt(mn(m+n+1)/12)).  (NaN, NaN) when k < 1: too few samples
    for that coverage (3 vs 3 cannot give 95 %).
    """
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    k = _ci_rank(av.size, nv.size, level)
    if k < 1:
        return math.nan, math.nan
    mn = av.size * nv.size
    lo, hi = _pairwise_order_stats(av, nv, [k - 1, mn - k])
    return float(lo), float(hi)


def _ci_rank(n1: int, n2: int, level: float) -> int:
    """k of the order-statistic CI (1-based), 0 when none reaches `level`."""
    if n1 == 0 or n2 == 0:
        return 0
    tail = (1.0 - level) / 2.0
    mn = n1 * n2
    if _exact_regime(n1, n2):
        cdf = _untied_u_cdf(n1, n2)
        # P(U ≤ k-1) ≤ tail  ⇔  k-1 < #(u with cdf[u] ≤ tail); tiny slack for rounding.
        k = int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    else:
        z = float(special.ndtri(1.0 - tail))
        k = int(math.floor(mn / 2.0 + 0.5 - z * math.sqrt(mn * (n1 + n2 + 1) / 12.0)))
    return max(0, min(k, (mn + 1) // 2))


def cliffs_delta(a: object, n: object) -> float:
    """Cliff's δ = (#(a > n) - #(a < n)) / (n_A·n_N) in [-1, 1]; NaN if a side is empty."""
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    if av.size == 0 or nv.size == 0:
        return math.nan
    _, greater, less = _u_statistic(av, nv)
    return (greater - less) / (av.size * nv.size)


def _z_from(hl: float, nv: np.ndarray, floor: float, presorted: bool = False) -> tuple[float, str]:
    """Z = HL / max(σ̂_N, 0.05·|median_N|, floor) with the n/a rules of docs/STATISTICS.md (`presorted`: nv
    is sorted and finite, so median and MAD need no partition)."""
    if nv.size < 3:
        return math.nan, "n_N < 3"
    if math.isnan(hl):
        return math.nan, "n_A = 0"
    if hl == 0:
        return 0.0, ""
    floor_v = 0.0 if floor is None or not math.isfinite(floor) else float(floor)
    if presorted:
        denom = max(_robust_scale_finite(nv, _mad_sorted(nv)), MEDIAN_SHARE * abs(_median_sorted(nv)), floor_v)
    else:
        denom = max(robust_scale(nv), MEDIAN_SHARE * abs(float(np.median(nv))), floor_v)
    if denom <= 0:
        return math.nan, "zero spread and zero floor"
    return hl / denom, ""


def z_score(a: object, n: object, floor: float) -> float:
    """HL / max(σ̂_N, 0.05·|median_N|, floor), dimensionless.

    NaN when n_N < 3, when a is empty, or when the denominator is 0 (all floors 0 and no
    spread); 0 when HL = 0 (both sides constant and equal included).  A NaN floor counts
    as 0 (e.g. a resolution that could not be determined).
    """
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    hl = hodges_lehmann(av, nv) if av.size and nv.size >= 3 else math.nan
    return _z_from(hl, nv, floor)[0]


def z_log(a: object, n: object, eps: float, floor: float = 0.05) -> float:
    """`z_score` on ln(x + eps) with the given floor; NaN if a value is < 0 or x + eps ≤ 0."""
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    if (av < 0).any() or (nv < 0).any() or not math.isfinite(eps):
        return math.nan
    la, ln_ = av + eps, nv + eps
    if (la <= 0).any() or (ln_ <= 0).any():
        return math.nan
    return z_score(np.log(la), np.log(ln_), floor)


def ks_statistic(a: object, n: object) -> float:
    """Two-sample Kolmogorov–Smirnov D = sup |F_A - F_N| in [0, 1]; NaN if a side is empty."""
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    if av.size == 0 or nv.size == 0:
        return math.nan
    av.sort()
    nv.sort()
    # Both sorted: one merge of the two runs gives both ECDFs at the end of every tie group.
    pooled = np.concatenate([av, nv])
    order = np.argsort(pooled, kind="stable")  # timsort: two runs merge in O(n)
    s = pooled[order]
    ends = np.append(np.flatnonzero(s[1:] != s[:-1]), s.size - 1)  # last index of each value
    from_a = np.cumsum(order < av.size)[ends]
    fa = from_a / av.size
    fn = (ends + 1 - from_a) / nv.size
    return float(np.abs(fa - fn).max())



def ks_pvalue(d: float, n1: int, n2: int) -> float:
    """Two-sided p of the two-sample Kolmogorov–Smirnov D from its asymptotic distribution
    (Smirnov 1939): Q_KS(D·√(n1·n2 / (n1 + n2))), `special.kolmogorov`.  NaN when a side
    is empty or D is NaN."""
    if n1 == 0 or n2 == 0 or not math.isfinite(d):
        return math.nan
    return float(min(1.0, special.kolmogorov(d * math.sqrt(n1 * n2 / (n1 + n2)))))
