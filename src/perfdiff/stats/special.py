"""The special functions perfdiff's tests need, with scipy.special's names and meanings.

`ndtr`, `ndtri` (the standard normal's CDF and quantile), `stdtr`, `stdtrit` (Student's t CDF
and quantile, any real df > 0), `bdtrc` (the binomial's upper tail) and `kolmogorov`
(Kolmogorov's limiting distribution's survival function).  Each takes floats (a float out) or
arrays (broadcast; NaN where scipy.special gives NaN); `stdtr` and `stdtrit` work on whole
arrays at once.  Computed from the standard library's `math.erfc`, `math.erf` and
`math.lgamma` so that no command imports scipy; the methods, their accuracy against
scipy.special (tests/test_special.py) and why: docs/STATISTICS.md §8a.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["bdtrc", "kolmogorov", "ndtr", "ndtri", "stdtr", "stdtrit"]

_EPS = 1e-16  # the continued fraction's relative stopping criterion
_TINY = 1e-300  # keeps the modified Lentz recursion away from division by zero
_MAX_TERMS = 100_000  # the fraction needs about √max(a, b) terms; this bounds a runaway
_LN_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_T_LARGEST = 1e154  # |t| whose square is still a double
_DF_MIN = 1e-100  # degrees of freedom below this are outside what is computed here (NaN)


_SCALARS = (float, int, np.floating, np.integer, np.bool_, bool)


def _vectorized(scalar: Callable[..., float],
                array: Callable[..., np.ndarray] | None = None) -> Callable[..., Any]:
    """`scalar` on floats (a float out), and over arrays broadcast elementwise: by `array`,
    which takes float64 arrays of one shape, where given, else element by element."""
    ufunc = np.frompyfunc(scalar, scalar.__code__.co_argcount, 1)

    def apply(*args: Any) -> Any:
        if all(isinstance(a, _SCALARS) or np.ndim(a) == 0 for a in args):
            return scalar(*(float(a) for a in args))
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in args))
        if array is not None:
            return array(*arrays)
        return ufunc(*arrays).astype(np.float64)

    apply.__name__ = scalar.__name__.lstrip("_")
    apply.__doc__ = scalar.__doc__
    return apply


def _ndtr(x: float) -> float:
    """Φ(x), the standard normal CDF."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


# Acklam's rational approximation of Φ⁻¹ (relative error < 1.2e-9), refined below by one
# Halley step on Φ to full double precision.
_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
      4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)


