"""Order statistics of the pairwise differences a_i - n_j without the m·n matrix.

What the Hodges–Lehmann shift and its confidence interval are read from
(docs/STATISTICS.md, "Hodges–Lehmann shift").  Values are bit-identical to
``np.partition(np.subtract.outer(a, n).ravel(), k)[k]``; huge inputs are thinned first.
"""
from __future__ import annotations

import math

import numpy as np

# Up to _DIRECT_LIMIT pairwise differences the matrix is built and partitioned; above,
# `_select_pairwise` brackets windows wider than _BRACKET_MIN columns by searchsorted before
# bisecting, and materialises at most _GATHER_LIMIT candidates per target.
_DIRECT_LIMIT = 100_000
_BRACKET_MIN = 64
_GATHER_LIMIT = 32_000
# Pivot sampling, seeded once at import.  The values returned never depend on the draws,
# only the time taken does.
_RNG = np.random.default_rng(20240611)
HL_MAX_SIDE = 20_000  # values a side kept for the pairwise order statistics of huge inputs
HL_MAX_PAIRS = HL_MAX_SIDE * HL_MAX_SIDE


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
    sample from that band for all targets.
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


def _thin_sorted(x: np.ndarray, m: int) -> np.ndarray:
    """At most `m` evenly spaced order statistics of sorted `x` (its ends included)."""
    if x.size <= m:
        return x
    return x[np.linspace(0, x.size - 1, m).round().astype(np.int64)]

