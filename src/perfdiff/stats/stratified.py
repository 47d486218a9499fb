"""Two runs compared kind with kind: a stratified difference of means and a stratified rank
test over strata (step classes) that both runs hold, with the dependence-robust variances of
perfdiff.stats.dependence (docs/STATISTICS.md, "Step classes").

Cycle t of a run is in stratum k(t); w_k is stratum k's share of both runs' cycles together
(fixed, so the mix of strata is held at the pooled one: direct standardisation).  Per row:

- Means: D = Σ_k w_k (ā_k − n̄_k), the stratified mean difference (Cochran 1977, §5A).
- Ranks: θ = Σ_k w_k θ_k, θ_k the Mann–Whitney share of stratum k (abnormal values above the
  stratum's normal values, ties half): a stratified Wilcoxon–Mann–Whitney statistic (van
  Elteren 1960) with the strata weighted by their shares, tested as θ − ½.  Where every
  stratum separates the runs completely the placements do not vary and this variance is 0:
  the p is then the means' test's.

Each is a linear statistic of each run's series: Σ_k w_k ȳ_k = (1/n) Σ_t z_t with
z_t = n · w_k(t) / n_k(t) · y_t, and its variance is Var(z̄).  So each run's series of
weighted deviations z_t = n · w_k(t) / n_k(t) · (y_t − ȳ_k(t)) (each stratum's part scaled by
√(n_k/(n_k − 1)) for the mean it lost), in time order (for the ranks: the placements of the
Hájek projection, as for one stratum), goes through the same rules as one stratum does
(`MeanVariances`): s²/n — then Σ_k w_k² s_k²/n_k — where no material dependence is found, else
the batch-means inflation, one for both runs.  The strata follow each other in time (a burst of
prefill steps, then decode steps), and the series in time order keeps that dependence.  The
degrees of freedom are the fewer of the runs' (n − 1, or the batches') and Satterthwaite's over
the strata (few where a small stratum carries much of the variance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.dependence import MIN_CYCLES, Dependence, MeanVariances, placements

MIN_STRATUM = 2  # cycles of each run a stratum needs (its mean and spread; the dependence is the run's)


@dataclass(frozen=True)
class Stratified:
    """One row compared kind with kind: the standardised means of both runs (Σ_k w_k ȳ_k), the
    stratified difference D with its 95 % CI and p, the stratified rank statistic θ and its p,
    each stratum's means (normal, abnormal), how the dependence was dealt with and each run's
    effective cycles (NaN: not estimated)."""

    mean_n: float
    mean_a: float
    diff: float
    lo: float
    hi: float
    p_mean: float
    theta: float
    p_rank: float
    means_n: tuple[float, ...]
    means_a: tuple[float, ...]
    dependence: Dependence
    n_eff_n: float
    n_eff_a: float


def _weighted_deviations(x: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each stratum's mean of x, the series n · w_k / n_k · (x_t − x̄_k) in time order, each
    stratum's part times √((n_k/(n_k − 1)) · ((n − 1)/n)): each stratum's mean costs a degree of
    freedom, so that s²(z)/n is Σ_k w_k² s_k²/n_k, the unbiased variance, not less)."""
    n = len(x)
    counts = np.bincount(labels, minlength=len(weights)).astype(np.float64)
    means = np.bincount(labels, weights=x, minlength=len(weights)) / counts
    scale = n * weights / counts * np.sqrt(counts / (counts - 1.0) * (n - 1.0) / n)
    return means, scale[labels] * (x - means[labels])


def _strata_df(xa: np.ndarray, xn: np.ndarray, labels_a: np.ndarray, labels_n: np.ndarray,
               weights: np.ndarray) -> float:
    """Satterthwaite's (1946) degrees of freedom of Σ_k w_k² (s²_{A,k}/n_{A,k} + s²_{N,k}/n_{N,k}):
    few where a small stratum carries much of the variance."""
    num = den = 0.0
    for x, labels in ((xa, labels_a), (xn, labels_n)):
        for k, w in enumerate(weights):
            v = x[labels == k]
            part = w * w * float(np.var(v, ddof=1)) / v.size
            num += part
            den += part * part / (v.size - 1)
    return num * num / den if den > 0 else math.inf


