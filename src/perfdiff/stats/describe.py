"""One-sample summaries and input hygiene (docs/STATISTICS.md, "Quantile table").

Finite values only (`drop_nonfinite`), robust scale σ̂ = 1.4826·MAD, the resolution of a
metric (its smallest step), the log offset ε, and the quantile table of cycle durations.
Values keep the unit of the input.
"""
from __future__ import annotations

import math

import numpy as np

# 1.4826·MAD estimates σ for normal data.
MAD_TO_SD = 1.4826
QUANTILE_KEYS = ("min", "P5", "P10", "P25", "P50", "P75", "P90", "P95", "P99", "max")
_QUANTILE_LEVELS = (0.0, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 1.0)


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



def quantile_ci(x: object, q: float, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the q-quantile: the order statistics [x_(l), x_(u)] whose ranks
    bound the Binomial(n, q) count below the quantile, for a coverage of about `level` (Hahn &
    Meeker 1991; the binomial by its normal approximation with a continuity correction).
    (NaN, NaN) when the sample is too small to reach `level` on either side."""
    v, _ = drop_nonfinite(x)
    n = v.size
    if n == 0 or not 0.0 < q < 1.0:
        return math.nan, math.nan
    from perfdiff.stats import special

    z = float(special.ndtri(1.0 - (1.0 - level) / 2.0))
    half = z * math.sqrt(n * q * (1.0 - q))
    lo = int(math.floor(n * q - half - 0.5))  # 0-based ranks
    hi = int(math.ceil(n * q + half + 0.5)) - 1
    if lo < 0 or hi > n - 1:
        return math.nan, math.nan
    part = np.partition(v, [lo, hi])
    return float(part[lo]), float(part[hi])
