"""Statistics of the comparison (STATS.md): pure functions on 1-D float arrays.

Every function takes the per-cycle values of one side (or both: ``a`` = abnormal,
``n`` = normal), drops NaN/±inf inside (the caller counts them through
`compare_samples`), never modifies its inputs, and returns NaN for "not computable"
— never 0 or 1 in its place.  Values keep the unit of the input (µs, pp, MHz, …);
p- and q-values are probabilities in [0, 1].

Conventions fixed here (and tested in tests/test_stats.py):

- Two-sided exact Mann–Whitney p = min(1, 2·min(P(W ≤ w), P(W ≥ w))) over the
  permutation distribution of the rank sum W (midranks when tied).  Without ties this is
  scipy's ``method="exact"``; scipy ignores ties there, so the tied case is computed here.
- HL and its CI are computed on the floating-point differences ``a_i - n_j`` exactly as
  ``np.median(a[:, None] - n[None, :])`` would, without building the m·n matrix.
- "Fragile" needs both tests computable: an n/a test is reported with its own reason and
  is not a disagreement (see `is_fragile`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

# C(n_N + n_A, n_N) up to which Mann–Whitney uses the exact permutation distribution.
EXACT_LIMIT = 200_000
# 1.4826·MAD estimates σ for normal data.
MAD_TO_SD = 1.4826
# Z denominators: σ̂_N, this share of |median_N|, or the caller's floor — the largest.
MEDIAN_SHARE = 0.05
# Common mode (STATS.md, Checks): β̄_N threshold (pp), IQR(ln r) limit, |median ln r| limit.
COMMON_MIN_BETA = 0.05
COMMON_MAX_IQR = 0.2
COMMON_MIN_SHIFT = math.log(1.25)
# Suspicion score: each of Z(t) and Z(log μ) adds at most this much.
SCORE_Z_CAP = 5.0
# Order statistics of the m·n pairwise differences: up to _DIRECT_LIMIT of them the matrix
# is built and partitioned (faster below ~100 k, measured); above, `_select_pairwise`
# (tuned at 2,000 × 2,000) brackets windows wider than _BRACKET_MIN columns by searchsorted
# before bisecting, and materialises at most _GATHER_LIMIT candidates per target.
_DIRECT_LIMIT = 100_000
_BRACKET_MIN = 64
_GATHER_LIMIT = 32_000
# Pivot sampling; made once because seeding a Generator costs ~0.1 ms.  The values
# returned never depend on the draws, only the time taken does.
_RNG = np.random.default_rng(20240611)
QUANTILE_KEYS = ("min", "P5", "P10", "P25", "P50", "P75", "P90", "P95", "P99", "max")
_QUANTILE_LEVELS = (0.0, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 1.0)


# ---------------------------------------------------------------------------------------
# Input hygiene and one-sample summaries


def drop_nonfinite(x: object) -> tuple[np.ndarray, int]:
    """The finite values of `x` as a new 1-D float64 array, and how many were dropped."""
    arr = np.asarray(x, dtype=np.float64).ravel()
    keep = np.isfinite(arr)
    kept = arr[keep]  # boolean indexing copies: the caller's array is never touched
    return kept, int(arr.size - kept.size)


def _is_constant(x: np.ndarray) -> bool:
    # ptp, not var: the mean of equal floats can round, leaving var ≈ 1e-33 instead of 0.
    return x.size > 0 and bool(x[0] == x.min() == x.max())


def robust_scale(x: object) -> float:
    """σ̂ = 1.4826·MAD (unit of x), falling back to sd (ddof 1) when MAD = 0; NaN when n < 2."""
    v, _ = drop_nonfinite(x)
    if v.size < 2:
        return math.nan
    return _robust_scale_finite(v, np.median(np.abs(v - np.median(v))))


def _robust_scale_finite(v: np.ndarray, mad: float) -> float:
    mad = float(mad)
    if mad > 0:
        return MAD_TO_SD * mad
    return 0.0 if _is_constant(v) else float(np.std(v, ddof=1))


def _median_sorted(v: np.ndarray) -> float:
    """np.median of sorted, finite, non-empty `v` without a partition."""
    m = v.size // 2
    return float(v[m]) if v.size % 2 else float((v[m - 1] + v[m]) / 2)


def _kth_of_two(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """The k-th smallest (0-based) of the union of sorted `x` and `y`: O(log n)."""
    lo, hi = max(0, k + 1 - y.size), min(k + 1, x.size)
    while lo < hi:  # i: how many of the k + 1 smallest come from x
        i = (lo + hi) // 2
        if x[i] < y[k - i]:  # x[i] is among the k + 1 smallest: take more from x
            lo = i + 1
        else:
            hi = i
    i = lo
    cands = ([x[i - 1]] if i > 0 else []) + ([y[k - i]] if k - i >= 0 else [])
    return float(max(cands))


def _mad_sorted(v: np.ndarray) -> float:
    """median(|v - median(v)|) of sorted, finite `v` (size ≥ 1), as np.median computes it:
    the distances are two sorted runs (below the median, reversed; from it up), so their
    median is found by bisection instead of a partition of a new array."""
    med = _median_sorted(v)
    cut = int(np.searchsorted(v, med, side="left"))
    below = med - v[:cut][::-1]  # ascending
    above = v[cut:] - med  # ascending
    n = v.size
    if n % 2:
        return _kth_of_two(below, above, n // 2)
    return (_kth_of_two(below, above, n // 2 - 1) + _kth_of_two(below, above, n // 2)) / 2


def resolution(*arrays: object) -> float:
    """Smallest positive difference between distinct finite values over all arrays; NaN if none."""
    parts = [drop_nonfinite(x)[0] for x in arrays]
    u = np.unique(np.concatenate(parts)) if parts else np.empty(0)
    if u.size < 2:
        return math.nan
    return float(np.diff(u).min())


def log_epsilon(*arrays: object) -> float:
    """ε_m = max(resolution, 1 % of the median positive value) over all arrays; NaN if neither."""
    res = resolution(*arrays)
    pooled = np.concatenate([drop_nonfinite(x)[0] for x in arrays]) if arrays else np.empty(0)
    pos = pooled[pooled > 0]
    share = 0.01 * float(np.median(pos)) if pos.size else math.nan
    cands = [c for c in (res, share) if not math.isnan(c)]
    return max(cands) if cands else math.nan


def quantile_table(x: object) -> dict[str, float]:
    """min, P5 … P99, max, mean, sd (ddof 1), n of the finite values (linear interpolation).

    Keys are `QUANTILE_KEYS` + ("mean", "sd", "n"); empty input gives NaN everywhere and
    n = 0; sd is NaN when n < 2.
    """
    v, _ = drop_nonfinite(x)
    out: dict[str, float] = {}
    if v.size:
        qs = np.quantile(v, _QUANTILE_LEVELS, method="linear")
        out.update({k: float(q) for k, q in zip(QUANTILE_KEYS, qs, strict=True)})
        out["mean"] = float(np.mean(v))
    else:
        out.update({k: math.nan for k in QUANTILE_KEYS})
        out["mean"] = math.nan
    out["sd"] = float(np.std(v, ddof=1)) if v.size >= 2 else math.nan
    out["n"] = int(v.size)
    return out


# ---------------------------------------------------------------------------------------
# Pairwise differences a_i - n_j without the m·n matrix


def _bracket_counts(a: np.ndarray, e: np.ndarray, p: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Narrow [lo, hi] around #j with fl(a_i + e_j) < p (or ≤ p) to a few columns.

    searchsorted of e against p - a_i, widened by a rounding bound: |rounding of p - a_i,
    of the widened key and of a_i + e_j| < 4u·S with S = |p| + max|a| + max|e|, so a margin
    of 16u·S (+ an absolute term for underflow) leaves every column outside the bracket on
    the right side of p.  The upper end is first guessed two columns further and checked
    on the computed sums; only rows where that fails (ties at p) pay a second search.
    """
    # Rows reversed so that the keys p - a_i ascend: searchsorted is faster on sorted keys.
    thr = p[:, None] - a[None, ::-1]
    big = max(abs(a[0]), abs(a[-1])) + max(abs(e[0]), abs(e[-1]))
    tol = (8.0 * np.finfo(np.float64).eps * (np.abs(p) + big) + 1e-300)[:, None]
    lo_s = np.searchsorted(e, (thr - tol).ravel(), side="left").reshape(thr.shape)[:, ::-1]
    hi_s = lo_s + 2
    last = e.size - 1
    fits = (hi_s > last) | (a[None, :] + e[np.minimum(hi_s, last)] > p[:, None])
    if not fits.all():
        miss = ~fits[:, ::-1]
        found = np.searchsorted(e, (thr + tol)[miss], side="right")
        hi_rev = hi_s[:, ::-1].copy()
        hi_rev[miss] = found
        hi_s = hi_rev[:, ::-1]
    lo2 = np.maximum(lo, lo_s)
    hi2 = np.minimum(hi, hi_s)
    if (lo2 > hi2).any():  # only with overflowing inputs: keep the known window
        return lo, hi
    return lo2, hi2


