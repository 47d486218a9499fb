"""Tests of matched cycles: cycle i of one run and cycle i of the other do the same work
(docs/STATISTICS.md, "Matched cycles").

When work replays cycle for cycle (a deterministic loop, a triangular solver, the same
request trace), each run's per-cycle values are spread wide by the work itself, and the
independent tests see that spread as noise.  Testing the differences d_i = a_i − n_i
removes it: the Wilcoxon signed-rank test (Wilcoxon 1945), the paired t test, and the
one-sample Hodges–Lehmann estimate (the median of the Walsh averages (d_i + d_j) / 2,
i ≤ j) with its order-statistic confidence interval.
"""
from __future__ import annotations

import math

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.dependence import Dependence, PairedDependence, robust
from perfdiff.stats.effects import _z_from
from perfdiff.stats.twosample import TwoSample

MATCH_MIN_CYCLES = 10  # fewer cycles: no matching (a rank correlation means little)
MATCH_MIN_RHO = 0.5  # Spearman ρ of the per-cycle times above which cycles are matched
MATCH_MAX_P = 1e-3  # and the correlation must be this unlikely by chance
WALSH_MAX_PAIRS = 500_000  # Walsh averages computed exactly up to this many; beyond, of a thinned set


def cycles_match(x_n: np.ndarray, x_a: np.ndarray) -> tuple[bool, float]:
    """(matched, Spearman ρ): whether cycle i of both runs does the same work, judged by the
    rank correlation of their per-cycle values (cycle durations).  Needs equal counts."""
    if len(x_n) != len(x_a) or len(x_n) < MATCH_MIN_CYCLES:
        return False, math.nan
    # Mostly equal values (fixed windows: all one length but the last) rank as ties, and a
    # correlation of ties says nothing about the work.
    if min(len(np.unique(x_n)), len(np.unique(x_a))) < len(x_n) / 2:
        return False, math.nan
    rho = float(np.corrcoef(average_ranks(x_n), average_ranks(x_a))[0, 1])
    if not math.isfinite(rho):
        return False, math.nan
    # p of ρ through Student's t with K − 2 degrees of freedom (as scipy.stats.spearmanr).
    k = len(x_n)
    t = rho * math.sqrt((k - 2) / max(1e-300, 1.0 - rho * rho))
    p = float(2.0 * special.stdtr(k - 2, -abs(t)))
    return bool(rho >= MATCH_MIN_RHO and p <= MATCH_MAX_P), rho


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of `x`, ties given their average rank (scipy.stats.rankdata's "average")."""
    return _ranks_and_ties(np.asarray(x, dtype=np.float64))[0]


def _ranks_and_ties(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(average ranks of `x`, the size of each group of equal values), from one sort."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]  # each tie group is [start, end)
    avg = (starts + ends + 1) / 2.0  # mean of the ranks start+1 … end
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks, ends - starts


def _walsh_averages(d: np.ndarray) -> tuple[np.ndarray, int]:
    """The Walsh averages (d_i + d_j) / 2, i ≤ j (unsorted), and the number of differences
    they come from: of evenly spaced quantiles of the differences when all of them would
    make more than WALSH_MAX_PAIRS (the estimate then approximates the exact one)."""
    s = np.sort(d)
    k = len(s)
    if k * (k + 1) // 2 > WALSH_MAX_PAIRS:
        k = int((math.sqrt(8 * WALSH_MAX_PAIRS + 1) - 1) / 2)
        s = s[np.linspace(0, len(s) - 1, k).astype(np.int64)]
    i, j = np.triu_indices(k)
    return (s[i] + s[j]) / 2.0, k


def compare_paired(a: object, n: object, floor: float, *, alpha: float | None = None,
                   level: float = 0.95, time_ordered: bool = False) -> TwoSample:
    """The statistics of one row over matched cycles, in a TwoSample: `p_mwu` holds the
    Wilcoxon signed-rank p (`mwu_method` "signed-rank"), `p_welch` the paired t test's,
    `hl` the one-sample HL shift of the differences with its CI, `z` that shift over the
    normal run's robust scale (as for independent samples), `cliffs_delta` the matched-pairs
    dominance (#(a_i > n_i) − #(a_i < n_i)) / K.  Pairs with a non-finite side are dropped.
    `time_ordered`: the pairs are in time order (cycles): the p values hold under dependence
    between neighbouring differences (perfdiff.stats.dependence)."""
    av = np.asarray(a, dtype=np.float64)
    nv = np.asarray(n, dtype=np.float64)
    if av.shape != nv.shape:
        raise ValueError("paired samples need the same length")
    ok = np.isfinite(av) & np.isfinite(nv)
    dropped = int((~ok).sum())
    av, nv = av[ok], nv[ok]
    d = av - nv
    k = len(d)
    reasons: list[str] = []
    if dropped:
        reasons.append(f"dropped: {dropped} pairs with a non-finite side")
    hl = hl_lo = hl_hi = delta = p_w = p_s = math.nan
    method = "signed-rank"
    if k == 0:
        reasons.append("hl, cliffs_delta, p_mwu: no pairs")
    else:
        delta = float((np.count_nonzero(d > 0) - np.count_nonzero(d < 0)) / k)
        walsh, _ = _walsh_averages(d)
        m = len(walsh)
        # The CI's ranks among all K(K+1)/2 Walsh averages; over a thinned set, the same
        # quantiles of it.
        m_all = k * (k + 1) // 2
        r = _signed_rank_ci_rank(k, level)
        lo_i = min(m - 1, max(0, int(round((r - 1) / max(m_all - 1, 1) * (m - 1))))) if r >= 1 else 0
        hi_i = m - 1 - lo_i
        # Order statistics by partition (linear time): the median and the CI's two ranks.
        ranks = sorted({(m - 1) // 2, m // 2} | ({lo_i, hi_i} if r >= 1 else set()))
        part = np.partition(walsh, ranks)
        hl = float((part[(m - 1) // 2] + part[m // 2]) / 2.0)
        if r >= 1:
            hl_lo, hl_hi = float(part[lo_i]), float(part[hi_i])
        else:
            reasons.append(f"hl_ci: too few pairs for a {level:.0%} CI ({k})")
        nz = d[d != 0]
        if nz.size == 0:
            p_s, method = 1.0, "all-tied"
            reasons.append("p_mwu: every difference is 0 (p = 1)")
        else:
            p_s = signed_rank_p(nz)
        if k >= 2 and np.ptp(d) > 0:
            t = float(np.mean(d)) / (float(np.std(d, ddof=1)) / math.sqrt(k))
            p_w = float(min(1.0, 2.0 * special.stdtr(k - 1, -abs(t))))
        elif k >= 2:
            p_w = 1.0 if d[0] == 0 else math.nan
            if d[0] != 0:
                reasons.append("p_welch: every difference is the same non-zero value")
        else:
            reasons.append("p_welch: fewer than 2 pairs")
    dep = PairedDependence(d, np.sign(d) * average_ranks(np.abs(d))) if time_ordered else None
    if dep is not None and dep.status is Dependence.CORRECTED:
        p_w, p_s = robust(p_w, dep.p_t), robust(p_s, dep.p_rank)
    z, why = _z_from(hl, nv, floor) if k >= 3 else (math.nan, "fewer than 3 pairs")
    if why:
        reasons.append(f"z: {why}")
    p_min = 2.0 ** (1 - k) if k else math.nan  # every difference of one sign: the exact smallest p
    if alpha is not None and k and p_min > alpha:
        reasons.append(f"p_mwu: smallest attainable p {p_min:.3g} > α = {alpha:g} at {k} pairs")
        p_s, method = math.nan, "n/a"
    return TwoSample(
        n_n=k, n_a=k, dropped=dropped,
        mean_n=float(np.mean(nv)) if k else math.nan, mean_a=float(np.mean(av)) if k else math.nan,
        median_n=float(np.median(nv)) if k else math.nan, median_a=float(np.median(av)) if k else math.nan,
        z=z, p_welch=p_w, p_mwu=p_s, mwu_method=method, hl=hl, hl_lo=hl_lo, hl_hi=hl_hi,
        cliffs_delta=delta, reasons=tuple(reasons), p_mwu_min=p_min,
        dependence=dep.status if dep is not None else Dependence.NOT_ASSESSED,
        n_eff_n=dep.n_eff if dep is not None else math.nan, n_eff_a=dep.n_eff if dep is not None else math.nan)


SIGNED_RANK_EXACT_MAX = 50  # untied differences up to this many: the exact distribution


def signed_rank_p(d: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p of the non-zero differences `d` (zeros dropped by the
    caller, Wilcoxon's convention): exact when they are at most SIGNED_RANK_EXACT_MAX and
    untied (as ``scipy.stats.wilcoxon(method="exact")``), else the normal approximation with
    the tie correction of the variance and a continuity correction (as ``method="approx",
    correction=True``)."""
    n = len(d)
    if n == 0:
        return 1.0
    ranks, counts = _ranks_and_ties(np.abs(d))
    w_plus = float(ranks[d > 0].sum())
    tied = bool((counts > 1).any())
    if n <= SIGNED_RANK_EXACT_MAX and not tied:
        # The number of subsets of {1..n} with each rank sum: the null distribution of W+.
        total = n * (n + 1) // 2
        dist = np.zeros(total + 1)
        dist[0] = 1.0
        for r in range(1, n + 1):
            dist[r:] = dist[r:] + dist[:-r].copy()
        cdf = np.cumsum(dist) / 2.0**n
        w = int(round(w_plus))
        lower = cdf[w]
        upper = 1.0 - (cdf[w - 1] if w >= 1 else 0.0)
        return float(min(1.0, 2.0 * min(lower, upper)))
    mean = n * (n + 1) / 4.0
    var = n * (n + 1) * (2 * n + 1) / 24.0 - float(((counts**3) - counts).sum()) / 48.0
    if var <= 0:
        return 1.0
    z = (abs(w_plus - mean) - 0.5) / math.sqrt(var)
    return float(min(1.0, 2.0 * special.ndtr(-max(z, 0.0))))


def _signed_rank_ci_rank(k: int, level: float) -> int:
    """r of the CI [W_(r), W_(M+1−r)] of the Walsh averages (1-based; 0 when none reaches
    `level`), from the normal approximation of the signed-rank statistic."""
    if k < 2:
        return 0
    m = k * (k + 1) / 2.0
    zq = float(special.ndtri(1.0 - (1.0 - level) / 2.0))
    r = int(math.floor(m / 2.0 - zq * math.sqrt(k * (k + 1) * (2 * k + 1) / 24.0)))
    return max(0, min(r, int(m) // 2))
