"""Matched cycles: when cycle i of both runs does the same work, functions are tested on their
paired differences.  Simulations where the truth is known: a triangular loop (Gaussian
elimination: the work of cycle i falls with i) replayed with independent noise stays quiet,
and finds an 8 % change in one of its kernels that independent tests miss."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_segment_attribute import k, run_of

from perfdiff import stats
from perfdiff.analyze import FindingCode
from perfdiff.analyze.compare import compare_runs
from perfdiff.analyze.findings import build_findings
from perfdiff.attribute import attribute_activity
from perfdiff.cycles import cut_cycles, plan_pair, summarize_cycles

CYCLES = 300


def triangular_run(seed: int, fan2_scale: float = 1.0, noise: float = 0.03) -> object:
    """Fan1 (constant) then Fan2 (work ∝ cycles left) each cycle, both with independent noise."""
    rng = np.random.default_rng(seed)
    rows, t = [], 1_000
    for i in range(CYCLES):
        fan1 = 5_000 * (1 + noise * rng.standard_normal())
        fan2 = 2_000 * (CYCLES - i) * fan2_scale * (1 + noise * rng.standard_normal())
        rows.append(k("Fan1", t, t + int(fan1)))
        t += int(fan1) + 2_000
        rows.append(k("Fan2", t, t + int(fan2)))
        t += int(fan2) + 2_000
    return run_of(rows)


def compare(a, b):
    plan = plan_pair(summarize_cycles(a), summarize_cycles(b))
    cn, ca = cut_cycles(a, plan), cut_cycles(b, plan)
    c = compare_runs(a, b, cn, ca, plan=plan, matrices=(attribute_activity(a, cn), attribute_activity(b, ca)))
    return c


def fan2(c):
    return next(f for f in c.functions if f.name == "Fan2")


def test_a_replayed_triangular_loop_is_matched_and_finds_an_8_percent_kernel_change() -> None:
    c = compare(triangular_run(1), triangular_run(2, fan2_scale=0.92))
    assert c.matched and c.match_rho > 0.99
    f = fan2(c)
    assert f.t.mwu_method == "signed-rank" and f.q_t <= 1e-10 and f.t.hl < 0
    causes = [x for x in build_findings(c) if x.code == FindingCode.CAUSE]
    assert causes and causes[0].function == "Fan2"
    # The same rows tested as independent samples: the triangular spread hides the change.
    from perfdiff.analyze.compare import NS_PER_US

    from test_segment_attribute import segment_cycles
    a, b = triangular_run(1), triangular_run(2, fan2_scale=0.92)
    ma, mb = attribute_activity(a, segment_cycles(a)), attribute_activity(b, segment_cycles(b))
    row = list(ma.keys["name"]).index("Fan2")
    unpaired = stats.compare_samples(mb.own_ns[row] / NS_PER_US, ma.own_ns[row] / NS_PER_US, floor=1e-3)
    assert unpaired.p_mwu > 0.05


@pytest.mark.parametrize("seed", range(20))
def test_replayed_null_pairs_stay_quiet(seed: int) -> None:
    """The same program twice with independent noise: matched, and no function named in at
    least 19 of 20 seeds (checked one seed per case: each must be quiet at q ≤ α, which
    the 20 together hold to a family-wise rate far below 1 in 20)."""
    c = compare(triangular_run(100 + 2 * seed), triangular_run(101 + 2 * seed))
    assert c.matched
    assert not [f.name for f in c.functions if f.tested and f.q_t <= c.alpha]


def test_independent_cycles_are_not_matched() -> None:
    """Stationary work with independent noise: cycle i of one run has nothing to do with cycle
    i of the other (ρ ≈ 0), so the tests stay independent."""
    def flat(seed: int) -> object:
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for _ in range(CYCLES):
            d = int(50_000 * (1 + 0.1 * rng.standard_normal()))
            rows += [k("A", t, t + 5_000), k("B", t + 6_000, t + 6_000 + d)]
            t += d + 10_000
        return run_of(rows)
    c = compare(flat(1), flat(2))
    assert not c.matched and abs(c.match_rho) < 0.3
    assert fan_method(c) == "exact" or fan_method(c) == "asymptotic"


def fan_method(c) -> str:
    return next(f for f in c.functions if f.name == "B").t.mwu_method


def test_unequal_cycle_counts_are_not_matched() -> None:
    matched, rho = stats.cycles_match(np.arange(20.0), np.arange(21.0))
    assert not matched and math.isnan(rho)


def test_paired_statistics_on_literal_pairs() -> None:
    n = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0])
    a = n * 1.1
    r = stats.compare_paired(a, n, floor=0.0)
    # every difference positive: the exact two-sided signed-rank p is 2 / 2^10
    assert r.p_mwu == pytest.approx(2 / 2**10) and r.mwu_method == "signed-rank"
    assert r.hl == pytest.approx(np.median([(x + y) / 2 for i, x in enumerate(a - n) for y in (a - n)[i:]]))
    assert r.cliffs_delta == 1.0 and r.hl_lo <= r.hl <= r.hl_hi
    same = stats.compare_paired(n, n, floor=0.0)
    assert same.p_mwu == 1.0 and same.mwu_method == "all-tied" and same.hl == 0.0
    with pytest.raises(ValueError):
        stats.compare_paired(n, n[:5], floor=0.0)


@pytest.mark.real
def test_rodinia_pair_is_matched_and_tested_paired(real: Path) -> None:
    import perfdiff

    rodinia = real / "kmcho2019/Rodinia_3.1_Gaussian"
    c = perfdiff.compare(rodinia / "report3.sqlite", rodinia / "report2.sqlite")
    assert c.analysis.matched and c.analysis.match_rho > 0.9
    md = c.to_markdown()
    assert "Cycles are matched" in md and "Wilcoxon signed-rank p" in md and "signed-rank p(β)" in md


@pytest.mark.parametrize("seed", range(6))
def test_signed_rank_p_agrees_with_scipy(seed: int) -> None:
    import scipy.stats as sps

    rng = np.random.default_rng(seed)
    small = rng.standard_normal(12) + 0.3  # untied: the exact distribution
    assert stats.paired.signed_rank_p(small) == pytest.approx(
        sps.wilcoxon(small, method="exact").pvalue, rel=1e-9)
    big = np.round(rng.standard_normal(400) + 0.1, 1)  # ties: the corrected normal approximation
    big = big[big != 0]
    assert stats.paired.signed_rank_p(big) == pytest.approx(
        sps.wilcoxon(big, method="approx", correction=True).pvalue, rel=1e-9)


def test_ranks_and_match_p_agree_with_scipy() -> None:
    import scipy.stats as sps

    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal(500), 1)  # many ties
    assert np.array_equal(stats.paired.average_ranks(x), sps.rankdata(x))
    x = np.round(rng.standard_normal(500), 3)  # a few ties
    y = x + rng.standard_normal(500)
    matched, rho = stats.cycles_match(x, y)
    assert rho == pytest.approx(sps.spearmanr(x, y).statistic, rel=1e-12) and matched


def test_fixed_windows_are_not_matched() -> None:
    """Windows are all one length but the last: their ranks are ties, whose correlation of 1
    says nothing about the work."""
    assert stats.cycles_match(np.array([1e8] * 20 + [7e7]), np.array([1e8] * 20 + [6e7])) == (False, pytest.approx(
        float("nan"), nan_ok=True))


def test_the_paired_ci_narrows_with_the_cycles() -> None:
    """Beyond the exact Walsh averages (thinned to quantiles) the CI still shrinks as 1/√K."""
    rng = np.random.default_rng(0)
    widths = []
    for size in (5_000, 100_000):
        n = np.full(size, 10.0)
        r = stats.compare_paired(n + rng.normal(0.1, 1.0, size), n, floor=0.0)
        widths.append(r.hl_hi - r.hl_lo)
        assert r.hl_lo < 0.1 < r.hl_hi
    assert widths[1] < widths[0] / 3


def test_a_significant_but_tiny_change_is_negligible_not_a_cause() -> None:
    """Back-to-back runs differ a little for real: a 10 % slower function worth 0.5 % of the
    cycle is significant with 300 cycles, but it is no cause ("no material cause")."""
    def run(seed: int, tiny_us: float):
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for _ in range(CYCLES):
            big = int(1_000_000 * (1 + 0.02 * rng.standard_normal()))
            tiny = int(tiny_us * 1_000 * (1 + 0.01 * rng.standard_normal()))
            rows += [k("mark", t, t + 1_000), k("big", t + 2_000, t + 2_000 + big),
                     k("tiny", t + 3_000 + big, t + 3_000 + big + tiny)]
            t += big + tiny + 10_000
        return run_of(rows)
    c = compare(run(1, 5.0), run(2, 5.5))
    tiny = next(f for f in c.functions if f.name == "tiny")
    assert tiny.q_t <= 0.05 and abs(tiny.tau_pp) < 1.0
    found = build_findings(c)
    assert not [x for x in found if x.code == FindingCode.CAUSE and x.function == "tiny"]
    neg = [x for x in found if x.code == FindingCode.NEGLIGIBLE]
    assert neg and c.functions[neg[0].related[0]].name == "tiny"


def test_a_quarter_of_the_cycles_stalling_is_headlined_by_throughput_and_tail() -> None:
    """The abnormal run: most cycles as before, every fourth one 5x longer, spent in one
    function; the median holds.  The headline says throughput and tail got worse and the
    function that holds the stall is the first cause (not "moved against" the change)."""
    from perfdiff.render.text import NameTable
    from perfdiff.render.wording import finding_text

    def run(seed: int, stall: bool):
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for i in range(CYCLES):
            # the abnormal run's ordinary cycles 2 % faster: its median falls a little
            work = int((980_000 if stall else 1_000_000) * (1 + 0.01 * rng.standard_normal()))
            rows += [k("mark", t, t + 1_000), k("work", t + 2_000, t + 2_000 + work)]
            t += 2_000 + work
            wait = 4_000_000 if stall and i % 4 == 0 else 0
            rows.append(k("stall", t, t + wait + 1_000))
            t += wait + 1_000 + 10_000
        return run_of(rows)
    c = compare(run(1, False), run(2, True))
    found = build_findings(c)
    head = finding_text(c, found[0], NameTable.plain())
    assert -5 < found[0].evidence.change_pct < 0 and found[0].evidence.throughput_change_pct < -40
    assert "throughput -" in head and "changed shape" in head
    causes = [x for x in found if x.code == FindingCode.CAUSE]
    assert causes and causes[0].function == "stall"
    assert not [x for x in found if x.code == FindingCode.OPPOSITE and c.functions[x.related[0]].name == "stall"]


def test_every_kernel_slower_per_call_is_one_device_wide_finding() -> None:
    """A GPU-bound loop whose every kernel runs x1.35 per call (a clock cut): one device-wide
    finding comes first, not five kernel regressions, and the host's wait is a symptom."""
    names = ["k1", "k2", "k3", "k4", "k5"]
    per_call = [300_000, 200_000, 500_000, 100_000, 400_000]

    def run(seed: int, scale: float):
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for _ in range(CYCLES):
            t0 = t
            for name, d in zip(names, per_call, strict=True):
                dur = int(d * scale * (1 + 0.01 * rng.standard_normal()))
                rows.append(k(name, t, t + dur))
                t += dur + 1_000
            rows.append(k("cudaStreamSynchronize", t0, t, kind="api", device="Host"))
            t += 20_000
        return run_of(rows)
    c = compare(run(1, 1.0), run(2, 1.35))
    found = build_findings(c)
    assert found[1].code == FindingCode.DEVICE_WIDE and found[1].device == "GPU 0"
    assert 1.3 < found[1].evidence.ratio < 1.4 and found[1].evidence.absorbed == 5
    assert not [x for x in found if x.code == FindingCode.CAUSE and x.function in names]
    assert not [x for x in found if x.code == FindingCode.NO_CAUSE]
    from perfdiff.render.text import NameTable
    from perfdiff.render.wording import finding_text

    assert "Device-wide: every busy kernel on GPU 0 took ×1.35 per call" in finding_text(c, found[1],
                                                                                       NameTable.plain())


def test_tail_quantile_ci_covers_the_true_quantile() -> None:
    """The distribution-free CI of P95 covers the true P95 of an exponential in about 95 % of
    600 samples of 300, and is n/a on a sample too small to bound it."""
    rng = np.random.default_rng(11)
    true = -math.log(0.05)
    hits = 0
    for _ in range(600):
        lo, hi = stats.quantile_ci(rng.exponential(size=300), 0.95)
        hits += lo <= true <= hi
    assert 0.92 <= hits / 600 <= 0.98
    assert all(math.isnan(v) for v in stats.quantile_ci(np.arange(10.0), 0.95))
