"""Dependence-robust two-sample tests (perfdiff.stats.dependence; docs/STATISTICS.md,
"Dependent cycles"): simulations where the truth is known.  Series with independent values
keep today's p values; autocorrelated series (AR(1), Markov bursts) with the same law in
both runs reject at about α instead of several times α; too few cycles are flagged."""
from __future__ import annotations

import math

import numpy as np
import pytest
from serving_sim import ar1, step_kinds

from perfdiff import stats
from perfdiff.stats.dependence import (BATCHES, MIN_CYCLES, Dependence, _lugsail, batch_variance, long_run_variance,
                                       placements, without_step)

ALPHA = 0.05


def test_long_run_variance_of_an_ar1_is_its_known_inflation() -> None:
    """AR(1) with φ: LRV / γ0 = (1 + φ) / (1 − φ); the Bartlett estimate at Andrews' lag gets
    most of it (its known downward bias), white noise stays at 1."""
    rng = np.random.default_rng(1)
    x = np.vstack([ar1(rng, 20_000, 0.8, 1.0), rng.standard_normal(20_000)])
    g0, lrv, lag = long_run_variance(x)
    assert 7.0 <= lrv[0] / g0[0] <= 9.5 and lag[0] > 10
    assert lrv[1] / g0[1] == pytest.approx(1.0, abs=0.05) and lag[1] <= 3


@pytest.mark.parametrize("phi", [0.3, 0.95])  # a short lag (dot products) and a long one (FFT)
def test_long_run_variance_by_definition(phi: float) -> None:
    rng = np.random.default_rng(6)
    x = ar1(rng, 3_000, phi, 1.0)
    g0, lrv, lag = long_run_variance(x)
    c = x - x.mean()
    gam = [float(c[k:] @ c[:len(c) - k]) / len(c) for k in range(int(lag[0]) + 1)]
    want = gam[0] + 2 * sum((1 - k / (lag[0] + 1)) * gam[k] for k in range(1, int(lag[0]) + 1))
    assert (lag[0] > 32) == (phi > 0.9)
    assert g0[0] == pytest.approx(gam[0]) and lrv[0] == pytest.approx(want)


def test_batch_means_variance_by_definition() -> None:
    x = np.arange(23, dtype=float) ** 1.5
    size = 23 // BATCHES
    means = x[23 - size * BATCHES:].reshape(BATCHES, size).mean(axis=1)
    assert batch_variance(x)[0] == pytest.approx(np.var(means, ddof=1) / BATCHES)


def test_placements_average_to_the_mann_whitney_share() -> None:
    a, n = np.array([1.0, 3.0, 3.0, 7.0]), np.array([2.0, 3.0, 5.0])
    p, q = placements(a, n)
    u_share = np.mean([(x > y) + 0.5 * (x == y) for x in a for y in n])
    assert p.mean() == pytest.approx(u_share) and q.mean() == pytest.approx(1.0 - u_share)


def test_independent_values_keep_todays_p() -> None:
    rng = np.random.default_rng(2)
    for shift in (0.0, 0.3):
        a, n = rng.standard_normal(300) + shift, rng.standard_normal(300)
        r = stats.compare_samples(a, n, floor=1e-3, time_ordered=True)
        plain = stats.compare_samples(a, n, floor=1e-3)
        assert r.dependence is Dependence.NONE and r.n_eff_a > 240 and r.n_eff_n > 240
        assert (r.p_mwu, r.p_welch) == (plain.p_mwu, plain.p_welch)
        assert plain.dependence is Dependence.NOT_ASSESSED and math.isnan(plain.n_eff_a)


def _rejections(make, pairs: int = 300, paired: bool = False) -> tuple[float, float]:
    """(share of pairs with the rank test's p ≤ α corrected, uncorrected)."""
    rng = np.random.default_rng(3)
    test = stats.compare_paired if paired else stats.compare_samples
    hit_c = hit_u = 0
    for _ in range(pairs):
        a, n = make(rng), make(rng)
        hit_c += test(a, n, floor=1e-3, time_ordered=True).p_mwu <= ALPHA
        hit_u += test(a, n, floor=1e-3).p_mwu <= ALPHA
    return hit_c / pairs, hit_u / pairs


def test_ar1_series_of_one_law_reject_at_about_alpha() -> None:
    corrected, plain = _rejections(lambda rng: ar1(rng, 300, 0.9, 1.0))
    assert plain > 0.3 and corrected <= 0.09, (corrected, plain)


def test_markov_bursts_of_one_law_reject_at_about_alpha() -> None:
    """Prefill-like steps 3× longer, 15 % of them in bursts of 8 on average."""
    def make(rng: np.random.Generator) -> np.ndarray:
        return np.where(step_kinds(rng, 300, 0.15, 8.0), 3.0, 1.0) * rng.lognormal(0.0, 0.05, 300)

    corrected, plain = _rejections(make)
    assert plain > 0.15 and corrected <= 0.08, (corrected, plain)