def _ndtri(p: float) -> float:
    """Φ⁻¹(p): the x with Φ(x) = p; ∓inf at 0 and 1, NaN outside [0, 1]."""
    if not 0.0 <= p <= 1.0:
        return math.nan
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    if p < 0.02425:
        q = math.sqrt(-2.0 * math.log(p))
        x = ((((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5])
             / ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0))
    elif p > 1.0 - 0.02425:
        q = math.sqrt(-2.0 * math.log1p(-p))
        x = -((((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5])
              / ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0))
    else:
        q = p - 0.5
        r = q * q
        x = ((((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * q
             / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0))
    if 0.5 * x * x > 700.0:  # p subnormal: the step's factor would overflow; 1e-9 as it is
        return x
    # Halley's step, Φ(x) − p taken where it does not cancel: by the tail nearer x, or near
    # ½ as erf(x/√2)/2 − (p − ½) (p − ½ is exact there).
    if 0.25 <= p <= 0.75:
        e = 0.5 * math.erf(x / math.sqrt(2.0)) - (p - 0.5)
    elif x <= 0.0:
        e = 0.5 * math.erfc(-x / math.sqrt(2.0)) - p
    else:
        e = (1.0 - p) - 0.5 * math.erfc(x / math.sqrt(2.0))
    u = e * math.sqrt(2.0 * math.pi) * math.exp(0.5 * x * x)
    return x - u / (1.0 + 0.5 * x * u)


def _stirling_tail(x: float) -> float:
    """lgamma(x) − ((x − ½)·ln x − x + ln √(2π)) for x ≥ 10: Stirling's series, 7 terms."""
    z = 1.0 / (x * x)
    return (1.0 / 12.0 - z * (1.0 / 360.0 - z * (1.0 / 1260.0 - z * (1.0 / 1680.0 - z * (
        1.0 / 1188.0 - z * (691.0 / 360360.0 - z / 156.0)))))) / x


def _lbeta(a: float, b: float) -> float:
    """ln B(a, b) for a, b > 0, without the cancellation of lgamma(a) + lgamma(b) −
    lgamma(a + b) when an argument is large (the correction terms of R's lbeta)."""
    p, q = min(a, b), max(a, b)
    if p >= 10.0:
        corr = _stirling_tail(p) + _stirling_tail(q) - _stirling_tail(p + q)
        return (-0.5 * math.log(q) + _LN_SQRT_2PI + corr + (p - 0.5) * math.log(p / (p + q))
                + q * math.log1p(-p / (p + q)))
    if q >= 10.0:
        corr = _stirling_tail(q) - _stirling_tail(p + q)
        return math.lgamma(p) + corr + p - p * math.log(p + q) + (q - 0.5) * math.log1p(-p / (p + q))
    return math.lgamma(p) + math.lgamma(q) - math.lgamma(p + q)


def _beta_fraction(a: float, b: float, x: float, y: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), for x < (a + 1) / (a + b + 2);
    y = 1 − x."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    # 1 − (a + b)·x / (a + 1); from y where x is near 1, which would cancel to a few digits.
    c, d = 1.0, ((1.0 - b) + qab * y) / qap if x > 0.5 else 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, with y = 1 − x given separately
    (computed by the caller without cancellation) for a, b > 0, 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    # ln x and ln y each from the smaller of the two: ln(1 − y) of an x near 1 rounded to a
    # double would carry its rounding error, times a, into the result.
    lx = math.log(x) if x < 0.5 else math.log1p(-y)
    ly = math.log(y) if y < 0.5 else math.log1p(-x)
    front = math.exp(a * lx + b * ly - _lbeta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front / a * _beta_fraction(a, b, x, y)
    return 1.0 - front / b * _beta_fraction(b, a, y, x)


def _t_lower_tail(df: float, t: float) -> float:
    """P(T ≤ t) for t ≤ 0: ½·I_{df/(df+t²)}(df/2, ½), 1 − x taken as t²/(df + t²)."""
    t2 = t * t
    if t2 == 0.0:
        return 0.5
    if math.isinf(t2):
        return 0.0
    # x = df / (df + t²) and 1 − x, each computed without cancellation.
    return 0.5 * _betainc(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2))


def _stdtr(df: float, t: float) -> float:
    """P(T ≤ t) for Student's t with `df` > 0 degrees of freedom (inf: the normal)."""
    if math.isnan(df) or math.isnan(t) or not df >= _DF_MIN:
        return math.nan
    if math.isinf(t):
        return 0.0 if t < 0 else 1.0
    if math.isinf(df):
        return _ndtr(t)
    if t == 0.0:
        return 0.5
    tail = _t_lower_tail(df, -abs(t))
    return tail if t < 0 else 1.0 - tail


def _t_log_density(df: float, t: float) -> float:
    """ln of Student's t density at t (finite where the density itself underflows)."""
    return -0.5 * math.log(df) - _lbeta(0.5 * df, 0.5) - 0.5 * (df + 1.0) * math.log1p(t * t / df)


def _stdtrit(df: float, p: float) -> float:
    """The t with P(T ≤ t) = p for Student's t with `df` > 0 degrees of freedom."""
    if math.isnan(df) or math.isnan(p) or not df >= _DF_MIN or not 0.0 <= p <= 1.0:
        return math.nan
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    if math.isinf(df):
        return _ndtri(p)
    if p == 0.5:
        return 0.0
    # Solved on the lower tail (where P is computed without cancellation), then mirrored.
    lower = 1.0 - p if p > 0.5 else p
    if df == 1.0:  # Cauchy: tan(π(q − ½)), written so that a tiny q keeps its precision
        t = -1.0 / math.tan(math.pi * lower)
    elif df == 2.0:
        t = (2.0 * lower - 1.0) / math.sqrt(2.0 * lower * (1.0 - lower))
    else:
        t = _solve_lower(df, lower)
    return -t if p > 0.5 else t


def _t_start(z: Any, df: Any) -> Any:
    """Where the search for the t quantile starts, from the normal's z (floats or arrays): the
    Cornish–Fisher expansion (Abramowitz & Stegun 26.7.5), pushed further out for df < 3."""
    g1, g2 = (z ** 3 + z) / 4.0, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96.0
    return np.where(df >= 3.0, z + g1 / df + g2 / (df * df), z * (1.0 + 1.0 / df) ** 2)


def _settled(size: Any, last: Any) -> Any:
    """Whether Newton's step of `size` (after one of `last`) ends the search (floats or arrays):
    converging quadratically, the step after one of 1e-12 is below rounding; where P itself is
    only good to ~1e-11 (df ≥ 1e4) the steps stop shrinking instead."""
    return (size <= 1e-12) | ((size < 1e-8) & (size >= 0.5 * last))


def _solve_lower(df: float, q: float) -> float:
    """The t ≤ 0 with P(T ≤ t) = q (0 < q < ½): Newton steps on ln P against ln |t|, kept
    inside a bracket that bisection narrows when a step leaves it (so any start will do)."""
    t = float(_t_start(_ndtri(q), df))
    lo, hi = -math.inf, 0.0  # P(lo) ≤ q ≤ P(hi)
    logq, last = math.log(q), math.inf
    for _ in range(400):
        if not lo < t < hi:  # the step left the bracket: widen it leftwards, or bisect it
            if not math.isfinite(lo):
                if hi <= -_T_LARGEST:
                    return -math.inf  # beyond where t² is a double
                t = max(min(hi, -1.0) * 1e4, -_T_LARGEST)
            elif hi < 0.0 and lo < 4.0 * hi:  # orders of magnitude apart: in ln |t|
                t = -math.sqrt(lo * hi)
            else:
                t = 0.5 * (lo + hi)
        cdf = _t_lower_tail(df, t)
        if cdf == q:
            return t
        if cdf < q:
            lo = t
        else:
            hi = t
        if not cdf > 0.0:  # underflow far beyond the root: bisect
            t = math.nan
            continue
        # Newton on ln P against ln |t|: deep in the tail P falls like |t|^−df, a line there,
        # so the steps converge in a few whatever the size of the root.
        logcdf = math.log(cdf)
        step = (logcdf - logq) * math.exp(logcdf - _t_log_density(df, t) - math.log(-t))
        size = abs(step)
        if _settled(size, last) or (math.isfinite(lo) and hi - lo <= 4e-16 * abs(lo)):
            new = t * math.exp(min(step, 700.0))
            return new if lo <= new <= hi else t
        last = size
        t *= math.exp(min(step, 700.0))
    return t


def _bdtrc(k: float, n: float, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p) (k and n whole; k < 0: 1, k ≥ n: 0)."""
    if not (math.isfinite(k) and math.isfinite(n)) or math.isnan(p) or not 0.0 <= p <= 1.0 or n < 0:
        return math.nan
    k, n = math.floor(k), math.floor(n)  # as scipy.special.bdtrc truncates them
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    return _betainc(k + 1.0, n - k, p, 1.0 - p)


def _kolmogorov(y: float) -> float:
    """P(K > y) for Kolmogorov's limiting distribution: 2 Σ (−1)^(j−1) exp(−2 j² y²), and
    for y < 1 one minus the CDF's Jacobi-theta series (√(2π) / y) Σ_(j odd) exp(−j² π² / (8 y²))."""
    if math.isnan(y):
        return math.nan
    if y < 0.1:  # the CDF below is under 1e-50: the survival function is 1.0
        return 1.0
    if y < 1.0:
        w = math.pi * math.pi / (8.0 * y * y)
        cdf = 0.0
        for j in range(1, 40, 2):
            term = math.exp(-j * j * w)
            cdf += term
            if term < 1e-17 * cdf:
                break
        return 1.0 - math.sqrt(2.0 * math.pi) / y * cdf
    total, sign = 0.0, 1.0
    for j in range(1, 40):
        term = math.exp(-2.0 * j * j * y * y)
        total += sign * term
        if term < 1e-17 * total:
            break
        sign = -sign
    return min(1.0, 2.0 * total)


# --- arrays: the same methods over all elements at once ------------------------------------
# One element at a time costs tens of µs in Python (the fraction's terms, Newton's steps;
# docs/STATISTICS.md §8a), and the load comparison (analyze/load.py) asks for a quantile per
# function, thousands in a large pair.

_LGAMMA = np.frompyfunc(math.lgamma, 1, 1)


def _lbeta_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """_lbeta over arrays."""
    p, q = np.minimum(a, b), np.maximum(a, b)
    out = np.empty(p.shape)
    big, mid = p >= 10.0, (p < 10.0) & (q >= 10.0)
    small = ~(big | mid)
    if big.any():
        pb, qb = p[big], q[big]
        corr = _stirling_tail(pb) + _stirling_tail(qb) - _stirling_tail(pb + qb)
        out[big] = (-0.5 * np.log(qb) + _LN_SQRT_2PI + corr + (pb - 0.5) * np.log(pb / (pb + qb))
                    + qb * np.log1p(-pb / (pb + qb)))
    if mid.any():
        pm, qm = p[mid], q[mid]
        corr = _stirling_tail(qm) - _stirling_tail(pm + qm)
        out[mid] = (_LGAMMA(pm).astype(np.float64) + corr + pm - pm * np.log(pm + qm)
                    + (qm - 0.5) * np.log1p(-pm / (pm + qm)))
    if small.any():
        ps, qs = p[small], q[small]
        out[small] = (_LGAMMA(ps).astype(np.float64) + _LGAMMA(qs).astype(np.float64)
                      - _LGAMMA(ps + qs).astype(np.float64))
    return out


def _beta_fraction_array(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """_beta_fraction over arrays: each element's fraction stops at its own convergence."""
    out = np.empty(x.shape)
    idx = np.arange(x.size)
    a, b, x, y = a.ravel(), b.ravel(), x.ravel(), y.ravel()
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    d = np.where(x > 0.5, ((1.0 - b) + qab * y) / qap, 1.0 - qab * x / qap)
    d = 1.0 / np.where(np.abs(d) > _TINY, d, _TINY)
    c, h = np.ones(x.size), d.copy()
    for m in range(1, _MAX_TERMS):
        m2 = 2.0 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / np.where(np.abs(d) > _TINY, d, _TINY)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) > _TINY, c, _TINY)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / np.where(np.abs(d) > _TINY, d, _TINY)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) > _TINY, c, _TINY)
        step = d * c
        h *= step
        done = np.abs(step - 1.0) < _EPS
        if done.any():
            out.flat[idx[done]] = h[done]
            keep = ~done
            if not keep.any():
                return out
            idx, a, b, x, y, qab, qap, qam, c, d, h = (v[keep] for v in (idx, a, b, x, y, qab, qap, qam, c, d, h))
    out.flat[idx] = h
    return out


