"""Dependence-robust two-sample tests over series in time order (docs/STATISTICS.md,
"Dependent cycles").

A run's cycles are not independent draws when the work comes in bursts (prefill steps of a
server), drifts (batch size) or is sampled on ticks longer than a cycle (host states): the
variance of a mean over n cycles is then the series' long-run variance over n, not its
variance over n, and the tests that assume independence reject too often.

Whether a series depends on its past: the Bartlett-kernel (Newey & West 1987) long-run
variance LRV = γ_0 + 2 Σ_{k=1..L} (1 − k/(L+1)) γ_k (autocovariances with divisor n), L
from Andrews' (1991) AR(1) plug-in rule for the Bartlett kernel, L = ⌊1.1447 (α̂ n)^{1/3}⌋,
α̂ = 4ρ̂² / ((1 − ρ̂)² (1 + ρ̂)²), ρ̂ the lag-1 autocorrelation (clipped to ±RHO_MAX); the
variance inflation VIF = LRV / γ_0, at least 1.  The series is dependent when VIF ≥ VIF_MIN.

How much its mean varies, when it is: batch means (Schmeiser 1982; a fixed-b estimate in
the sense of Kiefer & Vogelsang 2005) — the series cut into B contiguous batches (B =
BATCHES, fewer down to MIN_BATCHES where the Bartlett lag is longer than a batch), the
variance of the batch means over B, referred to Student's t with B − 1 degrees of freedom;
as lugsail batch means (Vats & Flegal 2022: 2·BM_b − BM_{b/3}, at least BM_b), since batches
no longer than the dependence are dependent themselves and plain batch means biased low.
The Bartlett estimate at a data-chosen lag is biased low under bursts (an AR(1) plus noise:
the plug-in ρ̂ is the noise-diluted one), batch means much less so.  Under no change both
runs are one process with one dependence: each run's inflation (batch-means variance over
s²/n, at least 1) is estimated — the abnormal run's less its one largest shift of level
(`without_step`: a change that set in partway is the effect, not dependence) — and the larger
multiplies both runs' s²/n; the effective number of cycles is n_eff = n / that inflation.

- Means: Welch's statistic with those variances, Satterthwaite's degrees of freedom.
- Ranks: the Mann–Whitney statistic θ̂ = U / (m·k) is the mean of the abnormal run's
  *placements* P_i = F̂_N(a_i) (mid-ties) and, to first order (Hájek projection), the
  difference of the means of P and of the normal run's placements Q_j = F̂_A(n_j): its
  variance is Var(P̄) + Var(Q̄), Brunner & Munzel's (2000) variance with each run's variance
  of its mean placement estimated as above, as for the two-sample U-statistics of dependent
  data of Dehling & Fried (2012).  (θ̂ − ½) / se is referred to Student's t.  Where the runs
  separate completely the placements do not vary and that variance is 0: the means' robust p
  stands in (an exact U-test p of a few effectively independent values is no evidence).
- Paired differences d_i: the paired t and the signed-rank sum Σ s_i (s_i =
  sign(d_i)·rank|d_i|), each with the variance of its mean as above; the dependence is
  judged on the signs of d (independent fair coins when nothing changed), so that a change
  growing along the run is not taken for dependence.

Per row: with fewer than MIN_CYCLES cycles on a side the dependence is not estimated
(SKIPPED: today's tests, flagged); where no series of the row reaches VIF_MIN (NONE:
today's tests); else CORRECTED, and the robust p replaces today's where it is larger.
"""
from __future__ import annotations

import math
from enum import Enum

import numpy as np
from perfdiff.stats import special

MIN_CYCLES = 20  # fewer cycles on a side: the long-run variance is not estimated
VIF_MIN = 1.25  # variance inflation below this on both sides: no material dependence
RHO_MAX = 0.97  # the AR(1) plug-in's ρ̂ is clipped to ±this (a bandwidth of at most ~n/2 anyway)
BATCHES = 10  # batch means: each run cut into this many contiguous batches …
MIN_BATCHES = 5  # … or as few as this where the dependence lasts longer than n / BATCHES
NEFF_SHOWN = 0.8  # the report shows n_eff beside n where n_eff < this share of n


class Dependence(str, Enum):
    """How a test dealt with dependent cycles; stable across releases."""

    NOT_ASSESSED = "not-assessed"  # values in no time order (or not a per-cycle test)
    NONE = "none"  # no material dependence: the test for independent samples
    CORRECTED = "corrected"  # dependent: HAC variances (p never below the independent test's)
    SKIPPED = "skipped-few-cycles"  # too few cycles to estimate the dependence: uncorrected

    def __str__(self) -> str:
        return self.value


