"""One nsys export holding a whole job: two processes, each driving a GPU of its own and
sharing an NCCL communicator, are read as two ranks and go to the multi-rank comparison (the
one `compare ranks_a/ ranks_b/` runs), with the rank table and the stragglers; processes that
share a GPU are not ranks, and the import says each one's part.  The exports are synthetic
(tests/nsys_job.py: the tables and columns of a real schema 3.17 export): in the normal run
rank 1's attention kernel is slow and rank 1 holds rank 0 back at every send/receive; in the
abnormal run it is 30 % faster."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REAL, run_cli
from nsys_job import ATTENTION, SENDRECV, write_job

from perfdiff.api import load
from perfdiff.ranks import compare_ranks
from perfdiff.model.cycles import PassReason
from perfdiff.model.schema import CycleSource
from perfdiff.ranks import RankVerdictCode
from perfdiff.ranks.discover import is_job_export, is_multi_rank, rank_inputs

SLOW, FAST = 1_600_000, 1_120_000  # rank 1's attention kernel, ns: 30 % faster in the abnormal run


def _pair(tmp: Path, **kw) -> tuple[Path, Path]:
    return (write_job(tmp / "normal.sqlite", (1_000_000, SLOW), seed=1, **kw),
            write_job(tmp / "abnormal.sqlite", (1_000_000, FAST), seed=2, **kw))


def test_processes_on_their_own_gpus_sharing_a_communicator_are_ranks(tmp_path: Path) -> None:
    n, _ = _pair(tmp_path)
    assert is_job_export(n) and is_multi_rank(n)
    assert [(r.rank, r.pid) for r in rank_inputs(n)] == [(0, 3000), (1, 3001)]


def test_processes_sharing_a_gpu_are_no_ranks_and_each_ones_part_is_said(tmp_path: Path) -> None:
    n, _ = _pair(tmp_path, devices=(0, 0))
    assert not is_job_export(n) and not is_multi_rank(n)
    note = next(x for x in load(n).notes if x.code == "several-processes")
    assert "pid 3000 (GPU 0; " in note and "pid 3001 (GPU 0; " in note and "not ranks" in note


def test_single_process_real_exports_are_no_jobs(real: Path) -> None:
    for export in sorted(REAL.rglob("*.sqlite")):
        assert not is_job_export(export)


def test_the_job_is_compared_rank_by_rank(tmp_path: Path) -> None:
    """Two ranks, cut at the steps; the attention kernel named in the verdict on rank 1, faster;
    the job's cycle shorter; rank 1 the normal run's straggler."""
    n, a = _pair(tmp_path)
    res = compare_ranks(n, a, workers=1, processes=False)
    assert [r.rank for r in res.rows] == [0, 1]
    assert res.plan.source == CycleSource.ANNOTATION and res.plan.name == "train_step"
    assert res.cycle.change_pct < -5 and res.cycle.p < 0.05
    attention = [v for v in res.verdict if v.function == ATTENTION]
    assert [(v.code, v.ranks) for v in attention] == [(RankVerdictCode.SOME_RANKS, (1,))]
    assert attention[0].size_us < 0  # faster
    assert res.stragglers[0].culprit == 1


@pytest.mark.parametrize("options", [[], ["--workers", "1"]])
def test_the_cli_routes_one_export_of_a_job_to_the_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         options: list[str]) -> None:
    """Without an option of ranks, the export's loading finds the second process and the
    command goes to the ranks."""
    n, a = _pair(tmp_path)
    code, out, err = run_cli(["compare", str(n), str(a), *options], capsys)
    assert code == 0, err
    first = out[:out.index("## 2.")]  # the first screen: the verdict and the rank table
    assert "Cross-Rank Comparison" in first and "flash\\_fwd\\_kernel" in first and "on rank 1" in first


def test_pid_compares_one_rank_of_a_job_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--pid names one process: of an export holding a job, that rank alone is compared, as a pair."""
    n, a = _pair(tmp_path)
    code, out, err = run_cli(["compare", str(n), str(a), "--pid", "3001", "--no-plots"], capsys)
    assert code == 0, err
    assert out.startswith("# Cross Performance Comparison") and "Cross-Rank" not in out
    assert "flash\\_fwd\\_kernel" in out[:out.index("## 2.")]  # rank 1's attention kernel: 30 % faster


def _step_us(layers: int, attention_ns: int) -> float:
    """One step of rank 1 (the slower) in µs, as nsys_job writes it: the layers, the loss and
    the optimizer, the send/receive's transfer (launch gaps and the embedding aside)."""
    return (layers * (2 * 800_000 + attention_ns + 200_000) + 300_000 + 1_000_000 + 400_000) / 1e3


