"""Comparison at a common covariate value: each run's response regressed on a covariate by
least squares, the two fits compared at one point x0 (analysis of covariance with separate
slopes, docs/STATISTICS.md "Load as a covariate").

The variance of each fitted value is the Newey–West (1987) heteroscedasticity- and
autocorrelation-consistent estimate, Bartlett weights, lag ⌊4·(n/100)^(2/9)⌋: step times
grow noisier with load, and neighbouring steps share their batch.  Several responses over
the same covariate (every function's own time per cycle) are fitted at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

MIN_POINTS = 10  # fewer observations on a side: no fit


def newey_west_lag(n: int) -> int:
    """Bartlett-kernel lag of the Newey–West estimate for n observations: ⌊4·(n/100)^(2/9)⌋."""
    return int(math.floor(4.0 * (max(n, 1) / 100.0) ** (2.0 / 9.0)))


@dataclass(frozen=True)
class LineFit:
    """Least-squares lines y = intercept + slope·x of one or several responses (rows of y)
    over one covariate, their fitted values at x0 and those values' HAC variances."""

    intercept: np.ndarray
    slope: np.ndarray
    at_x0: np.ndarray
    var_at_x0: np.ndarray
    n: int


def fit_lines(y: np.ndarray, x: np.ndarray, x0: float) -> LineFit | None:
    """Fit every row of `y` (R×n, or one response of n) on `x` (n) and evaluate at `x0`.

    A constant covariate leaves the slope unidentified: the line is then flat at the mean
    (slope 0), which is exact at x0 when x0 is that constant.  None with fewer than
    MIN_POINTS observations."""
    yy = np.atleast_2d(np.asarray(y, dtype=np.float64))
    xx = np.asarray(x, dtype=np.float64)
    n = xx.size
    if n < MIN_POINTS:
        return None
    xc = xx - xx.mean()
    sxx = float(xc @ xc)
    ybar = yy.mean(axis=1)
    slope = (yy @ xc) / sxx if sxx > 0 else np.zeros(len(yy))
    intercept = ybar - slope * xx.mean()
    resid = yy - intercept[:, None] - slope[:, None] * xx[None, :]
    # The fitted value at x0 is a linear combination Σ_t h_t·y_t of the observations:
    # h_t = 1/n + (x0 − x̄)(x_t − x̄)/Sxx.  Its HAC variance is that of Σ_t h_t·u_t.
    h = np.full(n, 1.0 / n) + ((x0 - xx.mean()) * xc / sxx if sxx > 0 else 0.0)
    z = resid * h[None, :]
    var = np.einsum("rt,rt->r", z, z)
    lag = min(newey_west_lag(n), n - 1)
    for k in range(1, lag + 1):
        var += 2.0 * (1.0 - k / (lag + 1.0)) * np.einsum("rt,rt->r", z[:, k:], z[:, :-k])
    dof = n - (2 if sxx > 0 else 1)
    var *= n / dof  # small-sample correction, as HC1
    return LineFit(intercept=intercept, slope=slope, at_x0=intercept + slope * x0,
                   var_at_x0=np.maximum(var, 0.0), n=n)


@dataclass(frozen=True)
class AdjustedDifference:
    """Abnormal minus normal at the common covariate value, with its normal-theory 95 % CI
    and two-sided p (NaN when the standard error is 0 or unknown)."""

    diff: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray


def adjusted_difference(fn: LineFit, fa: LineFit, level: float = 0.95) -> AdjustedDifference:
    """fa.at_x0 − fn.at_x0 with se = √(var_N + var_A) (independent runs)."""
    diff = fa.at_x0 - fn.at_x0
    se = np.sqrt(fn.var_at_x0 + fa.var_at_x0)
    zq = float(special.ndtri(0.5 + level / 2.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2.0 * special.ndtr(-np.abs(diff) / se), np.nan)
    lo = np.where(se > 0, diff - zq * se, np.nan)
    hi = np.where(se > 0, diff + zq * se, np.nan)
    return AdjustedDifference(diff=diff, lo=lo, hi=hi, p=p)
