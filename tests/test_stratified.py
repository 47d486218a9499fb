"""Two runs compared kind with kind (perfdiff.stats.stratified; docs/STATISTICS.md, "Step
classes"): the stratified mean difference and rank test against their definitions and
scipy's one-stratum tests, their size under Markov bursts of strata, and a change of the mix
alone that the pooled tests take for a change and the stratified ones do not."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st
from serving_sim import step_kinds

from perfdiff import stats
from perfdiff.stats import Dependence
from perfdiff.stats.stratified import stratified


def test_one_stratum_is_welch_and_brunner_munzel() -> None:
    """Independent values in one stratum: Welch's t test and the Brunner–Munzel test (the
    placements' variance is theirs) as scipy computes them."""
    rng = np.random.default_rng(3)
    a, n = rng.standard_normal(40) + 0.5, rng.standard_normal(30)
    r = stratified(a, n, np.zeros(40, np.int64), np.zeros(30, np.int64), np.array([1.0]))
    assert r.dependence is Dependence.NONE
    assert r.p_mean == pytest.approx(st.ttest_ind(a, n, equal_var=False).pvalue, rel=1e-9)
    assert r.p_rank == pytest.approx(st.brunnermunzel(a, n).pvalue, rel=1e-9)
    assert r.theta == pytest.approx(np.mean([(x > y) + 0.5 * (x == y) for x in a for y in n]))


def test_the_stratified_difference_by_definition() -> None:
    """D = Σ_k w_k (ā_k − n̄_k), each run's mean standardised to the weights."""
    a = np.array([1.0, 2.0, 10.0, 3.0, 12.0, 2.0] * 4)
    la = np.array([0, 0, 1, 0, 1, 0] * 4)
    n = np.array([1.0, 1.5, 9.0, 1.0, 11.0, 1.0, 8.0] * 3)
    ln = np.array([0, 0, 1, 0, 1, 0, 1] * 3)
    w = np.array([0.7, 0.3])
    r = stratified(a, n, la, ln, w)
    means_a = [a[la == k].mean() for k in (0, 1)]
    means_n = [n[ln == k].mean() for k in (0, 1)]
    assert r.means_a == pytest.approx(means_a) and r.means_n == pytest.approx(means_n)
    assert r.diff == pytest.approx(0.7 * (means_a[0] - means_n[0]) + 0.3 * (means_a[1] - means_n[1]))
    assert r.mean_a == pytest.approx(0.7 * means_a[0] + 0.3 * means_a[1])
    assert r.lo < r.diff < r.hi


def _run(rng: np.random.Generator, share: float, shift: float = 0.0, steps: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Steps of two kinds (prefill 3× longer, in Markov bursts of 8), 5 % noise; `shift`: the
    decode steps' relative change."""
    kind = step_kinds(rng, steps, share, 8.0)
    x = np.where(kind, 3.0, 1.0 + shift) * rng.lognormal(0.0, 0.05, steps)
    return x, kind.astype(np.int64)


def _weights(la: np.ndarray, ln: np.ndarray) -> np.ndarray:
    return np.bincount(np.concatenate([la, ln]), minlength=2) / (la.size + ln.size)


def test_bursts_of_one_law_reject_at_about_alpha() -> None:
    """Both runs draw their kinds of step in Markov bursts from one law: the stratified tests
    reject at about α (the pooled tests, with the dependence correction, hold too; without it
    they reject several times as often)."""
    rng = np.random.default_rng(11)
    rejected, pairs = np.zeros(2), 0
    for _ in range(300):
        (a, la), (n, ln) = _run(rng, 0.15), _run(rng, 0.15)
        if min(np.bincount(la, minlength=2).min(), np.bincount(ln, minlength=2).min()) < 10:
            continue
        r = stratified(a, n, la, ln, _weights(la, ln))
        rejected += [r.p_mean <= 0.05, r.p_rank <= 0.05]
        pairs += 1
    assert pairs >= 250 and (rejected / pairs <= 0.08).all(), (rejected, pairs)


def test_a_change_of_mix_alone_is_no_change_kind_with_kind() -> None:
    """Prefill steps 15 % → 40 % and nothing else: the pooled means differ (Welch's test as for
    independent cycles rejects), the kinds compared with each other do not; a decode step 5 %
    slower under the same change of mix is found."""
    rng = np.random.default_rng(5)
    (n, ln), (a, la) = _run(rng, 0.15, steps=600), _run(rng, 0.40, steps=600)
    w = _weights(la, ln)
    assert stats.compare_samples(a, n, floor=1e-3).p_welch < 1e-3
    r = stratified(a, n, la, ln, w)
    assert r.p_mean > 0.05 and r.p_rank > 0.05
    (a5, la5) = _run(np.random.default_rng(5), 0.40, shift=0.05, steps=600)
    assert stratified(a5, n, la5, ln, _weights(la5, ln)).p_rank < 1e-6


def test_complete_separation_in_every_stratum_is_tested_by_the_means() -> None:
    """Every abnormal value above every normal one in each kind: the placements do not vary;
    the p is then the means' (tiny), not n/a."""
    rng = np.random.default_rng(2)
    n = np.concatenate([rng.uniform(1.0, 1.1, 30), rng.uniform(3.0, 3.1, 20)])
    a = n + 1.0
    labels = np.repeat([0, 1], [30, 20])
    r = stratified(a, n, labels, labels, np.array([0.6, 0.4]))
    assert r.p_rank == r.p_mean < 1e-10
