"""Runs of many ranks: discovery and pairing, the straggler analysis, findings across ranks,
the Dask fan-out (an explicitly started LocalCluster by address, and the local path), and the
one-line refusals.  Inputs come from bench/gen_ranks.py, generated small in tmp_path."""
from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli
import perfdiff
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.errors import InputError
from perfdiff.model.schema import CycleSource
from perfdiff.ranks import (ExcessKind, IdentitySource, RankNoticeCode, RankVerdictCode, ScopeCode, StragglerCode,
                            compare_ranks)
from perfdiff.ranks.discover import parse_rank_spec, rank_inputs

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402

SMALL = dict(ranks=4, kernels=1_200, steps=16, collectives=3)


@pytest.fixture(scope="module")
def scheduler():
    """The address of a dask.distributed LocalCluster started here (threads: quick to start)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                       silence_logs=logging.ERROR)
    yield cluster.scheduler_address
    cluster.close()


def _pair(tmp: Path, fmt: str = "kineto", **plant) -> tuple[Path, Path]:
    normal_ranks, late = plant.pop("normal_ranks", None), plant.pop("late", None)
    size = {**SMALL, "ranks": plant.pop("ranks", SMALL["ranks"])}
    shape = {"tp": plant.pop("tp", 1), "pg_args": plant.pop("pg_args", True)}
    return gen_ranks.generate(tmp, fmt=fmt, plant=gen_ranks.Plant(**plant), normal_ranks=normal_ranks, late=late,
                              **size, **shape)


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_planted_straggler_is_named_with_its_input_stall(tmp_path: Path, scheduler: str, fmt: str,
                                                         monkeypatch) -> None:
    n, a = _pair(tmp_path, fmt, straggler=2, dataloader_factor=10.0)
    res = compare_ranks(n, a, scheduler=scheduler)
    sn, sa = res.stragglers
    assert sa.code == StragglerCode.CULPRIT and sa.culprit == 2 and sa.excess == ExcessKind.INPUT
    assert sn.code != StragglerCode.CULPRIT  # the normal run has no straggler
    assert res.verdict[0].code == RankVerdictCode.STRAGGLER and res.verdict[0].ranks == (2,)
    # The victims wait in collectives; the culprit hardly.
    waits = {w.rank: w.wait_us for w in sa.waits}
    assert waits[2] < 0.1 * min(waits[r] for r in (0, 1, 3))
    row = next(r for r in res.rows if r.rank == 2)
    assert row.cause is not None and "DataLoader" in row.cause and not row.waited
    # The victims' cycles grew by their wait for it: their top cause says so.
    assert all(r.waited and r.cause is None for r in res.rows if r.rank != 2)
    assert "| waits in collectives (for rank 2) |" in render_ranks_table(res)
    want = IdentitySource.TRACE if fmt == "kineto" else IdentitySource.ENVIRONMENT
    assert [p.normal.source for p in res.pairs] == [want] * 4
    # Many ranks: the rank table shows the notable ones (the culprit first), all of them collapsed.
    import perfdiff.render.ranks as render_ranks

    monkeypatch.setattr(render_ranks, "MAX_RANK_ROWS", 2)
    text = render_ranks.rank_markdown(res, (str(n), str(a)))
    section = text[text.index("## 1. Ranks"):text.index("<details>")]
    assert "| 2 |" in section and "| 0 |" not in section and "All 4 ranks</summary>" in text
    # … and the rank mapping is summed up in a line, the table collapsed.
    mapping = text[text.index("## 4. Rank Mapping"):]
    how = "4 by trace" if fmt == "kineto" else "4 by launcher variables"
    assert mapping.split("\n")[2] == (f"4 pairs, each rank with the same rank of the other run. How the ranks were "
                                      f"identified: in N, {how}; in A, {how}.")
    assert "All 4 pairs</summary>" in mapping and mapping.index("| Rank |") > mapping.index("<details>")
    # The culprit's excess per kind, each in the unit that reads best ("0.00 ms" before).
    excess = re.search(r"\(per cycle: input \+[\d.]+ ms, compute ([^,]+), transfer ([^,]+), host ([^)]+)\)", text)
    assert excess and all(re.fullmatch(r"[+-]?[\d.]+ (ns|µs|ms)", x) for x in excess.groups()), text
    assert all(abs(float(x.split()[0])) >= 1 for x in excess.groups() if x.endswith(" ms"))  # else µs
    assert not any(x.startswith("-0 ") or (x.endswith(" ns") and abs(float(x.split()[0])) < 10)
                   for x in excess.groups())  # float residue reads 0


def render_ranks_table(res) -> str:
    from perfdiff.render.ranks import rank_markdown

    return rank_markdown(res, ("n", "a"))


def test_one_export_with_a_process_per_rank(tmp_path: Path, scheduler: str) -> None:
    n, a = _pair(tmp_path, "nsys-one", straggler=1)
    res = compare_ranks(n / "report.sqlite", a / "report.sqlite", ranks="all", scheduler=scheduler)
    assert [p.normal.source for p in res.pairs] == [IdentitySource.DEVICE] * 4  # a process per GPU
    # The export's launcher variables are one process's, not each rank's: no false alarm.
    assert not any(x.code == RankNoticeCode.IDENTITY_DIFFERS for x in res.notices)
    assert [p.normal.pid for p in res.pairs] == [4000, 4001, 4002, 4003]
    assert res.stragglers[1].culprit == 1
    # Two exports of one name: the title tells them apart by their folders.
    from perfdiff.render.ranks import rank_markdown

    title = rank_markdown(res, (str(n / "report.sqlite"), str(a / "report.sqlite"))).splitlines()[0]
    assert title == "# Cross-Rank Comparison: normal/report.sqlite vs abnormal/report.sqlite"
    # "." names its folder, not nothing.
    here = rank_markdown(res, (".", str(a / "report.sqlite"))).splitlines()[0]
    from perfdiff.render.text import md_escape

    assert here == f"# Cross-Rank Comparison: {md_escape(Path.cwd().name)} vs report.sqlite"
    # The directories that hold the exports read the same (they compared rank 0 only).
    again = compare_ranks(n, a, ranks="all", scheduler=scheduler)
    assert [p.normal.pid for p in again.pairs] == [4000, 4001, 4002, 4003] and again.stragglers[1].culprit == 1
    # Read as one process, the export says how to compare them all.
    from perfdiff.inputs import open_run

    notes = open_run(n / "report.sqlite").manifest["import"]["notes"]
    assert any("choose another with --pid, or compare each as a rank with --ranks all" in x for x in notes)


def test_a_kernel_slowed_on_every_rank_is_one_finding(tmp_path: Path, scheduler: str) -> None:
    n, a = _pair(tmp_path, slow=[("sgemm_128", 1.6)])
    res = compare_ranks(n, a, scheduler=scheduler)
    assert len(res.findings) == 1
    f = res.findings[0]
    assert f.code == ScopeCode.ALL_RANKS and f.ranks == (0, 1, 2, 3) and "sgemm" in f.function and f.delta_us > 0
    assert res.verdict[0].code == RankVerdictCode.ALL_RANKS
    from perfdiff.api import RankComparison

    text = RankComparison(res, (str(n), str(a))).to_markdown()
    assert "**slower on all 4 ranks**" in text


def test_a_kernel_slowed_on_one_rank_names_it(tmp_path: Path, scheduler: str) -> None:
    n, a = _pair(tmp_path, slow_rank=[(1, "sgemm_128", 1.6)])
    res = compare_ranks(n, a, scheduler=scheduler)
    some = [f for f in res.findings if "sgemm" in f.function]
    assert len(some) == 1 and some[0].code == ScopeCode.SOME_RANKS and some[0].ranks == (1,)
    assert any(v.code == RankVerdictCode.SOME_RANKS and v.ranks == (1,) for v in res.verdict)
    # Its slower GEMM makes rank 1 the straggler, its excess in compute.
    assert res.stragglers[1].culprit == 1 and res.stragglers[1].excess == ExcessKind.COMPUTE


def test_null_pair_finds_nothing(tmp_path: Path, scheduler: str) -> None:
    n, a = _pair(tmp_path)
    res = compare_ranks(n, a, scheduler=scheduler)
    assert res.findings == () and [v.code for v in res.verdict] == [RankVerdictCode.NO_CHANGE]
    assert all(s.code != StragglerCode.CULPRIT for s in res.stragglers)


def test_cli_through_a_cluster_by_address(tmp_path: Path, scheduler: str, capsys) -> None:
    """8 ranks, rank 3's data loader ×10: named the straggler, its input stall the cause."""
    n, a = _pair(tmp_path, straggler=3, ranks=8)
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", out, "--json", js], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "**straggler: rank 3**" in text and "its excess is in **input (data loading)**" in text
    assert "## 4. Rank Mapping" in text and "| 7 | 7: rank-7.json | trace |" in text
    doc = json.loads(js.read_text())
    assert doc["format"] == "perfdiff-rank-comparison" and doc["stragglers"][1]["culprit"] == 3
    assert err == ""  # no progress line when stderr is not a terminal


