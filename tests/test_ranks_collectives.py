"""The collectives' own time across ranks (perfdiff.ranks.collectives) and the verdict it
feeds: a slower transfer on every rank, a straggler left out of the comparison, a straggler
inside it (its victims' longer kernels are waits, not a slower collective), null pairs; and
the verdict's last resorts (unexplained, no change) on literal records."""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from perfdiff.ranks import RankNoticeCode, RankVerdictCode, StragglerCode, compare_ranks
from perfdiff.ranks.across import rank_verdict
from perfdiff.ranks.records import CollectiveTime, RankCycle, RankNotice, Straggler
from perfdiff.render.ranks import notice_line, rank_markdown, ranks_text, verdict_line
from perfdiff.render.text import NameTable

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402

PLAIN = NameTable.plain()  # the verdict's lines worded outside a report: every name its plain cut

SMALL = dict(ranks=4, kernels=1_200, steps=16, collectives=3)


def _compare(tmp: Path, seed: int = 1, ranks: str | None = None, abnormal_file: str | None = None,
             window: str | None = None, **plant):
    n, a = gen_ranks.generate(tmp, fmt="kineto", plant=gen_ranks.Plant(**plant), seed=seed, **SMALL)
    if abnormal_file:
        a = a / abnormal_file
    return compare_ranks(n, a, ranks=ranks, window=window, workers=1, processes=False), (str(n), str(a))


def test_a_slower_transfer_on_every_rank_is_the_collectives(tmp_path: Path) -> None:
    """Every all-reduce's transfer ×3: no straggler, no function of the ranks' own; the
    collectives' own time grew by what was planted on all ranks."""
    res, labels = _compare(tmp_path, xfer_factor=3.0)
    assert [v.code for v in res.verdict] == [RankVerdictCode.COLLECTIVES]
    v = res.verdict[0]
    assert v.ranks == (0, 1, 2, 3) and v.others == () and res.stragglers[1].code != StragglerCode.CULPRIT
    planted = gen_ranks.XFER_US * 2.0 * SMALL["collectives"]  # µs more per cycle
    assert res.collectives.changed and res.collectives.delta_us == pytest.approx(planted, rel=0.1)
    text = rank_markdown(res, labels)
    assert "**collectives slower on all 4 ranks compared**" in text and "not compared" not in text


@pytest.mark.parametrize("how", ["--ranks", "one file"])
def test_a_straggler_left_out_is_named_as_a_possible_cause(tmp_path: Path, how: str) -> None:
    """Rank 1 is the straggler but not compared: the ranks compared only wait longer in their
    collectives; before, the verdict read "no change" beside a cycle 3× longer."""
    if how == "--ranks":
        res, labels = _compare(tmp_path, straggler=1, ranks="0,2-3")
        compared, left = (0, 2, 3), (1,)
    else:
        res, labels = _compare(tmp_path, straggler=1, abnormal_file="rank-0.json")
        compared, left = (0,), (1, 2, 3)
    assert [v.code for v in res.verdict] == [RankVerdictCode.COLLECTIVES]
    assert res.verdict[0].ranks == compared and res.verdict[0].others == left and res.collectives.tau_pp > 50
    line = verdict_line(res.verdict[0], PLAIN, res.collectives)
    assert line.startswith("**more time in collectives on ")  # not "slower": the likelier cause is the rank
    assert ("Either the abnormal run's rank 1, not compared, arrives late" in line if how == "--ranks"
            else "Either the abnormal run's ranks 1–3, not compared, arrive late" in line)


@pytest.mark.parametrize("fmt,tp", [("nsys", 1), ("kineto", 2), ("nsys", 2)])
def test_a_slower_transfer_in_other_forms(tmp_path: Path, fmt: str, tp: int) -> None:
    """nsys exports, and tensor × data parallel communicators (named in the Kineto args and in
    NCCL's NVTX payloads): the own time is each communicator's, summed."""
    n, a = gen_ranks.generate(tmp_path, fmt=fmt, plant=gen_ranks.Plant(xfer_factor=3.0), tp=tp, **SMALL)
    res = compare_ranks(n, a, workers=1, processes=False)
    per_cycle = SMALL["collectives"] + (1 if tp > 1 else 0)  # tp > 1: one more all-reduce per step
    assert [v.code for v in res.verdict] == [RankVerdictCode.COLLECTIVES]
    assert res.collectives.delta_us == pytest.approx(gen_ranks.XFER_US * 2.0 * per_cycle, rel=0.1)
    assert res.collectives.count_n == res.collectives.count_a == per_cycle


