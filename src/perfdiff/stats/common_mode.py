"""Common-mode shift: every busy function of a device scaled by about the same ratio.

docs/STATISTICS.md, "Common-mode shift".  Inputs are per-function mean shares β̄ in
percentage points; the ratio r = β̄_A/β̄_N is dimensionless.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# β̄_N threshold (pp), IQR(ln r) limit, |median ln r| limit.
COMMON_MIN_BETA = 0.05
COMMON_MAX_IQR = 0.2
COMMON_MIN_SHIFT = math.log(1.25)


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
    """The common-mode check (docs/STATISTICS.md) on one device: r_f = β̄_A/β̄_N where β̄_N ≥ min_beta (pp).

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