def test_a_cluster_by_address_gets_absolute_paths(tmp_path: Path, scheduler: str, capsys, monkeypatch) -> None:
    """Workers of a cluster given by address may run in another folder: relative paths on the
    command line ("ranks/a") reached them as such, and every rank failed to open.  The tasks'
    inputs are the pairs' paths."""
    n, a = _pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = compare_ranks(n.relative_to(tmp_path), a.relative_to(tmp_path), scheduler=scheduler)
    assert len(res.pairs) == 4
    assert all(Path(p.normal.path).is_absolute() and Path(p.abnormal.path).is_absolute() for p in res.pairs)
    code, _, err = run_cli(["compare", n.relative_to(tmp_path), a.relative_to(tmp_path), "--scheduler", scheduler,
                            "-o", "r.md"], capsys)
    assert code == 0, err
    assert f"({n.relative_to(tmp_path)}, world size 4)" in (tmp_path / "r.md").read_text()  # the user's path, shown


def test_notes_said_once_and_the_baseline_asked_nothing(tmp_path: Path, scheduler: str) -> None:
    """Traces without process groups in both runs: the communicator note was printed twice,
    word for word but the run; and the normal run's quiet straggler paragraph asked "if the
    run is slower", which the baseline never is."""
    from perfdiff.render.ranks import rank_markdown

    n, a = _pair(tmp_path, straggler=3, pg_args=False)
    md = rank_markdown(compare_ranks(n, a, scheduler=scheduler), ("normal", "abnormal"))
    assert md.count("not name the communicator (process group)") == 1
    assert "The traces of both runs' ranks 0–3 do not name the communicator" in md
    normal = md[md.index("**N: normal run.**"):md.index("**A: abnormal run.**")]
    assert "No rank makes the others wait materially" in normal and "if the run is slower" not in normal


def test_the_rank_table_has_a_picture(tmp_path: Path, scheduler: str, capsys, monkeypatch) -> None:
    """The multi-rank report wrote no picture: now each rank's median cycle and wait in
    collectives, both runs, the culprit marked, beside the report and linked from it; none
    with --no-plots."""
    from perfdiff.render import plots

    n, a = _pair(tmp_path, straggler=3)
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    assert "![median cycle and wait in collectives, per rank](r.ranks.png)" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.ranks.png").read_bytes().startswith(b"\x89PNG")
    figures = []
    real_write = plots._write

    def keep(fig, plt, path):
        figures.append([ax for ax in fig.axes if ax.get_visible()])
        return real_write(fig, plt, path)

    monkeypatch.setattr(plots, "_write", keep)
    plots.write_rank_plots(compare_ranks(n, a, scheduler=scheduler), tmp_path, "again")
    monkeypatch.undo()
    (axes,) = figures
    assert len(axes) == 2 and all(len(ax.get_lines()) == 3 for ax in axes)  # N, A and the culprit's line
    assert [t.get_text() for t in axes[0].texts] == ["culprit: rank 3"]
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", tmp_path / "q.md", "--no-plots"], capsys)
    assert code == 0 and not (tmp_path / "q.ranks.png").exists() and ".png" not in (tmp_path / "q.md").read_text()


def test_a_victims_tau_is_its_wait(tmp_path: Path, scheduler: str) -> None:
    """A rank that waited for the culprit showed τ n/a beside "waits in collectives": its τ is
    now the wait's growth, pp of its abnormal cycle, as the culprit's is its function's."""
    from perfdiff.render.ranks import rank_markdown

    n, a = _pair(tmp_path, straggler=3)
    res = compare_ranks(n, a, scheduler=scheduler)
    victim = next(r for r in res.rows if r.waited and r.cause is None)
    assert 10.0 < victim.wait_tau_pp < 100.0
    line = next(x for x in rank_markdown(res, ("n", "a")).splitlines() if x.startswith(f"| {victim.rank} |"))
    assert f"| waits in collectives (for rank 3) | +{victim.wait_tau_pp:.2f} |" in line