def test_more_collectives_per_cycle_are_not_called_slower(tmp_path: Path) -> None:
    """Twice as many all-reduces of the same size (a job change: bucket sizes, sharding): the
    own time doubles, and the verdict says it is their number."""
    n, _ = gen_ranks.generate(tmp_path / "four", fmt="kineto", **SMALL)
    _, a = gen_ranks.generate(tmp_path / "six", fmt="kineto", **{**SMALL, "collectives": 6})
    res = compare_ranks(n, a, workers=1, processes=False)
    assert [v.code for v in res.verdict] == [RankVerdictCode.COLLECTIVES]
    assert (res.collectives.count_n, res.collectives.count_a) == (3, 6)
    line = verdict_line(res.verdict[0], PLAIN, res.collectives)
    assert line.startswith("**more time in collectives on all 4 ranks compared**") and "slower" not in line
    assert "A cycle holds 3 → 6 collectives, each " in line and "the job issues more or fewer of them" in line
    c = res.collectives
    assert c.mean_n_us / c.count_n == pytest.approx(gen_ranks.XFER_US, rel=0.05)
    assert c.mean_a_us / c.count_a == pytest.approx(gen_ranks.XFER_US, rel=0.05)


def test_ranks_left_out_are_named_as_the_abnormal_runs(tmp_path: Path) -> None:
    """Paired by --ranks 0:4,…: the ranks left out are numbered as the abnormal run numbers
    them, and said so; a straggler that only relays a wait for them is not given an excess."""
    n, a = gen_ranks.generate(tmp_path / "eight", fmt="kineto", plant=gen_ranks.Plant(straggler=1),
                              **{**SMALL, "ranks": 8})
    res = compare_ranks(n, a, ranks="0:4,1:5,2:6,3:7", workers=1, processes=False)
    assert res.verdict[0].code == RankVerdictCode.COLLECTIVES and res.verdict[0].others == (0, 1, 2, 3)
    assert "Either the abnormal run's ranks 0–3, not compared, arrive late" in verdict_line(res.verdict[0], PLAIN)
    # Three or more ranks in a row read as a range; beyond 16 numbers or ranges, a sentence says
    # how many ranks, names the first 16 and how many more, as the notices do.
    assert "Either the abnormal run's ranks 40–59, not compared" in verdict_line(
        dataclasses.replace(res.verdict[0], others=tuple(range(40, 60))), PLAIN)
    many = (1, 2, *range(4, 60, 2), 100, 101, 102)
    first = "1, 2, " + ", ".join(str(r) for r in range(4, 32, 2))
    assert (f"Either the abnormal run's 33 ranks ({first} and 17 more), not compared, arrive late"
            in verdict_line(dataclasses.replace(res.verdict[0], others=many), PLAIN))
    assert notice_line(RankNotice(RankNoticeCode.UNCUT, many, "abnormal")).startswith(
        f"The abnormal run's 33 ranks ({first} and 17 more) have too few")
    # One more than 16 is listed: "and 1 more" would be no shorter.
    assert ranks_text(tuple(range(0, 34, 2)), 0) == "ranks " + ", ".join(str(r) for r in range(0, 32, 2)) + " and 32"
    assert ranks_text((3, 3, 1, 2), 0) == "ranks 1–3" and ranks_text((7, 7), 2) == "rank 7"
    n, a = gen_ranks.generate(tmp_path / "tp", fmt="kineto", plant=gen_ranks.Plant(straggler=1), tp=2, **SMALL)
    res = compare_ranks(n, a, ranks="0,2-3", workers=1, processes=False)
    s = res.verdict[0]
    assert s.code == RankVerdictCode.STRAGGLER and s.ranks == (0,) and s.excess is None and s.others == (1,)
    line = verdict_line(s, PLAIN)
    assert line.startswith("**rank 0 arrives last**") and "rank 0 may only pass on a wait for it" in line