def _test(stat: float, mv: MeanVariances, row: int, df_strata: float, level: float) -> tuple[float, float]:
    """(two-sided p, half-width of the `level` CI) of stat (a difference of the runs' means of
    row `row`): Student's t with the fewer of the runs' Satterthwaite degrees of freedom and the
    strata's.  p is 1 (half-width 0) where both runs are constant within every stratum and stat
    is 0, NaN where they are constant and stat is not."""
    va, vn = float(mv.var_a[row]), float(mv.var_n[row])
    se2 = va + vn
    if not se2 > 0:
        return (1.0, 0.0) if stat == 0 else (math.nan, math.nan)
    den = va * va / max(float(mv.df_a[row]), 1.0) + vn * vn / max(float(mv.df_n[row]), 1.0)
    df = max(min(se2 * se2 / den if den > 0 else math.inf, df_strata, 1e6), 1.0)
    se = math.sqrt(se2)
    return (float(min(1.0, 2.0 * special.stdtr(df, -abs(stat) / se))),
            float(special.stdtrit(df, 0.5 + level / 2.0)) * se)


def stratified(a: np.ndarray, n: np.ndarray, labels_a: np.ndarray, labels_n: np.ndarray,
               weights: np.ndarray, level: float = 0.95) -> Stratified:
    """Row `a` (abnormal, in time order) against row `n` (normal) within the strata `labels_a`,
    `labels_n` (0..S−1, each stratum holding at least MIN_STRATUM cycles of each run, each run
    at least MIN_CYCLES), weighted by `weights` (summing to 1)."""
    S = len(weights)
    if min(np.bincount(labels_a, minlength=S).min(), np.bincount(labels_n, minlength=S).min()) < MIN_STRATUM:
        raise ValueError(f"a stratum holds fewer than {MIN_STRATUM} cycles of a run")
    if min(len(a), len(n)) < MIN_CYCLES:
        raise ValueError(f"a run holds fewer than {MIN_CYCLES} cycles: their dependence cannot be estimated")
    pa, qn = np.empty(len(a)), np.empty(len(n))
    for k in range(S):
        ia, i_n = labels_a == k, labels_n == k
        pa[ia], qn[i_n] = placements(a[ia], n[i_n])
    mean_pa, dev_pa = _weighted_deviations(pa, labels_a, weights)
    _, dev_qn = _weighted_deviations(qn, labels_n, weights)
    means_a, dev_a = _weighted_deviations(a, labels_a, weights)
    means_n, dev_n = _weighted_deviations(n, labels_n, weights)
    mv = MeanVariances(np.vstack([dev_pa, dev_a]), np.vstack([dev_qn, dev_n]))
    theta = float(weights @ mean_pa)
    diff = float(weights @ (means_a - means_n))
    p_rank, _ = _test(theta - 0.5, mv, 0, _strata_df(pa, qn, labels_a, labels_n, weights), level)
    p_mean, half = _test(diff, mv, 1, _strata_df(a, n, labels_a, labels_n, weights), level)
    row = 0
    if math.isnan(p_rank):  # every stratum separates the runs completely: no spread of ranks to test by
        p_rank, row = p_mean, 1
    return Stratified(mean_n=float(weights @ means_n), mean_a=float(weights @ means_a), diff=diff, lo=diff - half,
                      hi=diff + half, p_mean=p_mean, theta=theta, p_rank=p_rank,
                      means_n=tuple(float(x) for x in means_n), means_a=tuple(float(x) for x in means_a),
                      dependence=mv.status, n_eff_n=float(mv.n_eff_rows_n[row]),
                      n_eff_a=float(mv.n_eff_rows_a[row]))