def andrews_lag(rho: np.ndarray, n: int) -> np.ndarray:
    """Bartlett lag per series from its lag-1 autocorrelation `rho` (Andrews 1991, AR(1)
    plug-in), at most n // 2."""
    r = np.clip(np.where(np.isfinite(rho), rho, 0.0), -RHO_MAX, RHO_MAX)
    alpha = 4.0 * r * r / ((1.0 - r) ** 2 * (1.0 + r) ** 2)
    lag = np.floor(1.1447 * (alpha * n) ** (1.0 / 3.0))
    return np.minimum(lag, n // 2).astype(np.int64)


DIRECT_MAX_LAG = 32  # up to this lag the autocovariances are dot products; beyond, one FFT


def long_run_variance(x: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(γ_0, Bartlett long-run variance, lag) of each row of `x` (rows × n, in time order,
    finite), both with divisor n (Newey–West).  The autocovariances up to the lag by dot
    products (O(n·L)), or by FFT for every lag at once where a lag is long."""
    xx = np.atleast_2d(np.asarray(x, dtype=np.float64))
    rows, n = xx.shape
    if n < 2:
        z = np.zeros(rows)
        return z, z.copy(), np.zeros(rows, np.int64)
    c = xx - xx.mean(axis=1, keepdims=True)
    g0 = np.einsum("rt,rt->r", c, c) / n
    g1 = np.einsum("rt,rt->r", c[:, 1:], c[:, :-1]) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(g0 > 0, g1 / np.where(g0 > 0, g0, 1.0), 0.0)
    lag = andrews_lag(rho, n)
    top = int(lag.max())
    if top <= DIRECT_MAX_LAG:
        acov = np.zeros((rows, top + 1))
        for k in range(1, top + 1):
            acov[:, k] = np.einsum("rt,rt->r", c[:, k:], c[:, :-k]) / n
    else:
        size = 1 << int(math.ceil(math.log2(2 * n)))
        f = np.fft.rfft(c, n=size, axis=1)
        acov = np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :top + 1] / n
    k = np.arange(top + 1)[None, :]
    w = np.where((k >= 1) & (k <= lag[:, None]), 1.0 - k / (lag[:, None] + 1.0), 0.0)
    lrv = g0 + 2.0 * np.einsum("rk,rk->r", w, acov)
    return g0, np.maximum(lrv, 0.0), lag


def inflation(g0: np.ndarray, lrv: np.ndarray) -> np.ndarray:
    """Variance inflation LRV / γ_0, at least 1 (1 where the series is constant)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(g0 > 0, np.maximum(lrv / np.where(g0 > 0, g0, 1.0), 1.0), 1.0)


def _t_p(stat: float, se2: float, parts: tuple[tuple[float, float], ...]) -> float:
    """Two-sided p of stat / √se2 against Student's t with Satterthwaite's degrees of freedom
    over (variance, n_eff) parts; NaN when se2 is 0."""
    if not se2 > 0:
        return math.nan
    den = sum(v * v / max(ne - 1.0, 1.0) for v, ne in parts)
    df = se2 * se2 / den if den > 0 else 1e6
    return float(min(1.0, 2.0 * special.stdtr(max(df, 1.0), -abs(stat) / math.sqrt(se2))))


def placements(av: np.ndarray, nv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q): each abnormal value's share of normal values below it (ties half) and each
    normal value's share of abnormal values below it, in the samples' own order.  Sorted
    queries into sorted values (then put back in order): searching a sorted array for values
    in time order jumps about in memory, ten times slower at 10⁵ cycles."""
    oa, on = np.argsort(av, kind="stable"), np.argsort(nv, kind="stable")
    sa, sn = av[oa], nv[on]
    p, q = np.empty(len(av)), np.empty(len(nv))
    p[oa] = (np.searchsorted(sn, sa, "left") + np.searchsorted(sn, sa, "right")) / (2.0 * len(sn))
    q[on] = (np.searchsorted(sa, sn, "left") + np.searchsorted(sa, sn, "right")) / (2.0 * len(sa))
    return p, q


def batch_variance(x: np.ndarray, batches: int = BATCHES) -> np.ndarray:
    """Each row's variance of its mean by batch means: the row cut into `batches` contiguous
    batches of equal size (the first n mod batches values left out), the variance of the
    batch means over `batches` (Schmeiser 1982)."""
    xx = np.atleast_2d(x)
    size = xx.shape[1] // batches
    means = xx[:, xx.shape[1] - size * batches:].reshape(xx.shape[0], batches, size).mean(axis=2)
    return np.var(means, axis=1, ddof=1) / batches


def without_step(x: np.ndarray) -> np.ndarray:
    """Each row of `x` less its one largest shift of level: split at the CUSUM's extreme
    (the k maximising |Σ_{t<k} (x_t − x̄)|, Page 1954), each part centred on its own mean.
    A change that set in partway through the abnormal run is the effect, not dependence."""
    n = x.shape[1]
    c = x - x.mean(axis=1, keepdims=True)
    k = np.argmax(np.abs(np.cumsum(c, axis=1)[:, :-1]), axis=1) + 1
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        j = int(k[i])
        out[i, :j], out[i, j:] = x[i, :j] - x[i, :j].mean(), x[i, j:] - x[i, j:].mean()
    return out if n >= 2 else c


LUGSAIL_R = 3  # lugsail batch means: batches LUGSAIL_R times shorter …
LUGSAIL_C = 0.5  # … weighted −c/(1 − c) against the batches' 1/(1 − c)


def _lugsail(x: np.ndarray, batches: int) -> float:
    """The variance of the mean of x by lugsail batch means (Vats & Flegal 2022): (BM_b − c·BM_{b/r})
    / (1 − c), BM_b the batch-means estimate with `batches` batches and BM_{b/r} with r times as
    many (shorter) ones; at least BM_b.  Batches of a series whose dependence lasts about as long
    as a batch are themselves dependent, and BM_b is biased low; the shorter batches' estimate is
    biased lower by about r times as much, and the combination cancels most of that bias."""
    big = float(batch_variance(x, batches)[0])
    short = batches * LUGSAIL_R
    if x.size < 2 * short:
        return big
    return max(big, (big - LUGSAIL_C * float(batch_variance(x, short)[0])) / (1.0 - LUGSAIL_C))


def _batch_inflation(x: np.ndarray, lag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(batch inflation, its degrees of freedom) of each row of `x` (one run's series, its
    Bartlett `lag`): the batch-means variance of the mean over the independent one s²/n, at
    least 1 (1: n − 1 degrees of freedom; else B − 1).  B is BATCHES, fewer (down to
    MIN_BATCHES) where the lag is longer than n / BATCHES: a batch must outlast the dependence."""
    n = x.shape[1]
    iid = np.var(x, axis=1, ddof=1) / n
    b = np.clip(n // np.maximum(lag, 1), MIN_BATCHES, BATCHES)
    bm = np.array([_lugsail(x[i], int(b[i])) for i in range(x.shape[0])])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(iid > 0, bm / np.where(iid > 0, iid, 1.0), 1.0)
    return np.maximum(ratio, 1.0), np.where(ratio > 1.0, b - 1.0, n - 1.0)


def _vif(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Bartlett VIF, lag) of each row of `x`."""
    g0, lrv, lag = long_run_variance(x)
    return inflation(g0, lrv), lag


class MeanVariances:
    """The variance of the mean of each row of two runs' series (abnormal `xa`, rows × m, and
    normal `xn`, rows × k, finite, in time order; at least MIN_CYCLES a side) as the rules
    above judge them: `status` NONE (no row reaches VIF_MIN on either side: s²/n, n − 1
    degrees of freedom) or CORRECTED (each run's batch-means inflation, the abnormal run's
    less its largest shift of level, the larger of the two for both runs: s²/n times it,
    B − 1 degrees of freedom); `var_a`, `var_n`, `df_a`, `df_n` per row; the effective cycles
    of each run per row (`n_eff_rows_a`, `n_eff_rows_n`: n over its inflation, or over its
    Bartlett VIF when NONE) and from the first row (`n_eff_a`, `n_eff_n`).

    A row may be any series whose mean is a statistic: the values, their placements, or a
    stratified mean's weighted deviations (perfdiff.stats.stratified)."""

    __slots__ = ("status", "var_a", "var_n", "df_a", "df_n", "n_eff_rows_a", "n_eff_rows_n")

    def __init__(self, xa: np.ndarray, xn: np.ndarray):
        m, k = xa.shape[1], xn.shape[1]
        xs = without_step(xa)
        (vif_a, lag_a), (vif_n, lag_n) = _vif(xs), _vif(xn)
        if max(vif_a.max(), vif_n.max()) < VIF_MIN:
            self.status = Dependence.NONE
            self.var_a, self.var_n = np.var(xa, axis=1, ddof=1) / m, np.var(xn, axis=1, ddof=1) / k
            self.df_a, self.df_n = np.full(len(xa), m - 1.0), np.full(len(xn), k - 1.0)
            self.n_eff_rows_a, self.n_eff_rows_n = m / vif_a, k / vif_n
            return
        (ratio_a, dfa), (ratio_n, dfn) = _batch_inflation(xs, lag_a), _batch_inflation(xn, lag_n)
        # One dependence for both runs (one process under no change): the larger inflation.
        ratio = np.maximum(ratio_a, ratio_n)
        self.df_a = self.df_n = np.where(ratio_a >= ratio_n, dfa, dfn)
        self.var_a = np.var(xa, axis=1, ddof=1) / m * ratio
        self.var_n = np.var(xn, axis=1, ddof=1) / k * ratio
        self.status = Dependence.CORRECTED
        self.n_eff_rows_a, self.n_eff_rows_n = m / ratio, k / ratio

    @property
    def n_eff_a(self) -> float:
        return float(self.n_eff_rows_a[0])

    @property
    def n_eff_n(self) -> float:
        return float(self.n_eff_rows_n[0])

    def t_p(self, row: int, stat: float) -> float:
        """Two-sided p of `stat` (a difference of the runs' means of row `row`) against
        Student's t with Satterthwaite's degrees of freedom (NaN when its variance is 0)."""
        va, vn = float(self.var_a[row]), float(self.var_n[row])
        return _t_p(stat, va + vn, ((va, float(self.df_a[row]) + 1.0), (vn, float(self.df_n[row]) + 1.0)))


class TwoSampleDependence:
    """The robust two-sample p values of one row (abnormal `av`, normal `nv`, finite, in time
    order) and the dependence assessment: `status`, the effective cycles of each run (from the
    rank test's placements, the test q reads: n · (s²/n) / the variance used), `p_welch` and
    `p_rank` (NaN when not computed).

    Under no change both runs are one process with one dependence: each run's inflation of
    the variance of a mean (batch means over s²/n) is estimated, the larger applies to both.
    The abnormal run's series is taken less its one largest shift of level (`without_step`):
    a throttle, another process or a slower kernel that set in partway through the run makes
    its series one long step, which is the effect, not dependence (MeanVariances).
    """

    __slots__ = ("status", "n_eff_a", "n_eff_n", "p_welch", "p_rank")

    def __init__(self, av: np.ndarray, nv: np.ndarray):
        m, k = len(av), len(nv)
        self.p_welch = self.p_rank = math.nan
        self.n_eff_a = self.n_eff_n = math.nan
        if min(m, k) < MIN_CYCLES:
            self.status = Dependence.SKIPPED
            return
        p, q = placements(av, nv)
        mv = MeanVariances(np.vstack([p, av]), np.vstack([q, nv]))
        self.status, self.n_eff_a, self.n_eff_n = mv.status, mv.n_eff_a, mv.n_eff_n
        if mv.status is Dependence.CORRECTED:
            self.p_rank = mv.t_p(0, float(p.mean()) - 0.5)
            self.p_welch = mv.t_p(1, float(av.mean() - nv.mean()))
            if math.isnan(self.p_rank):  # the runs separate completely: no spread of placements to test by
                self.p_rank = self.p_welch
                self.n_eff_a, self.n_eff_n = float(mv.n_eff_rows_a[1]), float(mv.n_eff_rows_n[1])


class PairedDependence:
    """The robust p values of paired differences `d` (finite, in time order): the paired t and
    the signed-rank sum Σ s_i (s_i = sign(d_i)·rank|d_i|), each with the variance of its mean
    as for two samples (the larger of s²/K and the batch-means variance)."""

    __slots__ = ("status", "n_eff", "p_t", "p_rank")

    def __init__(self, d: np.ndarray, signed_ranks: np.ndarray):
        k = len(d)
        self.p_t = self.p_rank = self.n_eff = math.nan
        if k < MIN_CYCLES:
            self.status = Dependence.SKIPPED
            return
        x = np.vstack([signed_ranks, d])
        # Whether the differences depend on each other is judged on their signs, which under
        # no change are independent fair coins: a change that grows along the run (a trend of
        # the differences, all of one sign) is the effect, not dependence.
        g0, lrv, _ = long_run_variance(np.sign(d))
        if inflation(g0, lrv)[0] < VIF_MIN:
            self.status = Dependence.NONE
            self.n_eff = float(k)
            return
        self.status = Dependence.CORRECTED
        ratio, df = _batch_inflation(x, _vif(x)[1])
        var = np.var(x, axis=1, ddof=1) / k * ratio
        self.n_eff = k / float(ratio[0])
        self.p_rank = _t_p(float(signed_ranks.mean()), float(var[0]), ((float(var[0]), float(df[0]) + 1.0),))
        self.p_t = _t_p(float(d.mean()), float(var[1]), ((float(var[1]), float(df[1]) + 1.0),))


def robust(p_today: float, p_robust: float) -> float:
    """The reported p of a corrected test: the robust one, never below today's (NaN stays NaN)."""
    if not math.isfinite(p_today):
        return p_today
    return max(p_today, p_robust) if math.isfinite(p_robust) else p_today