def test_ranks_paired_under_other_numbers_read_in_the_normal_runs(tmp_path: Path) -> None:
    """--ranks 0:1,1:0,2:3,3:2 with the abnormal run's rank 2 the straggler: the verdict and
    the rank table number it as its pair (normal rank 3), saying which it is in the abnormal
    run, and its victims wait for rank 3 — the row that holds its data loader."""
    res, labels = _compare(tmp_path, straggler=2, ranks="0:1,1:0,2:3,3:2")
    text = rank_markdown(res, labels)
    assert "**straggler: rank 3 (the abnormal run's rank 2)**" in text
    rows = {r.rank: r for r in res.rows}
    assert rows[3].cause is not None and "DataLoader" in rows[3].cause
    assert all(rows[r].waited for r in (0, 1, 2)) and text.count("waits in collectives (for rank 3)") == 3


def test_runs_of_other_world_sizes_say_so(tmp_path: Path) -> None:
    """8 ranks against 2, paired by --ranks all: the normal run's collectives also wait for its
    six ranks not compared, and the verdict puts it down to the world sizes, not the network."""
    n, a = gen_ranks.generate(tmp_path, fmt="kineto", normal_ranks=8, **{**SMALL, "ranks": 2})
    res = compare_ranks(n, a, ranks="all", workers=1, processes=False)
    v = next(v for v in res.verdict if v.code == RankVerdictCode.COLLECTIVES)
    line = verdict_line(v, PLAIN, res.collectives, (res.world_n, res.world_a))
    assert "The runs' world sizes differ (8 and 2)" in line and "network" not in line


def test_a_straggler_compared_leaves_the_collectives_own_time(tmp_path: Path) -> None:
    """Its victims' NCCL kernels grow by their wait for it: that is the straggler, not a
    slower collective."""
    res, _ = _compare(tmp_path, straggler=2)
    assert res.verdict[0].code == RankVerdictCode.STRAGGLER
    assert RankVerdictCode.COLLECTIVES not in [v.code for v in res.verdict]
    assert not res.collectives.changed and abs(res.collectives.tau_pp) < 1.0


def test_a_victims_wait_comes_before_a_smaller_change_of_its_own(tmp_path: Path) -> None:
    """Every rank's GEMMs ×1.5 and rank 3's data loader ×2: the victims' cycles grew mostly by
    their wait for rank 3 (2 ms), more than by their GEMM (0.45 ms); the table says both, the
    wait first."""
    res, labels = _compare(tmp_path, straggler=3, dataloader_factor=2.0, slow=[("gemm", 1.5)])
    victims = [r for r in res.rows if r.rank != 3]
    assert all(r.waited and r.cause is not None and "gemm" in r.cause for r in victims)
    assert rank_markdown(res, labels).count("| waits in collectives (for rank 3), then ampere\\_sgemm") == 3


def test_a_straggler_that_went_away_is_said(tmp_path: Path) -> None:
    """The runs swapped (the straggler in the normal run only): the verdict says it is gone,
    first, before its data loader's own change."""
    n, a = gen_ranks.generate(tmp_path, fmt="kineto", plant=gen_ranks.Plant(straggler=1), **SMALL)
    res = compare_ranks(a, n, workers=1, processes=False)
    v = res.verdict[0]
    assert v.code == RankVerdictCode.STRAGGLER_GONE and v.ranks == (1,) and v.size_us > 10_000
    assert verdict_line(v, PLAIN).startswith("**straggler gone: rank 1**: in the normal run the other ranks waited")
    assert "(its excess in input (data loading))" in verdict_line(v, PLAIN)


def test_a_null_pair_has_no_victims(tmp_path: Path) -> None:
    res, _ = _compare(tmp_path)
    assert not any(r.waited for r in res.rows)


def test_null_pairs_stay_quiet(tmp_path: Path) -> None:
    """Eight null pairs (other seeds): the collectives' own time never reads as changed."""
    for seed in range(2, 10):
        res, _ = _compare(tmp_path / str(seed), seed=seed)
        assert not res.collectives.changed, seed
        assert [v.code for v in res.verdict] == [RankVerdictCode.NO_CHANGE], seed


