"""What makes a significant change material, for functions that run in some cycles only: own
time per cycle is zero where a function skips a cycle, so a change in how many cycles it runs
in (the prefill share of a serving loop) dilutes Cliff's δ; Cohen's h of that share counts too
(docs/STATISTICS.md, "Significant and material")."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_direction import decode_loop

import perfdiff
from perfdiff.analyze.findings import material_change
from perfdiff.analyze.verdict import VerdictCode
from perfdiff.ranks.across import RankTest
from perfdiff.stats import cohens_h


def _verdict(tmp_path: Path, share_n: float, share_a: float, seeds: tuple[int, int], n: int = 300):
    a = decode_loop(tmp_path / f"n{seeds[0]}", seed=seeds[0], prefill_share=share_n, attention_us=30.0, n=n)
    b = decode_loop(tmp_path / f"a{seeds[1]}", seed=seeds[1], prefill_share=share_a, attention_us=30.0, n=n)
    return perfdiff.compare(a, b)


def test_more_prefill_steps_are_added_work(tmp_path: Path) -> None:
    """Prefill GEMMs in 24 % of the steps against 12 %: the mean step 31 % slower, the prefill
    kernels +23 pp of the cycle (q 0.001), but δ 0.12.  The verdict read "no material change"."""
    c = _verdict(tmp_path, 0.10, 0.25, (3, 4))
    first = c.verdict[0]
    assert first.code == VerdictCode.NEW_WORK
    assert [c.findings[i].function for i in first.evidence] == ["gemm_prefill_kernel"]
    f = next(f for f in c.analysis.functions if f.name == "gemm_prefill_kernel")
    assert abs(f.t.cliffs_delta) < 0.147 and cohens_h(f.presence_a, f.presence_n) >= 0.2


def test_a_prefill_share_tripled_is_named_at_every_seed(tmp_path: Path) -> None:
    """5 % → 15 % of the steps, 300 steps a run: named in each of four seed pairs (none
    before: δ stays near 0.1 when nine steps in ten hold no prefill)."""
    for s in range(4):
        assert _verdict(tmp_path, 0.05, 0.15, (300 + s, 400 + s)).verdict[0].code == VerdictCode.NEW_WORK


@pytest.mark.parametrize("share", [0.05, 0.2, 0.3])
def test_the_same_prefill_share_stays_quiet(tmp_path: Path, share: float) -> None:
    """Null pairs: the same share in both runs, with the sampling spread of the share itself
    (0.21 against 0.15 at one seed) and no change material."""
    for s in range(3):
        c = _verdict(tmp_path, share, share, (100 + s, 200 + s), n=120 * (s + 1))
        assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL]


def test_cohens_h() -> None:
    assert cohens_h(0.25, 0.10) == pytest.approx(2 * math.asin(0.5) - 2 * math.asin(math.sqrt(0.1)))
    assert cohens_h(0.10, 0.25) == pytest.approx(-cohens_h(0.25, 0.10))
    assert cohens_h(0.3, 0.3) == 0.0 and cohens_h(1.0, 0.0) == pytest.approx(math.pi)
    assert math.isnan(cohens_h(1.5, 0.2)) and math.isnan(cohens_h(0.2, math.nan))


@pytest.mark.parametrize(("tau", "delta", "h", "expected"), [
    (5.0, 0.30, math.nan, True),  # δ large enough alone
    (5.0, 0.10, 0.30, True),  # δ diluted, the share of cycles moved with τ
    (5.0, 0.10, -0.30, False),  # the share moved against τ: not what made it grow
    (5.0, 0.10, 0.15, False),  # neither effect of small size
    (-5.0, -0.10, -0.30, True),  # faster: ran in fewer cycles
    (0.5, 0.90, 0.90, False),  # under 1 pp of the cycle
    (5.0, math.nan, math.nan, True),  # δ unknown: τ alone
])
def test_material_change(tau: float, delta: float, h: float, expected: bool) -> None:
    assert material_change(tau, delta, h) is expected


def test_a_rank_test_is_material_by_the_same_rule() -> None:
    """Runs of many ranks judge each (function, rank) test as a pair judges a cause."""
    base = dict(rank=0, function="gemm_prefill_kernel", kind="kernel", delta_us=200.0, tau_pp=5.0, p=1e-4,
                cliffs_delta=0.1, q=1e-3)
    assert RankTest(**base, presence_h=0.3).changed(0.05)
    assert not RankTest(**base, presence_h=-0.3).changed(0.05)
    assert not RankTest(**base).changed(0.05)
