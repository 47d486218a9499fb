"""The Mann–Whitney U test: the rank-sum distribution, the p-value, the smallest attainable p.

Exact (permutation distribution of the midrank sum, ties included) when
C(n_N + n_A, n_N) ≤ EXACT_LIMIT, else the normal approximation with tie correction and
continuity correction (docs/STATISTICS.md, "Mann–Whitney U").
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.describe import _is_constant, drop_nonfinite

# C(n_N + n_A, n_N) up to which Mann–Whitney uses the exact permutation distribution.
EXACT_LIMIT = 200_000


def _exact_regime(n1: int, n2: int) -> bool:
    """C(n1 + n2, n1) ≤ EXACT_LIMIT, computed incrementally so large sizes cost nothing."""
    k, total = min(n1, n2), n1 + n2
    c = 1
    for i in range(1, k + 1):
        c = c * (total - k + i) // i  # = C(total - k + i, i), exact at every step
        if c > EXACT_LIMIT:
            return False
    return True


def _subset_sum_counts(scores: np.ndarray, k: int) -> np.ndarray:
    """counts[s] = number of k-element subsets of the integer `scores` summing to s.

    Only used where C(N, k) ≤ EXACT_LIMIT, so counts fit int64 exactly.  Small k (then N
    can reach ~630): Newton's identities on the score histogram, a few convolutions.
    Larger k (then N ≤ ~40): a DP over the distinct scores, where a score held t times
    contributes C(t, c) ways to take c of them, so ties cost nothing extra.
    """
    scores = scores.astype(np.int64)
    hist = np.bincount(scores)
    if k == 1:
        return hist
    if k <= 4:
        return _subset_sums_newton(hist, k)
    vals = np.flatnonzero(hist)
    top = int(np.sort(scores)[-k:].sum())
    dp = np.zeros((k + 1, top + 1), np.int64)
    dp[0, 0] = 1
    for v, t in zip(vals.tolist(), hist[vals].tolist(), strict=True):
        new = dp.copy()
        for c in range(1, min(t, k) + 1):
            shift = c * v
            if shift > top:
                break
            new[c:, shift:] += math.comb(t, c) * dp[: k + 1 - c, : top + 1 - shift]
        dp = new
    return dp[k]


def _subset_sums_newton(hist: np.ndarray, k: int) -> np.ndarray:
    """e_k of the variables y^score as a polynomial in y: k·e_k = Σ_j (-1)^(j-1) e_(k-j)·P_j.

    P_j(y) = Σ_i y^(j·score_i) is the histogram stretched by j.  Exact in int64: every
    intermediate is bounded by N·C(N, k) ≪ 2^63 in the exact regime.
    """
    e = [np.ones(1, np.int64)]
    width = hist.size - 1
    for order in range(1, k + 1):
        acc = np.zeros(order * width + 1, np.int64)
        for j in range(1, order + 1):
            power_sum = np.zeros(j * width + 1, np.int64)
            power_sum[::j] = hist
            term = np.convolve(e[order - j], power_sum)
            acc[: term.size] += term if j % 2 else -term
        e.append(acc // order)
    return e[k]


@lru_cache(maxsize=256)
def _untied_u_cdf(n1: int, n2: int) -> np.ndarray:
    """cdf[u] = P(U ≤ u) of the tie-free Mann–Whitney U for sizes n1, n2 (exact regime)."""
    k = min(n1, n2)
    counts = _subset_sum_counts(np.arange(1, n1 + n2 + 1), k)[k * (k + 1) // 2:]
    cdf = np.cumsum(counts) / counts.sum()
    cdf.setflags(write=False)
    return cdf


def _tie_term(pooled: np.ndarray) -> float:
    """Σ (t³ - t) over groups of tied values in `pooled`."""
    s = np.sort(pooled, kind="stable")  # timsort: two sorted runs merge in O(n)
    edges = np.flatnonzero(np.diff(s) != 0)
    t = np.diff(np.concatenate(([0], edges + 1, [s.size]))).astype(np.float64)
    return float(np.sum(t**3 - t))


def _merge_counts(a: np.ndarray, n: np.ndarray) -> tuple[int, int, int, float]:
    """For sorted, finite `a` and `n`: #(a > n), #(a < n) and #(a = n) over all pairs, and
    Σ(t³ - t) over the tie groups of the pooled values; one O(n) merge of the two runs
    (what `_u_statistic` and `_tie_term` find with two binary searches and a sort)."""
    pooled = np.concatenate([a, n])
    order = np.argsort(pooled, kind="stable")  # two sorted runs: timsort merges them in O(n)
    s = pooled[order]
    starts = np.concatenate(([0], np.flatnonzero(s[1:] != s[:-1]) + 1))
    size = np.diff(np.append(starts, s.size))
    a_cnt = np.add.reduceat((order < a.size).astype(np.int64), starts)
    n_cnt = size - a_cnt
    greater = int((a_cnt * (np.cumsum(n_cnt) - n_cnt)).sum())
    ties = int((a_cnt * n_cnt).sum())
    size_f = size.astype(np.float64)
    return greater, a.size * n.size - greater - ties, ties, float(np.sum(size_f**3 - size_f))


def _merge_counts_rows(a: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, ...]:
    """_merge_counts of every row at once (finite rows of equal sizes): #(a > n), #(a < n),
    #(a = n), Σ(t³ - t) over each row's tie groups, and whether the row is one value."""
    rows, m = a.shape
    total = m + n.shape[1]
    pooled = np.concatenate([a, n], axis=1)
    order = np.argsort(pooled, axis=1, kind="stable")
    s = np.take_along_axis(pooled, order, axis=1)
    new = np.ones(s.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    # Tie groups numbered within each row, then across rows: one bincount counts them all.
    group = (np.cumsum(new, axis=1) - 1 + np.arange(rows)[:, None] * total).ravel()
    size = np.bincount(group, minlength=rows * total).reshape(rows, total).astype(np.float64)
    a_cnt = np.bincount(group, weights=(order < m).ravel(), minlength=rows * total).reshape(rows, total)
    n_cnt = size - a_cnt
    greater = (a_cnt * (np.cumsum(n_cnt, axis=1) - n_cnt)).sum(axis=1)
    ties = (a_cnt * n_cnt).sum(axis=1)
    less = m * n.shape[1] - greater - ties
    return greater, less, ties, (size**3 - size).sum(axis=1), s[:, 0] == s[:, -1]


def _u_statistic(a: np.ndarray, n: np.ndarray) -> tuple[float, int, int]:
    """U of side a (#(a > n) + ½·#(a = n)) and the raw counts #(a > n), #(a < n).

    Sorted `a` is not required but makes the searches faster.
    """
    ns = np.sort(n)
    left = np.searchsorted(ns, a, side="left")
    right = np.searchsorted(ns, a, side="right")
    greater = int(left.sum())
    less = int((ns.size - right).sum())
    ties = int((right - left).sum())
    return greater + 0.5 * ties, greater, less


def mann_whitney_p(a: object, n: object) -> tuple[float, str]:
    """Two-sided Mann–Whitney p and the method used.

    "exact" (no ties) / "exact-permutation" (ties: permutation distribution of the
    midrank sum) when C(n_N + n_A, n_N) ≤ 200 000; else "asymptotic" (normal, tie-corrected
    variance, continuity correction 0.5, as scipy's ``method="asymptotic"``).  All values
    tied → (1.0, "all-tied"); a side empty → (NaN, "n/a").
    """
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    return _mann_whitney(av, nv)


def _mann_whitney(av: np.ndarray, nv: np.ndarray, u: float | None = None,
                  tie_term: float | None = None) -> tuple[float, str]:
    """`mann_whitney_p` on finite arrays; `u` = U of side a and `tie_term` = Σ(t³ - t) of the
    pooled values when the caller has them."""
    n1, n2 = av.size, nv.size
    if n1 == 0 or n2 == 0:
        return math.nan, "n/a"
    pooled = np.concatenate([av, nv])
    if _is_constant(pooled):
        return 1.0, "all-tied"
    total = n1 + n2
    if _exact_regime(n1, n2):
        ranks2 = np.rint(2 * _midranks(pooled)).astype(np.int64)  # midranks ×2 are integers
        tied = bool(np.unique(pooled).size < total)
        if n1 <= n2:
            chosen, k = ranks2[:n1], n1
        else:
            chosen, k = ranks2[n1:], n2
        counts = _subset_sum_counts(ranks2, k)
        w = int(chosen.sum())
        whole = counts.sum()
        p_le = counts[: w + 1].sum() / whole
        p_ge = counts[w:].sum() / whole
        return float(min(1.0, 2.0 * min(p_le, p_ge))), ("exact-permutation" if tied else "exact")
    if u is None:
        u = _u_statistic(av, nv)[0]
    tt = _tie_term(pooled) if tie_term is None else tie_term
    return float(_normal_p(u, n1, n2, tt)), "asymptotic"


def _normal_p(u: float | np.ndarray, n1: int, n2: int, tie_term: float | np.ndarray) -> np.ndarray:
    """Two-sided p of U (of side a, n1 values against n2) by the normal approximation, with the
    tie-corrected variance (`tie_term` = Σ(t³ - t)) and continuity correction 0.5; U and the
    tie term may be arrays of rows (a row all tied has no variance: NaN)."""
    total = n1 + n2
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((total + 1) - tie_term / (total * (total - 1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.abs(u - mu) - 0.5) / np.sqrt(var)
    return np.minimum(1.0, 2.0 * special.ndtr(-z))


def _midranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    s = x[order]
    edges = np.concatenate(([0], np.flatnonzero(np.diff(s) != 0) + 1, [s.size]))
    # A tie group occupying 0-based positions [lo, hi) gets midrank (lo + 1 + hi) / 2.
    mids = (edges[:-1] + 1 + edges[1:]) / 2.0
    out = np.empty(x.size)
    out[order] = np.repeat(mids, np.diff(edges))
    return out


def min_attainable_p(n_n: int, n_a: int) -> float:
    """Smallest two-sided U-test p that `mann_whitney_p` can return for these sizes, untied data.

    Exact regime: a perfect separation, 2 / C(n_N + n_A, n_N) (6 vs 6: 2/924 = 0.0022);
    otherwise the asymptotic p of U = n_N·n_A.  NaN when a side is empty.
    """
    if n_n <= 0 or n_a <= 0:
        return math.nan
    if _exact_regime(n_n, n_a):
        return min(1.0, 2.0 / math.comb(n_n + n_a, n_n))
    total = n_n + n_a
    z = (n_n * n_a / 2.0 - 0.5) / math.sqrt(n_n * n_a * (total + 1) / 12.0)
    return float(min(1.0, 2.0 * special.ndtr(-z)))