def test_cycles_that_are_not_iterations_match_no_collectives(tmp_path: Path) -> None:
    """Time windows fall where each rank's timing puts them: no straggler analysis and no
    collectives' own time, said with the plan (before, windows read 'collectives slower on all
    4 ranks' for a straggler's pair)."""
    res, labels = _compare(tmp_path, straggler=1, window="5ms")
    assert RankNoticeCode.CYCLES_NOT_ITERATIONS in [n.code for n in res.notices]
    assert all(s.code == StragglerCode.NOT_ITERATIONS for s in res.stragglers)
    assert not res.collectives.changed and math.isnan(res.collectives.delta_us)
    assert RankVerdictCode.COLLECTIVES not in [v.code for v in res.verdict]
    text = rank_markdown(res, labels)
    head, verdict = text.split("**Verdict:**")[0], text.split("**Verdict:**")[1].split("## 1.")[0]
    assert "**These cycles are time windows or the spans between idle gaps, not iterations" in head
    assert "per cycle k, the median over ranks" in head and "per iteration" not in head
    # Findings are per window, not "slower" / "faster"; no straggler is claimed absent.
    assert "slower on" not in verdict and "faster on" not in verdict and "no straggler" not in verdict


def _straggler(side: str) -> Straggler:
    return Straggler(side=side, code=StragglerCode.NO_SKEW, culprit=None, cycles=40, collectives=4, skew_us=10.0,
                     p_last=0.5, waits=())


def test_a_cycle_change_nothing_explains_is_not_no_change() -> None:
    stragglers = (_straggler("normal"), _straggler("abnormal"))
    grew = RankCycle(10_000.0, 12_000.0, 20.0, 1e-6, 40, 40)
    out = rank_verdict([], stragglers, cycle=grew, compared=(0, 1), left_out=(2,))
    assert [v.code for v in out] == [RankVerdictCode.UNEXPLAINED] and out[0].size_us == 2_000.0
    line = verdict_line(out[0], PLAIN, CollectiveTime(*[math.nan] * 6, reason="neither run has NCCL kernels"))
    assert "unexplained on the ranks compared" in line and "The abnormal run's rank 2 was not compared" in line
    assert "(the collectives' own time is not measured: neither run has NCCL kernels)" in line
    # Not significant, or not material (under 1 %): no change, on the ranks compared.
    for cycle in (RankCycle(10_000.0, 12_000.0, 20.0, 0.3, 40, 40), RankCycle(10_000.0, 10_050.0, 0.5, 1e-6, 40, 40)):
        out = rank_verdict([], stragglers, cycle=cycle, compared=(0,))
        assert [v.code for v in out] == [RankVerdictCode.NO_CHANGE] and out[0].world == 1
        assert "on the rank compared, nor in the job's cycle" in verdict_line(out[0], PLAIN)
    assert math.isnan(out[0].size_us)


def test_long_names_alike_read_apart_and_are_listed_in_full(tmp_path: Path) -> None:
    """Two findings of kernels alike but for a template argument in their middle read apart
    in the verdict, the rank table and the findings, and the report lists them in full."""
    import dataclasses

    from perfdiff.ranks.records import RankFinding, ScopeCode

    res, labels = _compare(tmp_path, seed=3)
    kernel = "void gemm_kernel<" + "float, " * 12 + "{}>(" + "const float*, " * 12 + "int)"
    a, b = kernel.format("2ul"), kernel.format("5ul")
    findings = tuple(RankFinding(ScopeCode.ALL_RANKS, name, "kernel", (0, 1, 2, 3), 4, d, d / 100, 0.001)
                     for name, d in ((a, 900.0), (b, -600.0)))
    rows = tuple(dataclasses.replace(r, cause=a if r.rank % 2 else b, cause_kind="kernel") for r in res.rows)
    text = rank_markdown(dataclasses.replace(res, findings=findings, rows=rows), labels)
    assert "2ul&gt;(" in text and "5ul&gt;(" in text  # the part that tells them apart is shown
    listed = text[text.index("<summary>Function names in full</summary>"):]
    assert listed.count("<code>void gemm_kernel") == 2


def test_q_values_keep_every_other_field_of_a_test() -> None:
    """with_q rebuilds each test with its q-value: every other field comes through as it was."""
    import dataclasses

    from perfdiff.ranks.across import RankTest, with_q

    tests = [RankTest(rank=r, function=f"f{r}", kind="kernel", delta_us=10.0 * r, tau_pp=0.5 * r, p=p,
                      cliffs_delta=-0.25 * r) for r, p in enumerate((0.001, 0.2, 0.04))]
    out = with_q(tests)
    assert [t.q for t in out] == pytest.approx([0.003, 0.2, 0.06])
    keep = [f.name for f in dataclasses.fields(RankTest) if f.name != "q"]
    assert [[getattr(t, k) for k in keep] for t in out] == [[getattr(t, k) for k in keep] for t in tests]
