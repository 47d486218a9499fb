"""perfdiff.stats against hand-computed values and scipy on small literal inputs (docs/STATISTICS.md)."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats as sps

from perfdiff import stats as S
from perfdiff.stats import effects, mannwhitney, pairwise

NAN = math.nan


def brute_differences(a, n) -> np.ndarray:
    """All a_i - n_j, sorted: what HL and its CI are defined on."""
    return np.sort((np.asarray(a, float)[:, None] - np.asarray(n, float)[None, :]).ravel())


# ---------------------------------------------------------------------------------------
# One-sample summaries


def test_drop_nonfinite_counts_and_leaves_input_alone():
    x = np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 3.0])
    before = x.copy()
    kept, dropped = S.drop_nonfinite(x)
    assert kept.tolist() == [1.0, 2.0, 3.0]
    assert dropped == 3
    np.testing.assert_array_equal(x, before)


def test_robust_scale_is_1_4826_mad():
    # median 3, |deviations| 2 1 0 1 97 → MAD 1: the outlier does not matter
    assert S.robust_scale([1, 2, 3, 4, 100]) == pytest.approx(1.4826)


def test_robust_scale_falls_back_to_sd_when_mad_is_zero():
    # median 5 and MAD 0; sd(ddof 1) = sqrt((4·0.8² + 3.2²)/4) = sqrt(3.2)
    assert S.robust_scale([5, 5, 5, 5, 9]) == pytest.approx(math.sqrt(3.2))
    assert S.robust_scale([0.1, 0.1, 0.1]) == 0.0  # constant: exactly 0, not 1e-17


def test_robust_scale_needs_two_finite_values():
    assert math.isnan(S.robust_scale([4.0]))
    assert math.isnan(S.robust_scale([4.0, np.nan, np.inf]))


def test_resolution_is_smallest_gap_between_distinct_values_over_both_runs():
    assert S.resolution([1.0, 1.5, 3.0], [2.0, 1.5, np.nan]) == 0.5
    assert S.resolution([100, 300], [250]) == 50
    assert math.isnan(S.resolution([2.0, 2.0], [2.0]))
    assert math.isnan(S.resolution([]))


def test_log_epsilon_is_max_of_resolution_and_one_percent_of_median_positive():
    # resolution 1; median positive value of {1000, 1001, 2000} is 1001 → 1 % = 10.01
    assert S.log_epsilon([0, 1000, 1001], [2000, 0]) == pytest.approx(10.01)
    # resolution 0.5 beats 1 % of 10
    assert S.log_epsilon([9.5, 10, 10.5]) == 0.5
    assert math.isnan(S.log_epsilon([]))


def test_quantile_table_linear_interpolation_by_hand():
    q = S.quantile_table(np.arange(1.0, 11.0).tolist() + [np.nan])
    assert list(q) == list(S.QUANTILE_KEYS) + ["mean", "sd", "n"]
    # position p·(n-1) on 1..10: P5 = 1 + 0.45, P25 = 3.25, P99 = 1 + 8.91
    assert q["min"] == 1 and q["max"] == 10
    assert q["P5"] == pytest.approx(1.45)
    assert q["P25"] == pytest.approx(3.25)
    assert q["P50"] == pytest.approx(5.5)
    assert q["P99"] == pytest.approx(9.91)
    assert q["mean"] == pytest.approx(5.5)
    assert q["sd"] == pytest.approx(3.0276503540974917)
    assert q["n"] == 10


def test_quantile_table_empty_and_single():
    empty = S.quantile_table([np.nan])
    assert empty["n"] == 0
    assert all(math.isnan(empty[k]) for k in empty if k != "n")
    one = S.quantile_table([7.0])
    assert one["P90"] == 7.0 and one["n"] == 1 and math.isnan(one["sd"])


# ---------------------------------------------------------------------------------------
# Hodges–Lehmann, its CI, Cliff's δ


def test_hodges_lehmann_by_hand():
    # differences 2 1 4 3 → median 2.5
    assert S.hodges_lehmann([3, 5], [1, 2]) == 2.5
    # differences 9 8 6 → median 8
    assert S.hodges_lehmann([10], [1, 2, 4]) == 8.0
    assert math.isnan(S.hodges_lehmann([], [1, 2]))
    assert math.isnan(S.hodges_lehmann([1.0], [np.nan]))


@pytest.mark.parametrize("m, n", [(1, 1), (2, 3), (7, 5), (40, 61), (1, 400), (300, 2),
                                   (150, 140)])
@pytest.mark.parametrize("kind", ["continuous", "integers", "zero-heavy", "huge-offset",
                                  "constant"])
@pytest.mark.parametrize("path", ["matrix", "selection"])
def test_hodges_lehmann_and_ci_equal_brute_force(m, n, kind, path, monkeypatch):
    if path == "selection":  # force the large-input algorithm onto these small inputs
        monkeypatch.setattr(pairwise, "_DIRECT_LIMIT", 0)
        monkeypatch.setattr(pairwise, "_GATHER_LIMIT", 0)
    rng = np.random.default_rng(m * 1000 + n)
    a, b = rng.normal(0.2, 1, m), rng.normal(0, 1, n)
    if kind == "integers":
        a, b = np.round(a * 2), np.round(b * 2)
    elif kind == "zero-heavy":  # β vectors: a function absent from most cycles
        a, b = a * (rng.random(m) < 0.2), b * (rng.random(n) < 0.3)
    elif kind == "huge-offset":  # differences at the last bits of a large number
        a, b = 1e9 + a * 1e-6, 1e9 + b * 1e-6
    elif kind == "constant":  # every difference tied
        a, b = np.full(m, 2.5), np.full(n, 2.5)
    d = brute_differences(a, b)
    assert S.hodges_lehmann(a, b) == np.median(d)
    k = effects._ci_rank(m, n, 0.95)
    lo, hi = S.hl_confidence_interval(a, b)
    if k < 1:
        assert math.isnan(lo) and math.isnan(hi)
    else:
        assert (lo, hi) == (d[k - 1], d[m * n - k])


def test_hl_ci_six_against_six_by_hand():
    # U(6,6) counts 1 1 2 3 5 7 11 …: P(U ≤ 5) = 19/924 ≤ 0.025 < P(U ≤ 6) = 30/924 → k = 6.
    # a - n = 10 + (i - j), i, j ∈ 1..6: -5 once, -4 twice, -3 three times → D_(6) = 7.
    assert effects._ci_rank(6, 6, 0.95) == 6
    a = np.arange(1, 7) + 10.0
    n = np.arange(1, 7.0)
    assert S.hodges_lehmann(a, n) == 10.0
    assert S.hl_confidence_interval(a, n) == (7.0, 13.0)


def test_hl_ci_too_few_samples_is_nan():
    # 3 vs 3: P(U = 0) = 1/20 = 0.05 > 0.025, no interval reaches 95 %
    assert effects._ci_rank(3, 3, 0.95) == 0
    lo, hi = S.hl_confidence_interval([1, 2, 3], [4, 5, 6])
    assert math.isnan(lo) and math.isnan(hi)
    # 4 vs 4: P(U = 0) = 1/70 ≤ 0.025 < P(U ≤ 1) = 2/70 → k = 1, the full range
    assert S.hl_confidence_interval([10, 11, 12, 13], [1, 2, 3, 4]) == (6.0, 12.0)


def test_hl_ci_rank_exact_coverage_and_normal_approximation():
    for m, n in [(5, 8), (6, 6), (9, 10), (2, 40)]:
        k = effects._ci_rank(m, n, 0.95)
        counts = _u_counts_by_enumeration(m, n)
        cdf = np.cumsum(counts) / counts.sum()
        assert cdf[k - 1] <= 0.025 < cdf[k]
    # 30 vs 30 is past the exact limit: floor(450 + 0.5 - 1.959964·sqrt(900·61/12)) = 317
    assert effects._ci_rank(30, 30, 0.95) == 317


def _u_counts_by_enumeration(m: int, n: int) -> np.ndarray:
    """Tie-free U distribution by listing every subset of ranks (small sizes only)."""
    counts = np.zeros(m * n + 1, int)
    for ranks in combinations(range(1, m + n + 1), m):
        counts[sum(ranks) - m * (m + 1) // 2] += 1
    return counts


def test_cliffs_delta_by_hand():
    # a=3: > = <  ; a=4: > > <  → (3 - 2) / 6
    assert S.cliffs_delta([3, 4], [1, 3, 5]) == pytest.approx(1 / 6)
    # 1<2 1<2 2=2 2=2 3>2 3>2 → 0
    assert S.cliffs_delta([1, 2, 3], [2, 2]) == 0.0
    assert S.cliffs_delta([5, 6], [1, 2]) == 1.0
    assert math.isnan(S.cliffs_delta([], [1.0]))


def test_ks_statistic_matches_scipy():
    assert S.ks_statistic([1, 2, 3], [4, 5]) == 1.0
    a = [0.5, 1.2, 1.9, 2.2, 3.1, 3.1, 4.0]
    n = [1.0, 1.2, 2.5, 2.6, 2.9]
    assert S.ks_statistic(a, n) == pytest.approx(sps.ks_2samp(a, n).statistic)
    assert math.isnan(S.ks_statistic([], n))
    rng = np.random.default_rng(3)
    for _ in range(20):  # many ties across the two sides (the merge path's tie groups)
        a = rng.integers(0, 6, int(rng.integers(1, 40))).astype(float)
        n = rng.integers(0, 6, int(rng.integers(1, 40))).astype(float)
        assert S.ks_statistic(a, n) == pytest.approx(sps.ks_2samp(a, n).statistic, abs=1e-12)


# ---------------------------------------------------------------------------------------
# Welch


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy, constant side
@pytest.mark.parametrize("a, n", [
    ([12.1, 14.3, 13.9, 15.0, 12.8], [10.2, 11.1, 10.9, 11.5]),
    ([1.0, 2.0], [1.5, 1.7, 1.6, 1.9, 2.5, 0.2]),
    ([3.0, 3.0, 3.0, 3.0], [2.0, 2.5, 3.5, 2.9]),  # one side constant
    ([100.0, 101.0, 99.5], [100.2, 100.4, 100.3]),
])
def test_welch_matches_scipy(a, n):
    expected = sps.ttest_ind(a, n, equal_var=False).pvalue
    assert S.welch_p(a, n) == pytest.approx(expected, rel=1e-10)


def test_welch_edge_cases():
    assert math.isnan(S.welch_p([1.0], [1.0, 2.0, 3.0]))  # n < 2 on a side
    assert math.isnan(S.welch_p([1.0, np.nan], [1.0, 2.0]))  # NaN dropped, then n = 1
    assert S.welch_p([0.1] * 5, [0.1] * 4) == 1.0  # both constant and equal
    assert math.isnan(S.welch_p([2.0] * 5, [1.0] * 4))  # both constant and different


# ---------------------------------------------------------------------------------------
# Mann–Whitney


def test_six_against_six_smallest_p_is_0_0022():
    """6 against 6 cycles: the smallest two-sided U-test p is 2/C(12, 6) = 0.0022."""
    assert S.min_attainable_p(6, 6) == pytest.approx(2 / 924)
    assert round(S.min_attainable_p(6, 6), 4) == 0.0022
    p, method = S.mann_whitney_p([7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6])
    assert (p, method) == (pytest.approx(2 / 924), "exact")


@pytest.mark.parametrize("a, n", [
    ([1.1, 2.3, 0.4, 5.6, 3.3], [2.2, 4.4, 6.1, 7.7, 5.0, 8.8, 0.9]),
    ([10.0, 11.0, 12.0], [1.0, 2.0, 3.0, 4.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0]),
    (list(range(10)), [x + 0.5 for x in range(3, 13)]),  # 10 vs 10: C(20, 10) = 184 756
    ([5.5], [float(x) for x in range(300)]),  # one against many: C(301, 1)
    ([150.5, 299.9], [float(x) for x in range(300)]),  # 2 against 300: Newton's identities
    ([0.5, 7.5, 8.5, 9.5], [float(x) for x in range(40)]),  # 4 against 40
])
def test_exact_without_ties_matches_scipy_exact(a, n):
    p, method = S.mann_whitney_p(a, n)
    assert method == "exact"
    assert p == pytest.approx(sps.mannwhitneyu(a, n, method="exact").pvalue, rel=1e-12)


def test_exact_permutation_with_ties_by_hand():
    # pooled 1 2 2 3 → midranks 1 2.5 2.5 4; W_a = 3.5.  The 6 subsets of two midranks sum
    # to 3.5, 3.5, 5, 5, 6.5, 6.5 → P(W ≤ 3.5) = 1/3 → p = 2/3.
    assert S.mann_whitney_p([1, 2], [2, 3]) == (pytest.approx(2 / 3), "exact-permutation")


@pytest.mark.parametrize("a, n", [
    ([1, 2, 2, 3, 5], [2, 3, 3, 4, 6, 6]),
    ([0, 0, 0, 1.5, 2.5], [0, 0, 3, 4, 5, 6, 7]),  # zeros: function absent in some cycles
    ([4, 4, 4], [1, 4, 4, 9]),
    ([0, 0], [0, 0, 0, 1, 1, 2, 3, 3] * 3),  # 2 against 24, many ties: Newton's identities
])
def test_exact_permutation_with_ties_matches_exhaustive_scipy_permutation_test(a, n):
    def rank_sum(x, y, axis=-1):
        pooled = np.concatenate([x, y], axis=axis)
        return np.sum(sps.rankdata(pooled, axis=axis)[..., : x.shape[axis]], axis=axis)

    ref = sps.permutation_test((np.asarray(a, float), np.asarray(n, float)), rank_sum,
                               permutation_type="independent", n_resamples=np.inf,
                               vectorized=True, alternative="two-sided").pvalue
    p, method = S.mann_whitney_p(a, n)
    assert method == "exact-permutation"
    assert p == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("n, k", [(9, 2), (10, 3), (11, 4), (12, 5), (14, 7)])
def test_subset_sum_counts_equal_enumeration_with_ties(n, k):
    rng = np.random.default_rng(n + k)
    scores = np.rint(2 * mannwhitney._midranks(rng.integers(0, 4, n).astype(float))).astype(int)
    expected = np.zeros(2 * n * k + 1, int)
    for subset in combinations(scores.tolist(), k):
        expected[sum(subset)] += 1
    counts = mannwhitney._subset_sum_counts(scores, k)
    np.testing.assert_array_equal(counts, expected[: counts.size])
    assert counts.sum() == math.comb(n, k)


@pytest.mark.parametrize("seed, ties", [(1, False), (2, True), (3, True)])
def test_asymptotic_matches_scipy_asymptotic_with_continuity(seed, ties):
    rng = np.random.default_rng(seed)
    a, n = rng.normal(0.3, 1, 40), rng.normal(0, 1, 35)  # C(75, 35) ≫ 200 000
    if ties:
        a, n = np.round(a * 2), np.round(n * 2)
    p, method = S.mann_whitney_p(a, n)
    assert method == "asymptotic"
    ref = sps.mannwhitneyu(a, n, method="asymptotic", use_continuity=True).pvalue
    assert p == pytest.approx(ref, rel=1e-10)


def test_exact_limit_boundary():
    assert mannwhitney._exact_regime(10, 10)  # C(20, 10) = 184 756
    assert not mannwhitney._exact_regime(11, 11)  # C(22, 11) = 705 432
    assert S.mann_whitney_p(np.arange(11.0), np.arange(11.0) + 0.5)[1] == "asymptotic"


def test_mann_whitney_all_tied_and_empty():
    assert S.mann_whitney_p([3.0, 3.0], [3.0, 3.0, 3.0]) == (1.0, "all-tied")
    p, method = S.mann_whitney_p([], [1.0, 2.0])
    assert math.isnan(p) and method == "n/a"


def test_min_attainable_p_asymptotic_regime_is_what_the_test_returns():
    a, n = np.arange(11.0) + 100, np.arange(11.0)
    assert S.mann_whitney_p(a, n)[0] == pytest.approx(S.min_attainable_p(11, 11))
    # z = (60.5 - 0.5) / sqrt(121·23/12) = 3.9406 → 2·Φ(-z) = 8.15e-5
    assert S.min_attainable_p(11, 11) == pytest.approx(8.1515e-5, rel=1e-3)
    assert math.isnan(S.min_attainable_p(0, 5))
    assert S.min_attainable_p(1, 1) == 1.0


def test_cycles_needed_by_hand():
    # one test: 2/C(8, 4) = 0.029 ≤ 0.05 while 2/C(6, 3) = 0.1 is not → 4
    assert S.cycles_needed(1) == 4
    # 260 rows (the reference report): p·260 ≤ 0.05 needs p ≤ 1.9e-4: 2/C(16, 8) = 1.55e-4 → 8
    assert S.cycles_needed(260) == 8
    # 1000 rows: 9 per side reaches 4.1e-5·1000 ≤ 0.05, but 11 (asymptotic, 8.2e-5) does
    # not: the rule asks for a size from which every larger one works → 12
    assert S.min_attainable_p(9, 9) * 1000 <= 0.05 < S.min_attainable_p(11, 11) * 1000
    assert S.cycles_needed(1000) == 12
    assert S.cycles_needed(0) == S.cycles_needed(1)
    with pytest.raises(ValueError):
        S.cycles_needed(10, alpha=0.0)


# ---------------------------------------------------------------------------------------
# Z


def test_z_score_by_hand():
    n = [10, 11, 12, 13, 14]  # median 12, MAD 1 → σ̂ 1.4826 > 0.05·12 = 0.6 > floor
    a = [15, 16, 17, 18, 19]  # HL = 5
    assert S.z_score(a, n, floor=0.01) == pytest.approx(5 / 1.4826)
    # 5 % of |median| wins: median -100 → 5; HL = +1
    assert S.z_score([-99.0, -99.0, -99.0], [-100.0, -100.0, -100.1, -99.9], 0.01) == \
        pytest.approx(1 / 5)
    # the floor wins on a constant normal side at 0
    assert S.z_score([1, 1, 1], [0, 0, 0], floor=0.01) == pytest.approx(100)


def test_z_score_na_rules():
    assert math.isnan(S.z_score([1, 2, 3], [1, 2], 0.01))  # n_N < 3
    assert math.isnan(S.z_score([], [1, 2, 3], 0.01))
    assert math.isnan(S.z_score([1, 1, 1], [0, 0, 0], floor=0.0))  # both floors 0 → n/a
    assert math.isnan(S.z_score([1, 1, 1], [0, 0, 0], floor=NAN))  # unknown floor counts 0
    assert S.z_score([5, 5, 5], [5, 5, 5], floor=0.0) == 0.0  # numerator 0 → 0


def test_z_log_by_hand_and_negative_values():
    n = np.array([9.0, 10.0, 11.0, 10.0, 10.0])
    a = n * 2
    eps = 0.5
    expected = S.z_score(np.log(a + eps), np.log(n + eps), 0.05)
    assert S.z_log(a, n, eps) == expected
    # ln(20.5) - ln(10.5) = 0.669 over a floor-dominated denominator: 5 % of ln(10.5) = 0.1176
    assert expected == pytest.approx(math.log(20.5 / 10.5) / (0.05 * math.log(10.5)))
    assert math.isnan(S.z_log([1.0, -0.1, 2.0], n, eps))  # a μ < 0 → n/a
    assert not math.isnan(S.z_log([1.0, np.nan, 2.0, 3.0], n, eps))  # NaN is dropped, not < 0


# ---------------------------------------------------------------------------------------
# compare_samples: every n/a and edge case of docs/STATISTICS.md


def test_compare_samples_agrees_with_the_single_functions():
    rng = np.random.default_rng(5)
    for a, n in [(rng.normal(1, 1, 30), rng.normal(0, 1, 25)),
                 (np.round(rng.normal(1, 2, 9)), np.round(rng.normal(0, 2, 8))),
                 (rng.normal(0, 1, 700) * (rng.random(700) < 0.3), rng.normal(0, 1, 500))]:
        r = S.compare_samples(a, n, floor=0.01)
        assert r.hl == S.hodges_lehmann(a, n)
        assert (r.hl_lo, r.hl_hi) == S.hl_confidence_interval(a, n)
        assert r.z == S.z_score(a, n, 0.01)
        assert r.p_welch == pytest.approx(S.welch_p(a, n), rel=1e-12)  # sums of sorted values
        assert (r.p_mwu, r.mwu_method) == S.mann_whitney_p(a, n)
        assert r.cliffs_delta == S.cliffs_delta(a, n)
        assert (r.n_n, r.n_a, r.dropped) == (len(n), len(a), 0)
        assert r.mean_n == pytest.approx(np.mean(n)) and r.median_a == np.median(a)
        assert r.p_mwu_min == S.min_attainable_p(len(n), len(a))


def test_function_in_one_run_only_all_zeros_on_the_normal_side():
    new = [0.8, 1.1, 0.9, 1.3, 1.0, 1.2]
    r = S.compare_samples(new, [0.0] * 6, floor=0.01)
    assert r.hl == pytest.approx(1.05)
    assert r.z == pytest.approx(1.05 / 0.01)  # σ̂ 0, median 0: the floor decides
    assert r.p_mwu == pytest.approx(2 / 924) and r.mwu_method == "exact-permutation"
    assert r.cliffs_delta == 1.0
    # the zeros have no variance: Welch is a one-sample t on the new side, t = 13.7, df 5
    assert r.p_welch == pytest.approx(sps.ttest_ind(new, [0.0] * 6, equal_var=False).pvalue)
    vanished = S.compare_samples([0.0] * 6, new, floor=0.01)
    assert vanished.hl == pytest.approx(-1.05) and vanished.cliffs_delta == -1.0


def test_both_constant_and_equal():
    r = S.compare_samples([2.0] * 5, [2.0] * 4, floor=0.01)
    assert (r.z, r.p_welch, r.p_mwu, r.mwu_method) == (0.0, 1.0, 1.0, "all-tied")
    assert r.hl == 0.0 and r.cliffs_delta == 0.0
    assert "p_mwu: all tied (p = 1)" in r.reasons


def test_both_constant_and_different():
    r = S.compare_samples([3.0] * 5, [2.0] * 5, floor=0.01)
    assert math.isnan(r.p_welch)
    assert "p_welch: both constant and different" in r.reasons
    assert r.p_mwu == pytest.approx(2 / 252) and r.mwu_method == "exact-permutation"
    assert r.z == pytest.approx(1.0 / 0.1)  # HL 1 over 5 % of |median_N| = 0.1


def test_small_samples_are_na_with_reasons_never_one():
    r = S.compare_samples([1.0, 2.0], [1.5, 2.5], floor=0.01)
    assert math.isnan(r.z) and "z: n_N < 3" in r.reasons
    assert not math.isnan(r.p_welch)
    r1 = S.compare_samples([1.0], [1.5, 2.5, 3.0], floor=0.01)
    assert math.isnan(r1.p_welch) and "p_welch: n < 2 on a side" in r1.reasons
    assert math.isnan(r1.hl_lo) and any(x.startswith("hl_ci:") for x in r1.reasons)


def test_empty_side():
    r = S.compare_samples([np.nan, np.inf], [1.0, 2.0, 3.0], floor=0.01)
    assert (r.n_a, r.n_n, r.dropped) == (0, 3, 2)
    for v in (r.mean_a, r.median_a, r.hl, r.cliffs_delta, r.p_welch, r.p_mwu, r.z):
        assert math.isnan(v)
    assert r.mwu_method == "n/a"
    assert "hl, cliffs_delta, p_mwu: n_A = 0" in r.reasons


def test_nonfinite_values_are_dropped_and_counted():
    a = [1.0, 2.0, np.nan, 3.0, np.inf]
    n = [0.5, -np.inf, 0.7, 0.9]
    r = S.compare_samples(a, n, floor=0.01)
    assert (r.n_a, r.n_n, r.dropped) == (3, 3, 3)
    assert r.mean_a == 2.0 and r.hl == S.hodges_lehmann([1, 2, 3], [0.5, 0.7, 0.9])
    assert "dropped: 1 non-finite normal, 2 non-finite abnormal" in r.reasons


def test_negative_values_are_fine_for_z_but_not_for_z_log():
    a, n = [-5.0, -4.0, -6.0, -5.5], [-1.0, -1.2, -0.8, -1.1]
    r = S.compare_samples(a, n, floor=0.01)
    assert r.z < 0 and r.hl < 0
    assert math.isnan(S.z_log(a, n, eps=0.01))


def test_alpha_makes_an_unreachable_u_test_na():
    r = S.compare_samples([4.0, 5.0, 6.0], [1.0, 2.0, 3.0], floor=0.01, alpha=0.05)
    assert r.p_mwu_min == pytest.approx(0.1)
    assert math.isnan(r.p_mwu) and r.mwu_method == "n/a"
    assert any(x.startswith("p_mwu: smallest attainable p 0.1 > α") for x in r.reasons)
    reachable = S.compare_samples([4.0, 5, 6, 7], [1.0, 2, 3, 0], floor=0.01, alpha=0.05)
    assert reachable.p_mwu == pytest.approx(2 / 70)


def test_compare_samples_never_modifies_inputs():
    a = np.array([3.0, 1.0, np.nan, 2.0])
    n = np.array([0.5, 0.1, 0.3])
    a0, n0 = a.copy(), n.copy()
    S.compare_samples(a, n, floor=0.01)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(n, n0)


def test_compare_samples_large_matches_brute_force():
    rng = np.random.default_rng(11)
    a, n = rng.lognormal(3.0, 0.5, 2000), rng.lognormal(3.05, 0.5, 1500)
    r = S.compare_samples(a, n, floor=0.01)
    d = brute_differences(a, n)
    k = effects._ci_rank(2000, 1500, 0.95)
    assert r.hl == np.median(d)
    assert (r.hl_lo, r.hl_hi) == (d[k - 1], d[d.size - k])
    assert r.mwu_method == "asymptotic"
    assert r.p_mwu == pytest.approx(sps.mannwhitneyu(a, n, method="asymptotic").pvalue,
                                    rel=1e-9)


# ---------------------------------------------------------------------------------------
# Across rows


def test_bh_by_hand_and_against_scipy():
    p = [0.01, 0.04, 0.03, 0.2]
    # sorted .01 .03 .04 .2 → ·4/rank: .04 .06 .0533 .2 → running min from the top
    np.testing.assert_allclose(S.bh_qvalues(p), [0.04, 0.16 / 3, 0.16 / 3, 0.2])
    rng = np.random.default_rng(3)
    many = np.concatenate([rng.random(50), rng.random(10) * 1e-3, [1.0, 0.0]])
    np.testing.assert_allclose(S.bh_qvalues(many), sps.false_discovery_control(many),
                               rtol=1e-12)


def test_bh_nan_stays_nan_and_is_not_counted():
    q = S.bh_qvalues([0.01, np.nan, 0.04])
    assert math.isnan(q[1])
    np.testing.assert_allclose(q[[0, 2]], [0.02, 0.04])  # m = 2, not 3
    assert np.isnan(S.bh_qvalues([np.nan, np.nan])).all()
    assert S.bh_qvalues([]).size == 0


def test_is_fragile():
    assert S.is_fragile(0.01, 0.2, 0.05)
    assert S.is_fragile(0.2, 0.01, 0.05)
    assert not S.is_fragile(0.01, 0.02, 0.05)
    assert not S.is_fragile(0.3, 0.2, 0.05)
    assert not S.is_fragile(NAN, 0.01, 0.05)  # n/a is reported by its reason, not as fragile


def test_common_mode_triggers_on_a_device_wide_shrink():
    # the reference case: every kernel's β shrank ×0.28; the 0.03 pp one is below 0.05 pp
    bn = [40.0, 20.0, 10.0, 5.0, 0.03]
    ba = [11.2, 5.6, 2.8, 1.4, 0.9]
    cm = S.common_mode(bn, ba)
    assert cm is not None
    assert cm.ratio == pytest.approx(0.28) and cm.k == 4
    assert cm.iqr_log == pytest.approx(0, abs=1e-12)
    # Δβ vs common exposes the one that deviates
    np.testing.assert_allclose(S.delta_vs_common(bn, ba, cm.ratio)[:4], 0, atol=1e-12)


def test_common_mode_detail_says_why_not():
    few = S.common_mode_detail([40.0, 20.0], [11.2, 5.6])
    assert not few.triggered and few.k == 2 and "need 3" in few.reason
    # ln r = ln .28, ln .28, ln .9, ln .3: quartiles (linear) -1.2730 and -0.7165 → IQR .557
    spread = S.common_mode_detail([40.0, 20.0, 10.0, 5.0], [11.2, 5.6, 9.0, 1.5])
    assert not spread.triggered and spread.iqr_log > 0.2 and "IQR" in spread.reason
    small = S.common_mode_detail([40.0, 20.0, 10.0], [44.0, 22.0, 11.0])  # ×1.1
    assert not small.triggered and small.ratio == pytest.approx(1.1)
    assert "within ×1.25" in small.reason
    assert S.common_mode([40.0, 20.0, 10.0], [44.0, 22.0, 11.0]) is None
    none = S.common_mode_detail([0.01], [0.02])
    assert none.k == 0 and math.isnan(none.ratio) and not none.triggered


def test_common_mode_with_vanished_functions():
    # one vanished of five: an outlier beyond the quartiles, the shift still shows
    one = S.common_mode_detail([10.0, 10, 10, 10, 10], [5.0, 5, 5, 5, 0])
    assert one.triggered and one.ratio == pytest.approx(0.5)
    # three of five vanished: not a scale shift
    most = S.common_mode_detail([10.0, 10, 10, 10, 10], [5.0, 5, 0, 0, 0])
    assert not most.triggered and most.ratio == 0.0


def test_suspicion_score_by_hand():
    # τ +45 pp, Z(t) 7 capped at 5, Z(log μ) 2 → 45·(5 + 2) for a func-scope metric
    assert S.suspicion_score(45.0, 7.0, 2.0, True) == pytest.approx(315.0)
    assert S.suspicion_score(45.0, 7.0, 2.0, False) == pytest.approx(225.0)
    assert S.suspicion_score(-13.0, NAN, -9.0, True) == pytest.approx(65.0)  # n/a counts 0
    assert math.isnan(S.suspicion_score(NAN, 1.0, 1.0, True))
    np.testing.assert_allclose(
        S.suspicion_score(np.array([45.0, -13.0]), np.array([7.0, 1.0]),
                          np.array([2.0, NAN]), np.array([True, False])), [315.0, 13.0])


def test_legacy_score_by_hand():
    assert S.legacy_score(-43.0, NAN, 3.0) == pytest.approx(129.0)
    assert S.legacy_score(2.0, 80.0, -1.0) == pytest.approx(162.0)  # uncapped, like the reference


def test_huge_inputs_thin_the_pairwise_order_statistics() -> None:
    """Above HL_MAX_PAIRS the HL shift and its CI come from thinned sides: close to exact, fast."""
    import time

    rng = np.random.default_rng(7)
    n = rng.normal(100.0, 10.0, 300_000)
    a = rng.normal(103.0, 10.0, 250_000)
    t0 = time.process_time()
    res = S.compare_samples(a, n, floor=0.001)
    assert time.process_time() - t0 < 5.0
    assert res.hl == pytest.approx(3.0, abs=0.15)
    assert res.hl_lo < res.hl < res.hl_hi and res.hl_hi - res.hl_lo < 0.5
    assert res.n_n == 300_000 and res.n_a == 250_000  # the tests themselves use every value
    assert res.p_mwu < 1e-10


@pytest.mark.parametrize("seed", range(12))
def test_sorted_fast_paths_equal_the_plain_formulas(seed: int) -> None:
    """compare_samples' one-merge U/δ/tie term and partition-free median/MAD give exactly the
    numbers of the searchsorted/sort/np.median forms they replace (ties, odd and even sizes)."""
    from perfdiff.stats.describe import _mad_sorted, _median_sorted
    from perfdiff.stats.mannwhitney import _merge_counts, _tie_term, _u_statistic

    rng = np.random.default_rng(seed)
    na, nn = int(rng.integers(1, 60)), int(rng.integers(1, 60))
    levels = int(rng.integers(1, 8))  # few distinct values: many ties
    a = np.sort(rng.integers(0, levels, na) * 0.5 + (rng.random(na) if seed % 3 == 0 else 0))
    n = np.sort(rng.integers(0, levels, nn) * 0.5)
    greater, less, ties, tt = _merge_counts(a, n)
    u, g2, l2 = _u_statistic(a, n)
    assert (greater, less) == (g2, l2) and greater + 0.5 * ties == u
    assert tt == _tie_term(np.concatenate([a, n]))
    for v in (a, n):
        assert _median_sorted(v) == float(np.median(v))
        assert _mad_sorted(v) == float(np.median(np.abs(v - np.median(v))))


def test_binomial_greater_p_is_scipys_exact_one_sided_test():
    """P(X ≥ k), as scipy.stats.binomtest(..., alternative="greater") gives it, over the counts
    a straggler analysis meets (cycles × 1/ranks); by hand for 3 of 3 at 1/2; NaN for no trials."""
    for n in (1, 2, 7, 20, 100, 1000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            for p in (0.5, 1 / 8, 1 / 64, 1 / 1024):
                want = sps.binomtest(k, n, p, alternative="greater").pvalue
                assert S.binomial_greater_p(k, n, p) == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert S.binomial_greater_p(3, 3, 0.5) == pytest.approx(1 / 8)
    assert S.binomial_greater_p(0, 5, 0.2) == 1.0
    assert all(math.isnan(S.binomial_greater_p(k, n, p)) for k, n, p in ((0, 0, 0.5), (4, 3, 0.5), (1, 3, 1.5)))


@settings(max_examples=300, deadline=None)
@given(a=hnp.arrays(np.float64, st.integers(0, 40), elements=st.sampled_from([0.0, 1.0, 2.5, 3.0, 7.0, math.nan,
                                                                               math.inf, 1e6])),
       n=hnp.arrays(np.float64, st.integers(0, 40), elements=st.one_of(st.floats(-1e3, 1e3), st.just(math.nan))),
       alpha=st.sampled_from([None, 0.05, 1e-3]))
def test_u_test_gives_compare_samples_p_and_delta(a, n, alpha):
    """The U test alone gives the p and Cliff's δ compare_samples gives, and the same reasons
    for p and for dropped values, over ties, non-finite values, empty and tiny sides; neither
    touches its inputs."""
    a0, n0 = a.copy(), n.copy()
    u = S.u_test(a, n, alpha=alpha)
    full = S.compare_samples(a, n, floor=1.0, alpha=alpha)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(n, n0)
    assert (math.isnan(u.p_mwu) and math.isnan(full.p_mwu)) or u.p_mwu == full.p_mwu
    assert (math.isnan(u.cliffs_delta) and math.isnan(full.cliffs_delta)) or u.cliffs_delta == full.cliffs_delta
    assert [r for r in u.reasons if r.startswith(("p_mwu", "dropped"))] == \
        [r for r in full.reasons if r.startswith(("p_mwu", "dropped"))]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.integers(0, 6), m=st.integers(0, 40), k=st.integers(0, 40),
       alpha=st.sampled_from([None, 0.05, 1e-12]))
def test_u_test_rows_gives_u_test_row_by_row(data, rows, m, k, alpha):
    """Many rows at once give, bit for bit, what u_test gives each row: ties (values drawn from a
    few), constant rows, non-finite values, sizes where the test is exact and where it is not."""
    values = st.one_of(st.sampled_from([0.0, 1.0, 2.5, 7.0]), st.floats(-1e3, 1e3),
                       st.sampled_from([math.nan, math.inf]) if data.draw(st.booleans()) else st.just(3.0))
    a = np.array([[data.draw(values) for _ in range(m)] for _ in range(rows)], dtype=np.float64).reshape(rows, m)
    n = np.array([[data.draw(values) for _ in range(k)] for _ in range(rows)], dtype=np.float64).reshape(rows, k)
    if rows and data.draw(st.booleans()):
        a[0], n[0] = 5.0, 5.0  # one value throughout
    p, delta = S.u_test_rows(a, n, alpha=alpha)
    for i in range(rows):
        one = S.u_test(a[i], n[i], alpha=alpha)
        assert (math.isnan(p[i]) and math.isnan(one.p_mwu)) or p[i] == one.p_mwu
        assert (math.isnan(delta[i]) and math.isnan(one.cliffs_delta)) or delta[i] == one.cliffs_delta


def test_u_test_rows_at_the_multi_rank_size():
    """100 cycles a side (the normal approximation), many ties, a constant row, a shifted row."""
    rng = np.random.default_rng(7)
    a, n = rng.integers(0, 20, size=(50, 100)).astype(float), rng.integers(0, 20, size=(50, 100)).astype(float)
    a[1], n[1] = 4.0, 4.0
    a[2] += 6.0
    p, delta = S.u_test_rows(a, n, alpha=0.05)
    want = [S.u_test(a[i], n[i], alpha=0.05) for i in range(50)]
    assert p.tolist() == [w.p_mwu for w in want] and delta.tolist() == [w.cliffs_delta for w in want]
    assert p[1] == 1.0 and delta[1] == 0.0 and p[2] < 1e-6


def test_welch_of_variances_too_small_for_floats_is_na_not_a_crash():
    """Subnormal values, or values 1e-200 apart: the variances (or their squares) underflow to 0,
    which divided by zero; now p is n/a with its reason, and the U test still answers."""
    for a, n in (([5e-324, 0.0, 0.0], [0.0, 5e-324, 0.0, 0.0]), ([1e-200, 0.0, 2e-200], [0.0, 1e-200, 0.0])):
        res = S.compare_samples(a, n, 0.0)
        assert math.isnan(res.p_welch) and any(r.startswith("p_welch: variance below") for r in res.reasons)
        assert math.isfinite(res.p_mwu)
        assert math.isnan(S.welch_p(a, n))
