"""Comparison at a common covariate value (docs/STATISTICS.md "Load as a covariate").

Within each stratum s of the covariate, a run's response is fitted by least squares on the
covariate, y = a_s + b_s·x (analysis of covariance with separate slopes), and evaluated at the
stratum's x0_s; the strata are combined with fixed weights w_s into one standardised value
Σ_s w_s·(a_s + b_s·x0_s).  That value is a linear combination Σ_t h_t·y_t of the run's
observations, and its variance is the Newey–West (1987) heteroscedasticity- and
autocorrelation-consistent estimate of Var(Σ_t h_t·u_t) over the run in time order (Bartlett
weights, lag ⌊4·(n/100)^(2/9)⌋): step times grow noisier with load, and neighbouring steps
share their batch.  Several responses over the same covariate (every function's own time per
cycle) are fitted at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from perfdiff.stats import special

MIN_POINTS = 10  # fewer observations in a stratum: no fit


def newey_west_lag(n: int) -> int:
    """Bartlett-kernel lag of the Newey–West estimate for n observations: ⌊4·(n/100)^(2/9)⌋."""
    return int(math.floor(4.0 * (max(n, 1) / 100.0) ** (2.0 / 9.0)))


@dataclass(frozen=True)
class StrataFit:
    """One run's standardised fitted value per response and its HAC variance; the slope of
    each response in each stratum (responses × strata, unit of y per unit of x)."""

    at: np.ndarray
    var: np.ndarray
    slope: np.ndarray
    n: int
    df: np.ndarray  # degrees of freedom of `var`, per response


def fit_strata(y: object, x: object, stratum: object, x0: object, weights: object | None = None) -> StrataFit | None:
    """Fit every row of `y` (responses × n, or one response of n; observations in time order)
    on `x` within each stratum (`stratum[t]` in 0..S−1; −1 leaves observation t out) and
    return Σ_s w_s·fit_s(x0_s) with its variance.  `weights` (default equal) are normalised.

    A stratum whose covariate is constant has no slope: its line is flat at its mean, exact
    when x0_s is that constant.  None when a stratum holds fewer than MIN_POINTS observations."""
    yy = np.atleast_2d(np.asarray(y, dtype=np.float64))
    xx = np.asarray(x, dtype=np.float64)
    st = np.asarray(stratum, dtype=np.int64)
    x0s = np.atleast_1d(np.asarray(x0, dtype=np.float64))
    S = len(x0s)
    w = np.full(S, 1.0 / S) if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
    keep = st >= 0
    if not keep.all():
        yy, xx, st = yy[:, keep], xx[keep], st[keep]
    n = xx.size
    counts = np.bincount(st, minlength=S).astype(np.float64)
    if n == 0 or counts.min() < MIN_POINTS:
        return None
    onehot = np.zeros((n, S))
    onehot[np.arange(n), st] = 1.0
    xbar = (xx @ onehot) / counts
    xc = xx - xbar[st]
    sxx = (xc * xc) @ onehot
    has_slope = sxx > 0
    inv_sxx = np.where(has_slope, 1.0 / np.where(has_slope, sxx, 1.0), 0.0)
    ybar = (yy @ onehot) / counts
    slope = ((yy * xc) @ onehot) * inv_sxx
    at = (ybar + slope * (x0s - xbar)) @ w
    resid = yy - ybar[:, st] - slope[:, st] * xc
    # The standardised value is Σ_t h_t·y_t with h_t = w_s·(1/n_s + (x0_s − x̄_s)(x_t − x̄_s)/Sxx_s).
    h = w[st] * (1.0 / counts[st] + (x0s - xbar)[st] * xc * inv_sxx[st])
    z = resid * h[None, :]
    var = np.einsum("rt,rt->r", z, z)
    lag = min(newey_west_lag(n), n - 1)
    for k in range(1, lag + 1):
        var += 2.0 * (1.0 - k / (lag + 1.0)) * np.einsum("rt,rt->r", z[:, k:], z[:, :-k])
    params = S + int(has_slope.sum())
    var *= n / max(n - params, 1)  # small-sample correction, as HC1
    # Degrees of freedom of that variance (Satterthwaite), with each stratum's residual
    # variance pooled: the few cycles of a heavily weighted stratum leave few.
    s2 = ((resid * resid) @ onehot) / np.maximum(counts - 1 - has_slope, 1)
    c = (h * h)[None, :] * s2[:, st]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(c.sum(axis=1) > 0, c.sum(axis=1) ** 2 / np.einsum("rt,rt->r", c, c) - params, np.inf)
    return StrataFit(at=at, var=np.maximum(var, 0.0), slope=slope, n=n, df=np.maximum(df, 1.0))


@dataclass(frozen=True)
class AdjustedDifference:
    """Abnormal minus normal standardised values, with the normal-theory CI and two-sided p
    (NaN when the standard error is 0)."""

    at_n: np.ndarray
    at_a: np.ndarray
    diff: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray


def adjusted_difference(fn: StrataFit, fa: StrataFit, level: float = 0.95) -> AdjustedDifference:
    """fa.at − fn.at with se = √(var_N + var_A) (independent runs), referred to Student's t
    with the Welch–Satterthwaite degrees of freedom of the two variances."""
    diff = fa.at - fn.at
    se = np.sqrt(fn.var + fa.var)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.maximum((fn.var + fa.var) ** 2 / (fn.var ** 2 / fn.df + fa.var ** 2 / fa.df), 1.0)
        df = np.where(np.isfinite(df), df, 1e6)
        tq = special.stdtrit(df, 0.5 + level / 2.0)
        p = np.where(se > 0, 2.0 * special.stdtr(df, -np.abs(diff) / se), np.nan)
    lo = np.where(se > 0, diff - tq * se, np.nan)
    hi = np.where(se > 0, diff + tq * se, np.nan)
    return AdjustedDifference(at_n=fn.at, at_a=fa.at, diff=diff, lo=lo, hi=hi, p=p)