def test_paired_ar1_differences_reject_at_about_alpha() -> None:
    """Batch means keep a known downward bias at batches of 30 of a φ = 0.9 series (their
    means are still correlated): about 10 % here, against 67 % uncorrected."""
    corrected, plain = _rejections(lambda rng: ar1(rng, 300, 0.9, 1.0), paired=True)
    assert plain > 0.3 and corrected <= 0.11, (corrected, plain)


def test_a_shift_under_bursts_is_still_found() -> None:
    """A 20 % slower decode step under prefill bursts: the rank test's p stays far below α."""
    rng = np.random.default_rng(4)

    def make(scale: float) -> np.ndarray:
        pre = step_kinds(rng, 300, 0.10, 10.0)
        return np.where(pre, 3.0, scale) * rng.lognormal(0.0, 0.05, 300)

    r = stats.compare_samples(make(1.2), make(1.0), floor=1e-3, time_ordered=True)
    assert r.dependence is Dependence.CORRECTED and r.p_mwu < 1e-4


def test_too_few_cycles_are_flagged_not_corrected() -> None:
    rng = np.random.default_rng(5)
    a, n = ar1(rng, MIN_CYCLES - 1, 0.9, 1.0), ar1(rng, 50, 0.9, 1.0)
    r = stats.compare_samples(a, n, floor=1e-3, time_ordered=True)
    assert r.dependence is Dependence.SKIPPED and r.p_mwu == stats.compare_samples(a, n, floor=1e-3).p_mwu
    d = stats.compare_paired(a, n[:MIN_CYCLES - 1], floor=1e-3, time_ordered=True)
    assert d.dependence is Dependence.SKIPPED


def test_a_change_that_sets_in_halfway_is_no_dependence() -> None:
    """A clock capped for the second half of the abnormal run: that run's series is one long
    step, which its batch means would read as a persistent regime (about 5 effective samples,
    p ≈ 0.09).  Less its one largest shift it shows no dependence, nor does the normal run:
    the change stays as significant as independent samples say."""
    rng = np.random.default_rng(7)
    n = 1900 + 10 * rng.standard_normal(300)
    a = np.where(np.arange(300) < 150, 1900.0, 1600.0) + 10 * rng.standard_normal(300)
    r = stats.compare_samples(a, n, floor=1.0, time_ordered=True)
    assert r.dependence is Dependence.NONE and r.p_mwu < 1e-20
    step = without_step(a[None, :])[0]
    assert abs(step[:150].mean()) < 1e-9 and abs(step[150:].mean()) < 1e-9 and step.std() < 12


def test_lugsail_batch_means_by_definition() -> None:
    """(BM_b − ½·BM_{b/3}) / ½ with BM_b the batch-means variance of 10 batches and BM_{b/3} of
    30, never below BM_b; too short a series for 30 batches of two keeps BM_b."""
    x = np.sin(np.arange(300) / 7.0) + np.arange(300) % 5
    want = max(batch_variance(x, 10)[0], 2.0 * batch_variance(x, 10)[0] - batch_variance(x, 30)[0])
    assert _lugsail(x, 10) == pytest.approx(want)
    assert _lugsail(x[:50], 10) == pytest.approx(batch_variance(x[:50], 10)[0])


def test_lugsail_batch_means_hold_a_long_memory_better() -> None:
    """An AR(1) with φ = 0.95 (about 40 steps of memory) over 300 steps: the batches of 30 are
    themselves dependent and plain batch means find under half the variance of the mean; the
    lugsail combination about 70 %."""
    rng = np.random.default_rng(12)
    runs = np.array([ar1(rng, 300, 0.95, 1.0) for _ in range(2000)])
    truth = float(np.var(runs.mean(axis=1)))
    plain = float(np.mean([batch_variance(r, 10)[0] for r in runs]))
    lugsail = float(np.mean([_lugsail(r, 10) for r in runs]))
    assert plain < 0.5 * truth and 0.65 * truth < lugsail < truth


def test_complete_separation_under_dependence_is_corrected_too() -> None:
    """Every abnormal value above every normal one, both runs dependent: the placements do
    not vary, so the rank test's robust variance is 0; its p is then the robust Welch p, never
    the uncorrected one."""
    rng = np.random.default_rng(8)
    n = ar1(rng, 300, 0.95, 1.0)
    a = n.max() + 1.0 + ar1(rng, 300, 0.95, 1.0) - ar1(rng, 300, 0.95, 1.0).min()
    today = stats.compare_samples(a, n, floor=1e-3)
    r = stats.compare_samples(a, n, floor=1e-3, time_ordered=True)
    assert r.dependence is Dependence.CORRECTED and r.p_mwu == r.p_welch > 1e3 * today.p_mwu
    assert r.n_eff_n < 100