def test_a_bad_cycle_pattern_is_the_users_one_line(tmp_path: Path) -> None:
    """--cycle '(' over many ranks read "rank 0 of the normal run has too few of the markers
    the plan cuts at": every rank failed to be cut.  It is the pattern, said as for a pair."""
    n, a = _pair(tmp_path)
    with pytest.raises(InputError, match=r"bad --cycle regular expression '\(': missing \)"):
        compare_ranks(n, a, cycle="(", workers=1, processes=False)


def test_a_rank_without_collectives_is_said(tmp_path: Path) -> None:
    """A rank whose traces hold no NCCL kernel, where the others' do: it took no part in the
    straggler tables, which listed the others only, and no note said why."""
    import json as _json

    n, a = _pair(tmp_path, straggler=1)
    for side in (n, a):
        path = side / "rank-3.json"
        doc = _json.loads(path.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("nccl")]
        path.write_text(_json.dumps(doc))
    res = compare_ranks(n, a, workers=1, processes=False)
    notes = [(x.side, x.ranks) for x in res.notices if x.code == RankNoticeCode.NO_COLLECTIVES]
    assert notes == [("normal", (3,)), ("abnormal", (3,))]
    assert all(3 not in [w.rank for w in s.waits] for s in res.stragglers)
    from perfdiff.render.ranks import rank_markdown

    assert "The normal run's rank 3 has no NCCL kernel, where the others have them" in rank_markdown(res, ("n", "a"))