def _betainc_array(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """_betainc over arrays with 0 < x < 1 and y = 1 − x given."""
    swap = x >= (a + 1.0) / (a + b + 2.0)
    lx = np.where(x < 0.5, np.log(x), np.log1p(-y))
    ly = np.where(y < 0.5, np.log(y), np.log1p(-x))
    front = np.exp(a * lx + b * ly - _lbeta_array(a, b))
    aa, bb = np.where(swap, b, a), np.where(swap, a, b)
    r = front / aa * _beta_fraction_array(aa, bb, np.where(swap, y, x), np.where(swap, x, y))
    return np.where(swap, 1.0 - r, r)


def _t_lower_tail_array(df: np.ndarray, t: np.ndarray) -> np.ndarray:
    """_t_lower_tail over arrays of t < 0 whose square is a double."""
    t2 = t * t
    return 0.5 * _betainc_array(0.5 * df, np.full(df.shape, 0.5), df / (df + t2), t2 / (df + t2))


def _by_elements(scalar: Callable[..., float], where: np.ndarray, out: np.ndarray, *args: np.ndarray) -> None:
    """out[where] = scalar(*args) element by element."""
    if where.any():
        with np.errstate(all="ignore"):
            out[where] = np.frompyfunc(scalar, len(args), 1)(*(a[where] for a in args)).astype(np.float64)


def _stdtr_array(df: np.ndarray, t: np.ndarray) -> np.ndarray:
    """_stdtr over arrays (the unusual elements one by one)."""
    out = np.empty(df.shape)
    with np.errstate(all="ignore"):
        at = np.abs(t)
        common = np.isfinite(df) & (df >= _DF_MIN) & (at > 0.0) & (at < _T_LARGEST)
        if common.any():
            tail = _t_lower_tail_array(df[common], -at[common])
            out[common] = np.where(t[common] < 0.0, tail, 1.0 - tail)
    _by_elements(_stdtr, ~common, out, df, t)
    return out


def _stdtrit_array(df: np.ndarray, p: np.ndarray) -> np.ndarray:
    """_stdtrit over arrays: Newton's steps on ln P against ln |t| for all elements at once (ln P
    is concave there: each step after the first approaches the root from one side); the
    unusual elements, and any that does not converge in 100 steps, one by one."""
    shape, df, p = df.shape, df.ravel(), p.ravel()
    out = np.full(df.shape, np.nan)
    with np.errstate(all="ignore"):
        common = (np.isfinite(df) & (df >= _DF_MIN) & (df != 1.0) & (df != 2.0) & (p > 0.0) & (p < 1.0)
                  & (p != 0.5))
        alone = ~common
        if common.any():
            d, pc = df[common], p[common]
            q = np.where(pc > 0.5, 1.0 - pc, pc)
            t0 = _t_start(np.frompyfunc(_ndtri, 1, 1)(q).astype(np.float64), d)
            s = np.log(-np.minimum(t0, -1e-300))
            log_q, log_norm = np.log(q), -0.5 * np.log(d) - _lbeta_array(0.5 * d, np.full(d.shape, 0.5))
            done = np.zeros(d.shape, dtype=bool)
            last = np.full(d.shape, np.inf)
            for _ in range(100):
                live = np.flatnonzero(~done)
                if live.size == 0:
                    break
                sl = np.minimum(s[live], math.log(_T_LARGEST))
                t = -np.exp(sl)
                cdf = _t_lower_tail_array(d[live], t)
                log_cdf = np.log(cdf)
                log_density = log_norm[live] - 0.5 * (d[live] + 1.0) * np.log1p(t * t / d[live])
                step = np.clip((log_cdf - log_q[live]) * np.exp(log_cdf - log_density - sl), -50.0, 50.0)
                s[live] = sl + step
                size = np.abs(step)
                done[live] = _settled(size, last[live])
                last[live] = size
            t = -np.exp(s)
            ok = done & np.isfinite(t)
            res = np.where(pc > 0.5, -t, t)
            at = np.flatnonzero(common)
            out[at[ok]] = res[ok]
            alone[at[~ok]] = True
    _by_elements(_stdtrit, alone, out, df, p)
    return out.reshape(shape)


ndtr = _vectorized(_ndtr)
ndtri = _vectorized(_ndtri)
stdtr = _vectorized(_stdtr, _stdtr_array)
stdtrit = _vectorized(_stdtrit, _stdtrit_array)
bdtrc = _vectorized(_bdtrc)
kolmogorov = _vectorized(_kolmogorov)