def _count_below(a: np.ndarray, e: np.ndarray, p: np.ndarray, strict: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (query q, row i): #j with fl(a_i + e_j) < p_q (strict) or ≤ p_q, known in [lo, hi].

    `a`, `e` ascending, so each row fl(a_i + e_j) is non-decreasing in j (rounding is
    monotone).  A searchsorted of e against p - a_i widened by a rounding bound brackets
    every count to a few columns; a vectorised bisection comparing the computed sums
    themselves — not e_j against p - a_i — then settles it, so the counts agree exactly
    with the values `_select_pairwise` returns.
    """
    if int((hi - lo).max()) > _BRACKET_MIN:  # wide windows: bracket them by searchsorted
        lo, hi = _bracket_counts(a, e, p, lo, hi)
    pq = p[:, None]
    st = strict[:, None]
    last = e.size - 1
    # Settle rows from the window's ends: a "< p" count is lo when the first entry is
    # already ≥ p, a "≤ p" count is hi when the last one is still ≤ p.  This ends every
    # row of a window full of ties at p, and most rows of a 2-column bracket.
    open_ = lo < hi
    at_lo = a[None, :] + e[np.minimum(lo, last)]
    at_hi = a[None, :] + e[np.maximum(hi - 1, 0)]
    settle_lo = open_ & st & (at_lo >= pq)
    settle_hi = open_ & ~st & (at_hi <= pq)
    hi = np.where(settle_lo, lo, hi)
    lo = np.where(settle_hi, hi, lo)
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) >> 1
        v = a[None, :] + e[np.minimum(mid, last)]
        inside = np.where(st, v < pq, v <= pq)
        lo = np.where(open_ & inside, mid + 1, lo)
        hi = np.where(open_ & ~inside, mid, hi)


def _draw_candidates(L: np.ndarray, R: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`size` (row, column) pairs drawn uniformly from the windows [L_i, R_i) of one target."""
    width = R - L
    cum = np.cumsum(width)
    draws = np.sort((_RNG.random(size) * cum[-1]).astype(np.int64))
    row = np.searchsorted(cum, draws, side="right")
    return row, L[row] + draws - (cum[row] - width[row])


def _select_pairwise(a: np.ndarray, e: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The ranks[t]-th smallest (0-based) of all fl(a_i + e_j); a, e sorted ascending.

    Sample-select on the implicit m×n matrix, whose rows and columns are both sorted.  Per
    target, every row i keeps the column window [L_i, R_i) that may still hold the target:
    entries left of it are known smaller, entries right of it larger.  Each round draws
    candidates, takes two pivots per target that bracket its rank with ~95 % probability
    (±2 sd of the sample rank), counts the entries below each (`_count_below`), and
    shrinks the windows; once few candidates remain they are gathered and partitioned.

    The targets of one call (median, CI ends) lie close together, so round one cuts all
    windows to one shared band with a single pair of pivots, and round two draws one
    sample from that band for all targets.  At 2,000 × 2,000: two rounds, 8 counts,
    ~15,000 candidates gathered per target — instead of the 4 M-entry matrix.
    """
    m, nn = a.size, e.size
    n_t = ranks.size
    L = np.zeros((n_t, m), np.int64)
    R = np.full((n_t, m), nn, np.int64)
    out = np.full(n_t, math.nan)
    todo = np.ones(n_t, bool)
    gather_limit = max(_GATHER_LIMIT, 4 * m)
    rows = np.arange(m)
    first_round = True
    while True:
        for t in np.flatnonzero(todo):
            width = R[t] - L[t]
            total = int(width.sum())
            if total > gather_limit:
                continue
            k = int(ranks[t] - L[t].sum())
            ri = np.repeat(rows, width)
            start = np.cumsum(width) - width
            cj = L[t][ri] + (np.arange(total) - np.repeat(start, width))
            out[t] = np.partition(a[ri] + e[cj], k)[k]
            todo[t] = False
        idx = np.flatnonzero(todo)
        if idx.size == 0:
            return out
        n_i = idx.size
        totals = (R[idx] - L[idx]).sum(axis=1)
        k_in = ranks[idx] - L[idx].sum(axis=1)
        if first_round:
            # Whole matrix: one large sample, one pair of pivots around every target.
            first_round = False
            n_s = 16_384
            sample = a[_RNG.integers(0, m, n_s)] + e[_RNG.integers(0, nn, n_s)]
            lo_q, hi_q = _sample_positions(k_in, totals, n_s)
            lo_q, hi_q = int(lo_q.min()), int(hi_q.max())
            part = np.partition(sample, (lo_q, hi_q))
            p1 = np.full(n_i, part[lo_q])
            p2 = np.full(n_i, part[hi_q])
            shared = _count_below(a, e, np.array([p1[0], p2[0]]), np.array([False, True]),
                                  L[idx[:1]].repeat(2, axis=0), R[idx[:1]].repeat(2, axis=0))
            cnt = np.broadcast_to(shared, (n_i, 2, m))
        else:
            n_s = 4096
            common = all(np.array_equal(L[t], L[idx[0]]) and np.array_equal(R[t], R[idx[0]])
                         for t in idx[1:])
            lo_q, hi_q = _sample_positions(k_in, totals, n_s)
            p1 = np.empty(n_i)
            p2 = np.empty(n_i)
            if common:  # the band left by round one: one sorted sample serves every target
                row, col = _draw_candidates(L[idx[0]], R[idx[0]], n_s)
                sample = np.sort(a[row] + e[col])
                p1[:], p2[:] = sample[lo_q], sample[hi_q]
            else:
                for q, t in enumerate(idx):
                    row, col = _draw_candidates(L[t], R[t], n_s)
                    part = np.partition(a[row] + e[col], (lo_q[q], hi_q[q]))
                    p1[q], p2[q] = part[lo_q[q]], part[hi_q[q]]
            # Count "≤ p1" and "< p2".  When p1 == p2 that pair is exactly the test "is the
            # target p?", which ends a window made only of ties.  Every count lies in [L, R].
            piv = np.stack([p1, p2], axis=1).ravel()
            strict = np.tile([False, True], n_i)
            cnt = _count_below(a, e, piv, strict, np.repeat(L[idx], 2, axis=0),
                               np.repeat(R[idx], 2, axis=0)).reshape(n_i, 2, m)
        sums = cnt.sum(axis=2)
        for q, t in enumerate(idx):
            k = ranks[t]
            le1, lt2 = cnt[q, 0], cnt[q, 1]
            c_le1, c_lt2 = sums[q, 0], sums[q, 1]
            if p1[q] == p2[q] and c_lt2 <= k < c_le1:
                out[t] = p1[q]
                todo[t] = False
                continue
            # Entries ≤ p1 lie below the target when there are at most k of them, else
            # entries > p1 lie above it; likewise for < p2.  Either way a pivot leaves.
            if c_le1 <= k:
                np.maximum(L[t], le1, out=L[t])
            else:
                np.minimum(R[t], le1, out=R[t])
            if c_lt2 > k:
                np.minimum(R[t], lt2, out=R[t])
            else:
                np.maximum(L[t], lt2, out=L[t])


def _sample_positions(k_in: np.ndarray, totals: np.ndarray,
                      n_s: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample ranks ±2 sd around each target's expected rank k_in/total·n_s, clipped."""
    frac = k_in / totals
    mid = frac * n_s
    half = 2.0 * np.sqrt(n_s * frac * (1 - frac)) + 2.0
    lo = np.clip(np.floor(mid - half), 0, n_s - 1).astype(np.int64)
    hi = np.clip(np.ceil(mid + half), 0, n_s - 1).astype(np.int64)
    return lo, hi


def _next_order_stat(a: np.ndarray, e: np.ndarray, x: float, k: int) -> float:
    """The (k+1)-th smallest fl(a_i + e_j) given that x is the k-th (0-based): O(m·log n)."""
    m = a.size
    le = _count_below(a, e, np.array([x]), np.array([False]), np.zeros((1, m), np.int64),
                      np.full((1, m), e.size, np.int64))[0]
    if int(le.sum()) > k + 1:
        return x  # x is tied: the next one is x again
    rows = np.flatnonzero(le < e.size)
    return float(np.min(a[rows] + e[le[rows]]))


def _pairwise_order_stats(a: np.ndarray, n: np.ndarray, ranks: list[int],
                          median: bool = False, presorted: bool = False) -> np.ndarray:
    """0-based order statistics of the differences a_i - n_j (finite, non-empty inputs).

    With `median`, a last value is appended: the median of all m·n differences, as
    np.median computes it (mean of the two middle ones when m·n is even).

    Above HL_MAX_PAIRS pairs (hundreds of thousands of cycles a side: a decode loop traced for
    minutes) each side is thinned to HL_MAX_SIDE evenly spaced order statistics and the ranks
    are rescaled: the result lies within a quantile step of the exact one, at a fraction of
    the cost.  Means, the U-test and Cliff's δ still use every value.
    """
    if a.size * n.size > HL_MAX_PAIRS:
        full = a.size * n.size
        if not presorted:
            a, n = np.sort(a), np.sort(n)
        a, n = _thin_sorted(a, HL_MAX_SIDE), _thin_sorted(n, HL_MAX_SIDE)
        ranks = [min(int(round(r * a.size * n.size / full)), a.size * n.size - 1) for r in ranks]
    total = a.size * n.size
    mid = (total - 1) // 2
    even = median and total % 2 == 0
    want = np.asarray(list(ranks) + ([mid] if median else []), np.int64)
    if total <= _DIRECT_LIMIT:  # small: the matrix itself and one partition
        kth = np.unique(np.append(want, [mid + 1] if even else []).astype(np.int64))
        part = np.partition(np.subtract.outer(a, n).ravel(), kth)
        vals = part[want]
        upper = part[mid + 1] if even else math.nan
    else:
        a_s = np.sort(a)
        e = np.sort(-n)  # a_i - n_j == a_i + (-n_j): negation is exact
        # The shorter side indexes the rows: the bisection then works on fewer of them.
        rows, cols = (a_s, e) if a_s.size <= e.size else (e, a_s)
        uniq, inverse = np.unique(want, return_inverse=True)
        vals = _select_pairwise(rows, cols, uniq)[inverse]
        # The upper middle one follows from the lower in O(m·log n).
        upper = _next_order_stat(rows, cols, vals[-1], mid) if even else math.nan
    if even:
        vals[-1] = (vals[-1] + upper) / 2
    return vals


HL_MAX_SIDE = 20_000  # values a side kept for the pairwise order statistics of huge inputs
HL_MAX_PAIRS = HL_MAX_SIDE * HL_MAX_SIDE


def _thin_sorted(x: np.ndarray, m: int) -> np.ndarray:
    """At most `m` evenly spaced order statistics of sorted `x` (its ends included)."""
    if x.size <= m:
        return x
    return x[np.linspace(0, x.size - 1, m).round().astype(np.int64)]


def hodges_lehmann(a: object, n: object) -> float:
    """Hodges–Lehmann shift: median of all pairwise a_i - n_j (x's unit); NaN if a side is empty."""
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    if av.size == 0 or nv.size == 0:
        return math.nan
    return float(_pairwise_order_stats(av, nv, [], median=True)[0])


# ---------------------------------------------------------------------------------------
# The distribution of the Mann–Whitney rank sum


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


def _u_statistic(a: np.ndarray, n: np.ndarray) -> tuple[float, int, int]:
    """U of side a (#(a > n) + ½·#(a = n)) and the raw counts #(a > n), #(a < n).

    Sorted `a` is not required but makes the searches ~3× faster.
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
    mu = n1 * n2 / 2.0
    tt = _tie_term(pooled) if tie_term is None else tie_term
    var = n1 * n2 / 12.0 * ((total + 1) - tt / (total * (total - 1)))
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return float(min(1.0, 2.0 * special.ndtr(-z))), "asymptotic"


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


def cycles_needed(n_total_tests: int, alpha: float = 0.05) -> int:
    """Cycles per side from which a perfectly separated row can reach q ≤ alpha under BH.

    Rule: the smallest n such that min_attainable_p(n', n')·m ≤ alpha for every n' ≥ n,
    m = max(1, n_total_tests).  BH gives the smallest p a q of at most p·m, so the
    condition guarantees q ≤ alpha whatever the other rows do.  "Every n' ≥ n" matters:
    past the exact regime (n > 10) the asymptotic p of a perfect separation is larger than
    the exact one at n = 10, so the condition is not monotone there.
    """
    m = max(1, int(n_total_tests))
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    ok: list[bool] = []
    n = 1
    while True:
        n += 1
        good = min_attainable_p(n, n) * m <= alpha
        ok.append(good)
        # Past the exact regime min_attainable_p(n, n) decreases in n: the first success
        # there holds for all larger n.
        if good and not _exact_regime(n, n):
            break
    need = n
    for i in range(len(ok) - 1, -1, -1):
        if not ok[i]:
            break
        need = i + 2
    return need


# ---------------------------------------------------------------------------------------
# Effect sizes and tests


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


def welch_p(a: object, n: object) -> float:
    """Welch two-sided t-test p (scipy ttest_ind equal_var=False).

    NaN when n < 2 on a side; both constant and equal → 1.0; both constant and different
    → NaN (a t statistic of ±∞ is not a p-value: the row is n/a, its reason says why).
    """
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    return _welch(av, nv)[0]


def _welch(av: np.ndarray, nv: np.ndarray) -> tuple[float, str]:
    if av.size < 2 or nv.size < 2:
        return math.nan, "n < 2 on a side"
    const_a, const_n = _is_constant(av), _is_constant(nv)
    if const_a and const_n:
        if av[0] == nv[0]:
            return 1.0, ""
        return math.nan, "both constant and different"
    va = 0.0 if const_a else float(np.var(av, ddof=1)) / av.size
    vn = 0.0 if const_n else float(np.var(nv, ddof=1)) / nv.size
    se2 = va + vn
    t = (float(np.mean(av)) - float(np.mean(nv))) / math.sqrt(se2)
    df = se2**2 / (va**2 / (av.size - 1) + vn**2 / (nv.size - 1))
    return float(min(1.0, 2.0 * special.stdtr(df, -abs(t)))), ""


def _z_from(hl: float, nv: np.ndarray, floor: float, presorted: bool = False) -> tuple[float, str]:
    """Z = HL / max(σ̂_N, 0.05·|median_N|, floor) with STATS.md's n/a rules (`presorted`: nv
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


# ---------------------------------------------------------------------------------------
# One row: every two-sample statistic at once


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


def compare_samples(a: object, n: object, floor: float, *, alpha: float | None = None,
                    level: float = 0.95) -> TwoSample:
    """All two-sample statistics of one row: `n` normal side, `a` abnormal, `floor` in x's unit.

    Non-finite values are dropped and counted in `dropped`.  With `alpha`, the U-test p is
    n/a when even a perfect separation could not reach it (STATS.md: "smallest attainable
    p > α"); without, it is always reported and `p_mwu_min` lets the caller decide.
    Reasons read "<field>: <why>", e.g. "z: n_N < 3", "p_mwu: all tied (p = 1)".
    """
    av, drop_a = drop_nonfinite(a)
    nv, drop_n = drop_nonfinite(n)
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
    p_u, method = _mann_whitney(av, nv, u, None if empty else tie_term)
    p_min = min_attainable_p(nv.size, av.size)
    if method == "all-tied":
        reasons.append("p_mwu: all tied (p = 1)")
    if alpha is not None and not empty and p_min > alpha:
        reasons.append(f"p_mwu: smallest attainable p {p_min:.3g} > α = {alpha:g} "
                       f"at {nv.size} / {av.size}")
        p_u, method = math.nan, "n/a"

    return TwoSample(
        n_n=int(nv.size), n_a=int(av.size), dropped=drop_a + drop_n,
        mean_n=float(np.mean(nv)) if nv.size else math.nan,
        mean_a=float(np.mean(av)) if av.size else math.nan,
        median_n=_median_sorted(nv) if nv.size else math.nan,
        median_a=_median_sorted(av) if av.size else math.nan,
        z=z, p_welch=p_w, p_mwu=p_u, mwu_method=method,
        hl=hl, hl_lo=hl_lo, hl_hi=hl_hi, cliffs_delta=delta,
        reasons=tuple(reasons), p_mwu_min=p_min,
    )


# ---------------------------------------------------------------------------------------
# Across rows


def bh_qvalues(p: object) -> np.ndarray:
    """Benjamini–Hochberg q-values (step-up, capped at 1); NaN p stay NaN and do not count in m."""
    arr = np.asarray(p, dtype=np.float64)
    q = np.full(arr.shape, math.nan)
    ok = np.isfinite(arr)
    m = int(ok.sum())
    if m == 0:
        return q
    pv = arr[ok]
    order = np.argsort(pv, kind="stable")
    scaled = pv[order] * m / np.arange(1, m + 1)
    # q_(i) = min over j ≥ i of p_(j)·m/j: a running minimum from the largest p down.
    qs = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = qs
    q[ok] = out
    return q


def is_fragile(p_welch: float, p_mwu: float, alpha: float) -> bool:
    """True when Welch and Mann–Whitney disagree about significance at alpha (pass p or q).

    Both must be computable: when one is n/a the row already carries that reason, and an
    n/a Welch next to a significant U-test is usually a perfect separation (both sides
    constant and different), not a fragile result.
    """
    if not (math.isfinite(p_welch) and math.isfinite(p_mwu)):
        return False
    return (p_welch <= alpha) != (p_mwu <= alpha)


@dataclass(frozen=True)
class CommonMode:
    """A device-wide shift: all `k` functions scaled by `ratio` (A/N); `iqr_log` = IQR of ln r."""

    ratio: float
    k: int
    iqr_log: float


@dataclass(frozen=True)
class CommonModeDetail:
    """The common-mode check with its numbers, triggered or not, and why not in words."""

    ratio: float  # exp(median ln r); NaN when no function qualifies, 0 when most vanished
    k: int  # functions with β̄_N ≥ min_beta
    iqr_log: float
    median_log: float
    triggered: bool
    reason: str


def _quantile_with_inf(x: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile of sorted `x` that may hold -inf (a vanished function)."""
    pos = q * (x.size - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    if x[lo] == x[hi]:
        return float(x[lo])
    if not (math.isfinite(x[lo]) and math.isfinite(x[hi])):
        return float(x[lo])  # -inf on the low end: the quantile is -inf
    return float(x[lo] + (pos - lo) * (x[hi] - x[lo]))


def common_mode_detail(beta_n_means: object, beta_a_means: object,
                       min_beta: float = COMMON_MIN_BETA) -> CommonModeDetail:
    """STATS.md "Common mode" on one device: r_f = β̄_A/β̄_N where β̄_N ≥ min_beta (pp).

    Triggered when k ≥ 3, IQR(ln r) ≤ 0.2 and |median ln r| ≥ ln 1.25.  A function that
    vanished (β̄_A = 0) has ln r = -inf: it stays in, so a few of them widen nothing but
    many of them break the common mode (IQR = ∞).  Pairs with a NaN mean are skipped.
    """
    bn = np.asarray(beta_n_means, dtype=np.float64).ravel()
    ba = np.asarray(beta_a_means, dtype=np.float64).ravel()
    if bn.shape != ba.shape:
        raise ValueError(f"beta_n_means and beta_a_means differ in length: {bn.size} vs {ba.size}")
    keep = np.isfinite(bn) & np.isfinite(ba) & (bn >= min_beta) & (ba >= 0)
    k = int(keep.sum())
    if k == 0:
        return CommonModeDetail(math.nan, 0, math.nan, math.nan, False,
                                f"no function with β̄_N ≥ {min_beta:g} pp")
    with np.errstate(divide="ignore"):
        logs = np.sort(np.log(ba[keep] / bn[keep]))
    med = _quantile_with_inf(logs, 0.5)
    q1, q3 = _quantile_with_inf(logs, 0.25), _quantile_with_inf(logs, 0.75)
    # q1 = q3 = -inf (most vanished) is no spread at all; q1 = -inf < q3 is an infinite one.
    iqr = 0.0 if q1 == q3 else q3 - q1
    ratio = math.exp(med) if math.isfinite(med) else 0.0
    if k < 3:
        reason = f"only {k} function(s) with β̄_N ≥ {min_beta:g} pp (need 3)"
    elif not iqr <= COMMON_MAX_IQR:
        reason = f"IQR(ln r) = {iqr:.3g} > {COMMON_MAX_IQR:g}: functions changed differently"
    elif not math.isfinite(med):
        reason = "most functions vanished: not a scale shift"
    elif abs(med) < COMMON_MIN_SHIFT:
        reason = f"median ratio ×{ratio:.3g} within ×1.25 of 1"
    else:
        reason = ""
    return CommonModeDetail(ratio, k, iqr, med, reason == "", reason)


def common_mode(beta_n_means: object, beta_a_means: object,
                min_beta: float = COMMON_MIN_BETA) -> CommonMode | None:
    """The common-mode shift of one device, or None when the rule does not trigger."""
    d = common_mode_detail(beta_n_means, beta_a_means, min_beta)
    return CommonMode(d.ratio, d.k, d.iqr_log) if d.triggered else None


def delta_vs_common(beta_n_mean: object, beta_a_mean: object, ratio: float) -> np.ndarray | float:
    """Δβ vs common = β̄_A - r·β̄_N (pp): how far a function deviates from the device-wide shift."""
    beta_a = np.asarray(beta_a_mean, dtype=np.float64)
    out = beta_a - ratio * np.asarray(beta_n_mean, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def _cap_abs(z: object) -> np.ndarray:
    zz = np.abs(np.asarray(z, dtype=np.float64))
    return np.where(np.isnan(zz), 0.0, np.minimum(zz, SCORE_Z_CAP))


def suspicion_score(tau: object, z_t: object, z_logmu: object,
                    func_scope: object) -> float | np.ndarray:
    """S = |τ|·(min(|Z(t)|, 5) + (min(|Z(log μ)|, 5) if func_scope else 0)), τ in pp.

    n/a Z counts 0; NaN τ gives NaN.  Works elementwise on arrays too.
    """
    w = _cap_abs(z_t) + np.where(np.asarray(func_scope, dtype=bool), _cap_abs(z_logmu), 0.0)
    s = np.abs(np.asarray(tau, dtype=np.float64)) * w
    return float(s) if s.ndim == 0 else s


def legacy_score(delta_beta: object, z_beta: object, z_logmu: object) -> float | np.ndarray:
    """The reference's |Δβ|·(|Z(β)| + |Z(log μ)|), n/a Z counting 0, uncapped; elementwise too."""
    zb = np.abs(np.nan_to_num(np.asarray(z_beta, dtype=np.float64), nan=0.0))
    zl = np.abs(np.nan_to_num(np.asarray(z_logmu, dtype=np.float64), nan=0.0))
    s = np.abs(np.asarray(delta_beta, dtype=np.float64)) * (zb + zl)
    return float(s) if s.ndim == 0 else s