def test_without_step_ranges_the_cycles_still_span_the_step(tmp_path: Path) -> None:
    """No train_step ranges: the optimizer step's range bounds the iteration (not a layer's
    op range, nor the loss's: a range named as a step's is preferred), and the layer's range
    passed over is said."""
    n, a = _pair(tmp_path, step_ranges=False)
    res = compare_ranks(n, a, workers=1, processes=False)
    assert res.plan.source == CycleSource.ANNOTATION and res.plan.name == "Optimizer.step#AdamW.step"
    assert [(r.why, r.name, r.per_step) for r in res.plan.rejected] == [
        (PassReason.RANGE_INSIDE_STEP, "aten::linear", 8.0)]
    assert res.cycle.cycles_n == 15  # 16 steps: one cycle from each step's start to the next's
    assert res.cycle.median_n_us == pytest.approx(_step_us(4, SLOW), rel=0.05)


def test_a_layer_repeating_inside_the_step_gives_way_to_the_closing_collective(tmp_path: Path) -> None:
    """No NVTX at all, 64 identical layers a step and one or two embedding kernels as the batch
    needs: the 4 kernels of a layer repeat (nearly all positions match), the step's do not
    quite.  The send/receive that closes each step bounds the cycles; the layer's sequence is
    passed over, and the report says so."""
    kw = {"nvtx": False, "embedding": True, "layers": 64, "steps": 10}
    n = write_job(tmp_path / "normal.sqlite", (100_000, 160_000), seed=1, **kw)
    a = write_job(tmp_path / "abnormal.sqlite", (100_000, 112_000), seed=2, **kw)
    res = compare_ranks(n, a, workers=1, processes=False)
    assert res.plan.source == CycleSource.KERNEL_SEQUENCE and res.plan.name == SENDRECV
    assert [(r.why, r.period_kernels) for r in res.plan.rejected] == [(PassReason.INSIDE_STEP, 4)]
    assert res.cycle.cycles_n >= 8  # 10 steps: not 2,600 layers
    assert res.cycle.median_n_us == pytest.approx(_step_us(64, 160_000), rel=0.05)
    assert res.cycle.change_pct < 0 and res.cycle.p < 0.05
    from perfdiff.render.ranks import rank_markdown

    head = rank_markdown(res, ("normal.sqlite", "abnormal.sqlite"), None, None)[:3000]
    assert "Passed over, unfit: a repeating kernel sequence of 4 kernels" in head


def test_one_process_on_two_gpus_shows_each_gpus_time_on_the_first_screen(tmp_path: Path) -> None:
    """One process driving both GPUs (no ranks): each GPU's time per cycle and its change in
    the summary, whichever GPU's rows lead the tables."""
    from perfdiff.api import compare

    n, a = _pair(tmp_path, one_process=True)
    assert not is_job_export(n)
    comp = compare(n, a)
    devices = {d.device: d for d in comp.analysis.devices}
    assert sorted(devices) == ["GPU 0", "GPU 1"]
    # Rank 1's attention: 4 layers × 480 µs faster per step on GPU 1; GPU 0 waits as much less.
    assert devices["GPU 1"].d_us == pytest.approx(-1920, rel=0.1)
    md = comp.to_markdown()
    first = md[:md.index("Top 10 functions")]
    assert "| GPU 0 time per cycle |" in first and "| GPU 1 time per cycle |" in first


def test_a_rank_report_says_what_each_gpu_of_a_rank_would_be_cut_at(tmp_path: Path) -> None:
    """Ranks that each drive two GPUs (one process, a thread per GPU): the plan records what
    each GPU's work alone would be cut at, and the rank report's Markdown says it, as a pair's
    report does."""
    from perfdiff.render.ranks import rank_markdown

    for side, slow in (("normal", 1_000_000), ("abnormal", 1_300_000)):
        (tmp_path / side).mkdir()
        for r in range(2):
            write_job(tmp_path / side / f"rank{r}.sqlite", (1_000_000, slow), one_process=True, seed=r)
    res = compare_ranks(tmp_path / "normal", tmp_path / "abnormal", workers=1, processes=False)
    assert [d.device for d in res.plan.devices] == ["GPU 0", "GPU 1"]
    md = rank_markdown(res, ("normal", "abnormal"))
    assert "The ranks the plan was chosen on each drive 2 GPUs; each GPU's work alone" in md
    assert "- GPU 0: the repeating range **train\\_step**" in md and "- GPU 1: " in md