def test_progress_line_on_a_terminal(tmp_path: Path, scheduler: str, capsys, monkeypatch) -> None:
    n, a = _pair(tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", tmp_path / "r.md"], capsys)
    assert code == 0 and "\rperfdiff: ranks 8/8" in err and err.endswith("\n")


def test_local_workers_started_inside(tmp_path: Path) -> None:
    n, a = _pair(tmp_path, straggler=0)
    res = compare_ranks(n, a, workers=2)
    assert res.workers == 2 and res.stragglers[1].culprit == 0
    # No more workers than rank tasks: --workers 64 on 4 ranks a run started 64 processes.
    assert compare_ranks(n, a, workers=64).workers == 8
    # In this process, one task after the other: the same result.
    inline = compare_ranks(n, a, processes=False)
    assert inline.workers == 1 and inline.rows == res.rows and inline.stragglers == res.stragglers


def test_mismatched_world_sizes_one_line_exit_2(tmp_path: Path, capsys) -> None:
    n, a = _pair(tmp_path, normal_ranks=2)
    code, _, err = run_cli(["compare", n, a], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "world size 2" in err and "world size 4" not in err and "--ranks" in err


def test_a_rank_without_the_plans_steps_is_left_out_with_its_pair(tmp_path: Path, capsys) -> None:
    """Rank 2 of the abnormal run lost its ProfilerStep ranges (its kernels are all there): the
    other ranks are still compared, the report says which rank was left out and why, and the
    straggler (rank 1) is still named; before, one damaged rank stopped the whole comparison
    ("no markers, no activity to segment")."""
    import json

    n, a = _pair(tmp_path, straggler=1)
    path = a / "rank-2.json"
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(["compare", n, a, "--workers", "1", "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "3 ranks compared" in text and "**straggler: rank 1**" in text
    assert "The abnormal run's rank 2 has too few of the markers the plan cuts at to be cut by it" in text
    res = compare_ranks(n, a, workers=1, processes=False)
    assert [p.rank for p in res.pairs] == [0, 1, 3] and res.stragglers[1].culprit == 1
    assert [(x.code, x.ranks, x.side) for x in res.notices if x.code == RankNoticeCode.UNCUT] == [
        (RankNoticeCode.UNCUT, (2,), "abnormal")]


def test_an_uncut_straggler_is_named_as_left_out_without_the_ranks_hint(tmp_path: Path) -> None:
    """The straggler itself (rank 1) lost its ProfilerStep ranges: the verdict says the ranks
    compared wait for a rank left out, and that its trace lost the plan's markers, not
    "compare with --ranks all" (which cannot bring it back)."""
    import json

    from perfdiff.render.ranks import rank_markdown

    n, a = _pair(tmp_path, straggler=1)
    path = a / "rank-1.json"
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    path.write_text(json.dumps(doc))
    res = compare_ranks(n, a, workers=1, processes=False)
    assert all(v.others == (1,) and v.uncut == (1,) for v in res.verdict if v.others)
    assert any(v.others for v in res.verdict)
    verdict = rank_markdown(res, (str(n), str(a))).split("## 1. Ranks")[0]
    assert "the abnormal run's rank 1, not compared" in verdict and "--ranks all" not in verdict
    assert "its trace, or its pair's, lost the plan's markers (see the notes)" in verdict


def _strip_steps(path: Path) -> None:
    """Remove a generated rank trace's ProfilerStep ranges (Kineto JSON or nsys SQLite)."""
    import json
    import sqlite3

    if path.suffix == ".sqlite":
        with sqlite3.connect(path) as con:
            con.execute("DELETE FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'")
        return
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    path.write_text(json.dumps(doc))


def test_a_damaged_first_rank_does_not_set_the_plan(tmp_path: Path) -> None:
    """Rank 0 of the abnormal run lost its ProfilerStep ranges: the plan comes from the next
    pair that agrees (ProfilerSteps, not idle gaps for every rank), rank 0 is left out, and the
    straggler is still named."""
    n, a = _pair(tmp_path, straggler=1)
    _strip_steps(a / "rank-0.json")
    res = compare_ranks(n, a, workers=1, processes=False)
    assert res.plan.source == CycleSource.PROFILER_STEP
    assert [p.rank for p in res.pairs] == [1, 2, 3] and res.stragglers[1].culprit == 1
    assert [(x.ranks, x.side) for x in res.notices if x.code == RankNoticeCode.UNCUT] == [((0,), "abnormal")]
    assert [p.tasks for p in res.phases if p.name == "plan"] == [4]  # two pairs tried


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_both_first_ranks_damaged_do_not_set_the_plan(tmp_path: Path, fmt: str) -> None:
    """Rank 0 lost its ProfilerStep ranges in both runs: that pair agrees (on having none) and
    planned idle gaps (Kineto) or the DataLoader's ranges (nsys) for every rank, without a
    straggler analysis. The ranks' parts say most others have steps: every rank is cut again
    at them, and rank 0 is left out in both runs."""
    n, a = _pair(tmp_path, fmt, straggler=1)
    for side in (n, a):
        _strip_steps(side / ("rank-0.json" if fmt == "kineto" else "report.0.sqlite"))
    res = compare_ranks(n, a, workers=1, processes=False)
    assert res.plan.source == CycleSource.PROFILER_STEP
    assert [p.rank for p in res.pairs] == [1, 2, 3] and res.stragglers[1].culprit == 1
    assert [(x.ranks, x.side) for x in res.notices if x.code == RankNoticeCode.UNCUT] == [
        ((0,), "normal"), ((0,), "abnormal")]
    assert [p.name for p in res.phases] == ["start", "plan", "ranks", "ranks again", "analysis"]
    # Where only a few pairs offer the steps, cutting at them would leave most ranks out: kept.
    for rank in (1, 2):
        for side in (n, a):
            _strip_steps(side / (f"rank-{rank}.json" if fmt == "kineto" else f"report.{rank}.sqlite"))
    res = compare_ranks(n, a, workers=1, processes=False)
    assert res.plan.source not in (CycleSource.PROFILER_STEP, CycleSource.PERFDIFF_MARKERS)
    assert [p.rank for p in res.pairs] == [0, 1, 2, 3] and "ranks again" not in [p.name for p in res.phases]


def test_an_uncut_rank_paired_by_number_names_its_pair(tmp_path: Path) -> None:
    """--ranks 0:1,1:0,2:3,3:2 and the abnormal run's rank 2 lost its steps: the notice names
    the pair left out with it, the normal run's rank 3 (the numbers differ)."""
    from perfdiff.render.ranks import notice_line

    n, a = _pair(tmp_path, straggler=1)
    _strip_steps(a / "rank-2.json")
    res = compare_ranks(n, a, ranks="0:1,1:0,2:3,3:2", workers=1, processes=False)
    uncut = [x for x in res.notices if x.code == RankNoticeCode.UNCUT]
    assert [(x.ranks, x.side, x.paired) for x in uncut] == [((2,), "abnormal", (3,))]
    assert notice_line(uncut[0]).endswith("left out, with its pair in the other run (rank 3 of the normal run).")
    assert sorted(p.rank for p in res.pairs) == [0, 1, 2]  # numbered as the normal run numbers them


def test_a_rank_the_users_cycle_misses_is_left_out(tmp_path: Path) -> None:
    """--cycle names ProfilerStep ranges, which rank 2 of the abnormal run lost: it is left out
    with its pair, not the whole comparison stopped."""
    n, a = _pair(tmp_path, straggler=1)
    _strip_steps(a / "rank-2.json")
    res = compare_ranks(n, a, cycle=r"ProfilerStep#\d+", workers=1, processes=False)
    assert res.plan.chosen_by_user and [p.rank for p in res.pairs] == [0, 1, 3]
    assert [(x.ranks, x.side) for x in res.notices if x.code == RankNoticeCode.UNCUT] == [((2,), "abnormal")]


def test_no_pair_left_uncut_is_one_line(tmp_path: Path) -> None:
    """When every pair has a rank that cannot be cut by the plan, one line says so (exit 2)."""
    from perfdiff.ranks import pipeline
    from perfdiff.ranks.part import UncutRank
    from perfdiff.ranks.records import RankInput, RankPair

    inp = RankInput(rank=1, path=str(tmp_path / "rank-1.json"), source=IdentitySource.FILE_NAME)
    pairs = [RankPair(1, RankInput(rank=1, path=str(tmp_path / "n-1.json"), source=IdentitySource.FILE_NAME), inp)]
    plan = type("Plan", (), {"source": "profiler-step"})()
    with pytest.raises(InputError, match="rank 1 of the abnormal run has too few of the markers the plan cuts at "
                                         r"\(profiler-step\), and no pair of ranks is left to compare"):
        pipeline._drop_uncut(pairs, [object(), UncutRank(1, inp)], plan)  # the normal rank was cut


@pytest.mark.parametrize("case", ["empty", "damaged manifest", "target not an object"])
def test_a_directory_without_ranks_or_with_a_damaged_bundle_says_so(tmp_path: Path, capsys, case: str) -> None:
    """Beside runs of many ranks: an empty directory is not "world size 1"; a bundle whose
    manifest is damaged is named, not read as an undeclared rank that "claims rank 0" with
    another; a bundle that declares no rank (its target not even an object) takes the first
    number no trace declares, 4, and is in one run only; before, an internal error."""
    n, a = _pair(tmp_path, straggler=1)
    other = tmp_path / "other"
    other.mkdir()
    if case != "empty":
        import shutil

        for f in n.iterdir():
            shutil.copy(f, other / f.name)
        (other / "bundle").mkdir()
        (other / "bundle" / "manifest.json").write_text('{"format_version": 1, "target": ["x"]}'
                                                        if case == "target not an object" else "{bad")
    code, _, err = run_cli(["compare", other, a, "--workers", "1", "-o", tmp_path / "r.md"], capsys)
    if case == "target not an object":
        assert code == 0 and "- Rank 4 is in one run only: not compared." in (tmp_path / "r.md").read_text()
        return
    assert code == 2 and len(err.strip().splitlines()) == 1
    want = {"empty": "no trace or run bundle in this directory", "damaged manifest": "manifest is not valid JSON"}[case]
    assert want in err and "world size" not in err and "claim" not in err


def test_two_windows_of_one_rank_are_one_line_saying_which(tmp_path: Path, capsys) -> None:
    """A profiler's schedule writes a trace per profiling window: two files of rank 2 in one
    directory are refused by name, with what to do."""
    import shutil

    n, a = _pair(tmp_path, straggler=1)
    shutil.copy(a / "rank-2.json", a / "host_2.1700000050.pt.trace.json")
    code, _, err = run_cli(["compare", n, a, "--workers", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("two inputs claim rank 2: host_2.1700000050.pt.trace.json and rank-2.json (a folder holds one trace "
            "per rank: move the others, such as other profiling windows, elsewhere)") in err


@pytest.mark.parametrize("declared", ["1000000000000", "-5", '"4"', "4.5", "null"])
def test_a_damaged_world_size_is_not_a_world(tmp_path: Path, declared: str) -> None:
    """A rank's header declaring a world of 10^12 ranks (or no number at all) is ignored: the
    run's world is its 4 traces.  Before, the 10^12 was refused as a mismatch, and with
    --ranks the comparison listed every rank not compared until memory ran out."""
    n, a = _pair(tmp_path, straggler=1)
    path = a / "rank-0.json"
    path.write_text(path.read_text().replace('"world_size": 4', f'"world_size": {declared}', 1))
    for ranks in (None, "0-3"):
        res = compare_ranks(n, a, ranks=ranks, workers=1, processes=False)
        assert res.world_a == 4 and res.stragglers[1].culprit == 1


def test_ranks_option_pairs_mismatched_world_sizes(tmp_path: Path, scheduler: str) -> None:
    n, a = _pair(tmp_path, normal_ranks=2)
    res = compare_ranks(n, a, ranks="0:2,1:3", scheduler=scheduler)
    assert [(p.normal.rank, p.abnormal.rank) for p in res.pairs] == [(0, 2), (1, 3)]
    assert res.world_n == 2 and res.world_a == 4
    assert any(x.code == RankNoticeCode.PAIRED_BY_USER for x in res.notices)
    with pytest.raises(InputError, match="not there"):
        compare_ranks(n, a, ranks="0-3", scheduler=scheduler)


def test_rank_spec() -> None:
    assert parse_rank_spec("all") is None
    assert parse_rank_spec("0-2") == ((0, 0), (1, 1), (2, 2))
    assert parse_rank_spec("0:4, 1:5") == ((0, 4), (1, 5))
    assert parse_rank_spec("0-1:6-7") == ((0, 6), (1, 7))
    for bad in ("x", "0-1:4", "1,,2", "5-2", "0:1,0:2", "0,0", "1:0,0:0", "0-99999999999", "٣", "０",
                ",".join(["0-1048575"] * 60)):
        with pytest.raises(InputError):
            parse_rank_spec(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-:, al٣０", max_size=24))
def test_rank_spec_any_text_parses_or_says_why(text: str) -> None:
    """Whatever --ranks says: pairs with no rank twice on a side, or one InputError line."""
    try:
        pairs = parse_rank_spec(text)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    if pairs is not None:
        assert len({n for n, _ in pairs}) == len({a for _, a in pairs}) == len(pairs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 4095)), min_size=1, max_size=12,
                unique_by=(lambda p: p[0], lambda p: p[1])))
def test_rank_spec_round_trips(pairs: list[tuple[int, int]]) -> None:
    assert parse_rank_spec(",".join(f"{n}:{a}" for n, a in pairs)) == tuple(pairs)


def test_ranks_from_file_names_else_order(tmp_path: Path) -> None:
    for name in ("rank-1.json", "rank-0.json", "trace_a.json"):
        (tmp_path / "named" / name).parent.mkdir(exist_ok=True)
    for name in ("rank-1.json", "rank-0.json"):
        (tmp_path / "named" / name).write_text('{"traceEvents": []}')
    got = rank_inputs(tmp_path / "named")
    assert [(r.rank, Path(r.path).name, r.source) for r in got] == [
        (0, "rank-0.json", IdentitySource.FILE_NAME), (1, "rank-1.json", IdentitySource.FILE_NAME)]
    (tmp_path / "plain").mkdir()
    for name in ("b.json", "a.json"):
        (tmp_path / "plain" / name).write_text('{"traceEvents": []}')
    assert [(r.rank, Path(r.path).name, r.source) for r in rank_inputs(tmp_path / "plain")] == [
        (0, "a.json", IdentitySource.ORDER), (1, "b.json", IdentitySource.ORDER)]


def test_without_dask_local_ranks_compare_and_a_scheduler_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """Dask is only for a cluster given by address: without it, ranks are compared on this
    machine all the same, and --scheduler says in one line how to get it."""
    n, a = _pair(tmp_path, straggler=1)
    monkeypatch.setitem(sys.modules, "distributed", None)
    code, _, err = run_cli(["compare", n, a, "--workers", "2", "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    assert "on 2 workers" in (tmp_path / "r.md").read_text()
    code, _, err = run_cli(["compare", n, a, "--scheduler", "tcp://127.0.0.1:1"], capsys)
    assert code == 2 and err.strip().splitlines() == ["perfdiff: a Dask scheduler (--scheduler) needs Dask: "
                                                      "pip install perfdiff[ranks]"]


def test_cycle_k_is_the_same_step_on_every_rank(tmp_path: Path, scheduler: str) -> None:
    """Rank 1's profile starts 3 steps later: the ranks are aligned on ProfilerStep numbers
    (not on their first cycles), the steps it lacks are left out and said so."""
    n, a = _pair(tmp_path, straggler=2, late={1: 3})
    res = compare_ranks(n, a, scheduler=scheduler)
    sa = res.stragglers[1]
    assert sa.culprit == 2 and sa.cycles == SMALL["steps"] - 3
    last = gen_ranks.FIRST_STEP + SMALL["steps"] - 1
    assert res.iterations == ((gen_ranks.FIRST_STEP, last), (gen_ranks.FIRST_STEP + 3, last))
    assert any(x.code == RankNoticeCode.ITERATIONS_TRIMMED and x.side == "abnormal" and x.count == 3
               for x in res.notices)


@pytest.mark.real
def test_rank_and_world_size_read_from_real_kineto_heads(real: Path, tmp_path: Path) -> None:
    """The HTA traces declare rank 3 of 8 and rank 1 of 2 in distributedInfo (gzip'ed)."""
    import shutil

    src = real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff"
    (tmp_path / "run").mkdir()
    shutil.copy(src / "control/control.json.gz", tmp_path / "run" / "a.json.gz")
    shutil.copy(src / "test/test.json.gz", tmp_path / "run" / "b.json.gz")
    got = rank_inputs(tmp_path / "run")
    assert [(r.rank, r.world_size, r.source, Path(r.path).name) for r in got] == [
        (1, 2, IdentitySource.TRACE, "b.json.gz"), (3, 8, IdentitySource.TRACE, "a.json.gz")]


@pytest.mark.real
def test_a_lone_exports_default_name_is_no_rank(real: Path) -> None:
    """nsys names its reports report1, report2 …: with --ranks, a lone export of one process
    was rank 3 and the other rank 2 ("no rank in common").  A lone file's name gives a rank
    only where it says so (rank-3.sqlite)."""
    src = real / "kmcho2019/Rodinia_3.1_Gaussian"
    assert [(r.rank, r.source) for r in rank_inputs(src / "report3.sqlite", split_processes=True)] == [
        (0, IdentitySource.ORDER)]
    res = compare_ranks(src / "report3.sqlite", src / "report2.sqlite", ranks="all", workers=1, processes=False)
    assert [p.rank for p in res.pairs] == [0]


@pytest.mark.real
def test_profiling_windows_of_one_worker_are_no_ranks(real: Path, tmp_path: Path) -> None:
    """TensorBoard's layout: a folder per configuration holding the trace handler's windows of
    worker0.  They were read as ranks 0 and 1 ("world size 2 and 1: not compared")."""
    folder = real / "pytorch/kineto/tb_plugin/samples/resnet50_num_workers_4"
    with pytest.raises(InputError, match=r"2 traces of one worker, worker0 \(worker0\.1623212756351\.pt\.trace\.json"
                                         r"\.gz, worker0\.1623213129365\.pt\.trace\.json\.gz\): profiling windows of one "
                                         r"process, not ranks"):
        rank_inputs(folder)
    (tmp_path / "run").mkdir()  # windows of two workers, one each: ranks by order, as before
    for name in ("worker0.1623212756351.pt.trace.json.gz", "worker1.1623212756351.pt.trace.json.gz"):
        (tmp_path / "run" / name).symlink_to(folder / "worker0.1623212756351.pt.trace.json.gz")
    assert [r.rank for r in rank_inputs(tmp_path / "run")] == [0, 1]


def test_a_host_states_share_must_move_with_the_ranks_cycle() -> None:
    """As for a pair: oncpu is tested only where its share of the cycle moved with the cycle.
    The cycle doubles 100 → 200 ms; oncpu 50 → 80 ms is a share falling 50 → 40 % (it grew by
    +15 pp of τ, yet less than the cycle: no cause), and 50 → 140 ms a share rising to 70 %."""
    from perfdiff.ranks.across import rank_tests
    from perfdiff.ranks.part import EXCESS_KINDS, RankPart
    from perfdiff.ranks.records import RankInput

    rng = np.random.default_rng(0)

    def part(side: int, cycle_ms: float, oncpu_ms: float) -> RankPart:
        k = 20
        dur = (cycle_ms * 1e6 * (1 + 0.01 * rng.standard_normal(k))).astype(np.int64)
        own = np.vstack([oncpu_ms * 1e6 * (1 + 0.01 * rng.standard_normal(k)), dur * 0.2])
        return RankPart(side=side, input=RankInput(0, "rank-0.json", IdentitySource.FILE_NAME), declared={},
                        iteration=np.arange(k, dtype=np.int64), dur_ns=dur, names=["oncpu", "my_kernel"],
                        kinds=["host", "kernel"], own_ns=own, excess_ns=np.zeros((len(EXCESS_KINDS), k)),
                        coll_cycle=np.zeros(0, np.int64), coll_ord=np.zeros(0, np.int64),
                        coll_dur_ns=np.zeros(0, np.int64), offers_plan=True)

    iters = np.arange(20, dtype=np.int64)
    fell = rank_tests(part(0, 100, 50), part(1, 200, 80), iters, iters, Thresholds(alpha=0.05))
    rose = rank_tests(part(0, 100, 50), part(1, 200, 140), iters, iters, Thresholds(alpha=0.05))
    assert [t.function for t in fell] == ["my_kernel"]
    assert [t.function for t in rose] == ["my_kernel", "oncpu"]
    # The comparison's thresholds decide across ranks too: a materiality no change reaches
    # leaves no finding, and a test floor above every function leaves nothing tested.
    from perfdiff.ranks.across import findings_across, with_q

    tests = with_q(rose)
    assert {f.function for f in findings_across(tests, 1, Thresholds())} == {"my_kernel", "oncpu"}
    assert findings_across(tests, 1, Thresholds(material_tau_pp=1e6)) == []
    assert rank_tests(part(0, 100, 50), part(1, 200, 140), iters, iters, Thresholds(test_min_share=0.99)) == []


@pytest.mark.real
def test_a_host_state_that_grew_with_the_cycle_is_no_rank_cause(real: Path, tmp_path: Path) -> None:
    """Rodinia's pair as four ranks a run: every rank's cycle grew by Fan2, and oncpu (the CPU
    spinning in cudaThreadSynchronize) grew with it at an unchanged share.  The verdict named
    "slower on all 4 ranks: oncpu" where the pair's report names Fan2."""
    src = real / "kmcho2019/Rodinia_3.1_Gaussian"
    for side, name in (("normal", "report3.sqlite"), ("abnormal", "report2.sqlite")):
        (tmp_path / side).mkdir()
        for r in range(4):
            (tmp_path / side / f"rank-{r}.sqlite").symlink_to(src / name)
    res = compare_ranks(tmp_path / "normal", tmp_path / "abnormal", workers=1, processes=False)
    assert [(v.code, v.function.split("(")[0]) for v in res.verdict] == [(RankVerdictCode.ALL_RANKS, "Fan2")]
    assert all(r.cause.startswith("Fan2") for r in res.rows)
    assert not any(f.function == "oncpu" for f in res.findings)


@pytest.mark.real
def test_identical_real_ranks_share_last_place(real: Path, tmp_path: Path) -> None:
    """Two copies of a real rank (the HTA trace, renumbered) in each run: every rank waits
    alike in every collective, so none is "last" more than the others (ties share the cycle),
    no straggler, and no change."""
    import gzip
    import json

    doc = json.loads(gzip.open(real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/control/"
                                      "control.json.gz").read())
    for side in ("normal", "abnormal"):
        (tmp_path / side).mkdir()
        for r in range(2):
            doc["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": 2}
            (tmp_path / side / f"rank-{r}.json").write_text(json.dumps(doc))
    res = compare_ranks(tmp_path / "normal", tmp_path / "abnormal", workers=1, processes=False)
    for s in res.stragglers:
        assert s.code == StragglerCode.NO_SKEW and [w.last_share for w in s.waits] == [0.5, 0.5]
    assert [v.code for v in res.verdict] == [RankVerdictCode.NO_CHANGE]


def test_directories_of_rank_bundles(tmp_path: Path, scheduler: str, capsys) -> None:
    """Bundles (here imported from the rank traces) carry their rank in the manifest."""
    n, a = _pair(tmp_path / "traces", straggler=1)
    for side in (n, a):
        for trace in sorted(side.glob("rank-*.json")):
            code, _, err = run_cli(["import", trace, "-o", tmp_path / side.name / f"b{trace.stem[-1]}"], capsys)
            assert code == 0, err
    res = compare_ranks(tmp_path / "normal", tmp_path / "abnormal", scheduler=scheduler)
    assert [(p.rank, p.normal.source) for p in res.pairs] == [(r, IdentitySource.MANIFEST) for r in range(4)]
    assert res.stragglers[1].culprit == 1


def _groups(s) -> dict[tuple[int, ...], object]:
    return {g.ranks: g for g in s.groups}


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_straggler_inside_one_tensor_parallel_group(tmp_path: Path, scheduler: str, fmt: str) -> None:
    """Tensor parallel 2 × data parallel 2, rank 2's data loader ×10: each collective's wait is
    read among its process group's members (Kineto: the kernels' args; nsys: NCCL's NVTX
    payloads); rank 2 is named in its groups, the other tensor-parallel group (ranks 0, 1) is
    blamed nowhere, and rank 3 (late to its data-parallel all-reduce only because it waited for
    rank 2) relays, it is no culprit."""
    from perfdiff.ranks.records import GroupCode
    from perfdiff.render.ranks import rank_markdown

    n, a = _pair(tmp_path, fmt, straggler=2, tp=2)
    res = compare_ranks(n, a, scheduler=scheduler)
    sa = res.stragglers[1]
    assert sa.grouped and sa.code == StragglerCode.CULPRIT and sa.culprit == 2 and sa.excess == ExcessKind.INPUT
    g = _groups(sa)
    assert set(g) == {(0, 1), (2, 3), (0, 2), (1, 3)}
    assert g[2, 3].code == GroupCode.CULPRIT and g[2, 3].last == 2
    assert g[0, 2].code == GroupCode.CULPRIT and g[0, 2].last == 2
    assert g[0, 1].code == GroupCode.NO_SKEW and g[0, 1].last is None
    assert g[1, 3].code == GroupCode.RELAY and g[1, 3].last == 3
    assert not {x.last for x in sa.groups} & {0, 1}
    assert all(x.code == GroupCode.NO_SKEW for x in res.stragglers[0].groups)
    assert not any(x.code == RankNoticeCode.GROUPS_UNKNOWN for x in res.notices)
    want = {"kineto": "2 \\[2, 3\\]", "nsys": "comm 0x1002"}[fmt]
    assert g[2, 3].group == want.replace("\\", "")
    text = rank_markdown(res, (str(n), str(a)))
    assert f"| {want} | 2, 3 | 3 |" in text and "late from waiting in another group" in text


def test_collectives_of_unnamed_groups_keep_one_group_and_say_so(tmp_path: Path, scheduler: str) -> None:
    from perfdiff.render.ranks import rank_markdown

    n, a = _pair(tmp_path, straggler=2, tp=2, pg_args=False)
    res = compare_ranks(n, a, scheduler=scheduler)
    sa = res.stragglers[1]
    assert not sa.grouped and sa.groups == () and sa.culprit == 2
    unknown = [x for x in res.notices if x.code == RankNoticeCode.GROUPS_UNKNOWN]
    assert [(x.side, x.ranks) for x in unknown] == [("normal", (0, 1, 2, 3)), ("abnormal", (0, 1, 2, 3))]
    assert "groups could not be told apart" in rank_markdown(res, (str(n), str(a)))


def test_one_kernel_without_its_group_keeps_the_others_groups(tmp_path: Path, scheduler: str) -> None:
    """One NCCL kernel in a step of the culprit's trace without its process-group args: that
    kernel's communicator is unknown, the rank's other kernels keep theirs, so the run is still
    read per communicator and the culprit is named in its groups, not its partner."""
    import json

    from perfdiff.ranks.records import GroupCode

    n, a = _pair(tmp_path, straggler=2, tp=2)
    path = a / "rank-2.json"
    doc = json.loads(path.read_text())
    nccl = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")
            and "Process Group Name" in e.get("args", {})]
    for key in ("Process Group Name", "pg_name", "Process Group Ranks"):
        nccl[len(nccl) // 2]["args"].pop(key, None)
    path.write_text(json.dumps(doc))
    res = compare_ranks(n, a, scheduler=scheduler)
    sa = res.stragglers[1]
    assert sa.grouped and sa.code == StragglerCode.CULPRIT and sa.culprit == 2
    g = _groups(sa)
    assert set(g) == {(0, 1), (2, 3), (0, 2), (1, 3)}
    assert g[2, 3].code == GroupCode.CULPRIT and g[2, 3].last == 2 and g[0, 2].last == 2 and g[0, 1].last is None
    unknown = [x for x in res.notices if x.code == RankNoticeCode.GROUPS_UNKNOWN]
    assert [(x.side, x.ranks) for x in unknown] == [("abnormal", (2,))]


def test_fail_on_gates_the_median_cycle_across_ranks(tmp_path: Path, scheduler: str, capsys) -> None:
    """Rank 1's data loader ×10 holds every rank back: the job's cycle (per iteration the median
    over ranks) grew, so --fail-on trips; not beyond a larger PCT, nor when the runs swap.  The
    default gates (the job cycle's mean and P95) trip too; a function gate is refused."""
    n, a = _pair(tmp_path, straggler=1)
    out = tmp_path / "r.md"
    median = ["--gate-on", "median"]
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", out, "--fail-on", "10", *median], capsys)
    assert code == 1 and err.startswith("perfdiff: gate regression (--fail-on 10%, α 0.05): median cycle ")
    assert len(err.strip().splitlines()) == 1 and "Job cycle time" in out.read_text()
    assert "**CI gate: regression**" in out.read_text()
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", out, "--fail-on", "100000", *median],
                           capsys)
    assert code == 0 and "grew by less than the threshold" in err
    code, _, _ = run_cli(["compare", a, n, "--scheduler", scheduler, "-o", out, "--fail-on", "10", *median], capsys)
    assert code == 0  # faster is not a regression
    res = compare_ranks(n, a, scheduler=scheduler)
    rows = sorted(r.median_a_us for r in res.rows)
    assert res.cycle.median_a_us == pytest.approx(rows[1] + (rows[2] - rows[1]) / 2, rel=0.05)
    assert res.cycle.change_pct > 100 and res.cycle.p < 1e-3
    d = perfdiff.api.RankComparison(res, (str(n), str(a))).judge(10)
    assert [(c.metric.value, c.outcome.value) for c in d.checks][0] == ("mean", "regression")
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", out, "--fail-on", "10", "--gate-on",
                            "function:x"], capsys)
    assert code == 2 and "runs of many ranks are gated on the job's iteration time" in err


def test_null_pair_does_not_trip_the_gate(tmp_path: Path, scheduler: str, capsys) -> None:
    n, a = _pair(tmp_path)
    code, _, err = run_cli(["compare", n, a, "--scheduler", scheduler, "-o", tmp_path / "r.md", "--fail-on", "0",
                            "--gate-on", "median"], capsys)
    assert code == 0 and "regression" not in err.replace("gate pass", "")


@pytest.mark.parametrize("bad", ["-5", "nan", "NaN", "x"])
def test_fail_on_refuses_negative_or_nan(tmp_path: Path, capsys, bad: str) -> None:
    """One line, exit 2, before any input is read: a single pair or runs of many ranks."""
    for inputs in (["n.json", "a.json"], [tmp_path, tmp_path]):
        code, _, err = run_cli(["compare", *inputs, "--fail-on", bad], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--fail-on" in err


def test_pid_with_runs_of_many_ranks_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    """--pid picks a process of one trace: with runs of many ranks it is refused, not ignored."""
    n, a = _pair(tmp_path)
    code, _, err = run_cli(["compare", n, a, "--pid", "4001"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--pid" in err and "--ranks" in err


def test_a_communicator_the_traces_do_not_name_reads_unnamed() -> None:
    """The row of collectives without a communicator names none, whatever ranks ran them."""
    from perfdiff.ranks import GroupCode, GroupStraggler, Straggler, StragglerCode
    from perfdiff.render.ranks import _group_table

    g = GroupStraggler(group="", ranks=(4, 5), code=GroupCode.NO_SKEW, last=None, collectives=2, skew_us=3.0,
                       p_last=1.0)
    s = Straggler(side="abnormal", code=StragglerCode.NO_SKEW, culprit=None, cycles=10, collectives=2, skew_us=3.0,
                  p_last=1.0, waits=(), groups=(g,), grouped=True)
    row = _group_table(s)[2]
    assert row.startswith("| unnamed | 4, 5 |") and "every rank" not in row


def test_inputs_that_declare_no_rank_keep_their_names_numbers(tmp_path: Path) -> None:
    """rank-3.json lost its header and a stray notes.json sits beside the ranks: rank-3.json is
    still rank 3 by its name, and the stray file takes a number nobody has, in one run only
    (one stray file used to renumber every undeclared input by position).  Numbers in names
    beyond any world (timestamps, 10^19) are no ranks: those files go by their order."""
    n, a = _pair(tmp_path, straggler=1)
    path = n / "rank-3.json"
    path.write_text(re.sub(r'"distributedInfo": \{[^}]*\}, ', "", path.read_text(), count=1))
    (n / "notes.json").write_text(json.dumps({"traceEvents": []}))
    ins = {Path(r.path).name: (r.rank, r.source) for r in rank_inputs(n)}
    assert ins["rank-3.json"] == (3, IdentitySource.FILE_NAME) and ins["notes.json"] == (4, IdentitySource.ORDER)
    res = compare_ranks(n, a, workers=1, processes=False)
    assert [p.rank for p in res.pairs] == [0, 1, 2, 3] and res.stragglers[1].culprit == 1
    assert any(x.code == RankNoticeCode.UNPAIRED and x.ranks == (4,) for x in res.notices)
    odd = tmp_path / "odd"
    odd.mkdir()
    for name in ("worker0.1623143089861.pt.trace.json", "worker1.1623143089999.pt.trace.json",
                 "rank-99999999999999999999.json"):
        (odd / name).write_text(json.dumps({"traceEvents": []}))
    assert [(r.rank, r.source) for r in rank_inputs(odd)] == [(0, IdentitySource.ORDER), (1, IdentitySource.ORDER),
                                                              (2, IdentitySource.ORDER)]


def test_cycles_chosen_two_ways_are_refused_before_any_work(tmp_path: Path) -> None:
    """--cycle with --window used the window and dropped the pattern without a word."""
    with pytest.raises(InputError, match="--cycle and --window both choose the cycles: give one of them"):
        perfdiff.compare_ranks(tmp_path / "missing-n", tmp_path / "missing-a", cycle="step", window="5ms")


def test_the_rank_picture_is_drawn_by_a_process_started_with_the_comparison(tmp_path: Path) -> None:
    """compare_ranks(pictures=True) starts the process that draws the rank picture at once, so
    matplotlib's import overlaps the ranks' tasks: the command's process never imports it, and
    the picture is the one drawn here."""
    import subprocess

    from perfdiff.render import plots

    n, a = _pair(tmp_path, straggler=3)
    script = ("import sys, perfdiff\n"
              f"c = perfdiff.compare_ranks({str(n)!r}, {str(a)!r}, workers=1, pictures=True)\n"
              f"print(c.write_plots({str(tmp_path)!r}, 'painted'))\n"
              "assert 'matplotlib' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['painted.ranks.png']"
    plots.write_rank_plots(compare_ranks(n, a, workers=1), tmp_path, "here")
    assert (tmp_path / "painted.ranks.png").read_bytes() == (tmp_path / "here.ranks.png").read_bytes()


def test_both_runs_are_asked_whether_they_hold_ranks_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare reads both inputs' processes (a scan of each kernel table) in two threads: each
    answer here waits for the other's question, which a loop asking one after the other never
    reaches.  The answer and the errors stay those of the loop."""
    import threading

    from perfdiff.ranks import discover

    both = threading.Barrier(2, timeout=10)
    asked: list[str] = []

    def is_multi_rank(path: str) -> bool:
        asked.append(path)
        both.wait()
        if path == "bad":
            raise InputError("bad input")
        return path == "ranks"

    monkeypatch.setattr(discover, "is_multi_rank", is_multi_rank)
    assert not discover.any_multi_rank(["a", "b"]) and sorted(asked) == ["a", "b"]
    assert discover.any_multi_rank(["a", "ranks"])
    assert discover.any_multi_rank(["ranks", "bad"])  # a true answer first: the second's error is not raised
    with pytest.raises(InputError, match="bad input"):
        discover.any_multi_rank(["bad", "ranks"])
