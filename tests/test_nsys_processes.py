"""One nsys export holding processes that are not ranks: an API server that launched little,
a tokenizer that launched nothing, and two GPU workers that share nothing.  Each process's role
is said and the processes are compared process by process (perfdiff.api.compare_processes).
The exports are synthetic (tests/nsys_job.write_server: the tables of a real schema 3.17
export): in the abnormal run the worker on GPU 1 has a 30 % slower attention kernel."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REAL, run_cli
from nsys_job import ATTENTION, COMM_ID, write_job, write_server

from perfdiff.analyze.verdict_records import VerdictCode
from perfdiff.api import compare_processes, load
from perfdiff.parallel import Parallel
from perfdiff.ranks.discover import is_job_export, is_multi_rank
from perfdiff.ranks.processes import (ExportProcess, PairCode, ProcessListing, ProcessRole, is_process_export,
                                      list_processes, pair_processes)

BASE, SLOW = 1_000_000, 1_300_000  # the attention kernel, ns


def _pair(tmp: Path, normal: dict | None = None, abnormal: dict | None = None) -> tuple[Path, Path]:
    return (write_server(tmp / "normal.sqlite", (BASE, BASE), seed=1, **(normal or {})),
            write_server(tmp / "abnormal.sqlite", (BASE, SLOW), seed=2, **(abnormal or {})))


def test_each_process_has_its_role(tmp_path: Path) -> None:
    n, _ = _pair(tmp_path)
    assert is_process_export(n) and not is_job_export(n) and not is_multi_rank(n)
    roles = {p.pid: (p.role, p.gpus, p.name) for p in list_processes(n).processes}
    assert roles == {3000: (ProcessRole.WORKER, (0,), "python3"), 3001: (ProcessRole.WORKER, (1,), "python3"),
                     2990: (ProcessRole.LIGHT, (0,), "vllm-api-server"),
                     2991: (ProcessRole.NO_GPU_WORK, (), "tokenizer")}
    # Read as one process (the Python API's compare, load), the import says how to compare them all.
    note = next(x for x in load(n).notes if x.code == "several-processes")
    assert "imported pid 3000 (the most)" in note and "compare them process by process" in note


def test_single_process_real_exports_are_compared_as_before(real: Path) -> None:
    for export in sorted(REAL.rglob("*.sqlite")):
        assert not is_process_export(export)


def test_each_process_is_compared_and_the_changed_worker_leads(tmp_path: Path) -> None:
    n, a = _pair(tmp_path)
    comp = compare_processes(n, a, parallel=Parallel.serial())
    first = comp.pairs[0]
    assert (first.pids, first.changed, first.code) == ((3001, 3001), True, PairCode.COMPARED)
    assert first.cycle_change_pct > 5
    kernel = [v for v in comp.comparison(first.label).verdict if v.code == VerdictCode.GPU_KERNEL]
    assert kernel and ATTENTION in {comp.comparison(first.label).findings[i].function for i in kernel[0].evidence}
    # The worker's execute_model range waits for the GPU in cudaStreamSynchronize: that wait is
    # the call's, not the range's own time, so the range is no CPU-side cause.
    assert [v.code for v in comp.comparison(first.label).verdict] == [VerdictCode.GPU_KERNEL]
    rest = {p.pids: (p.code, p.changed) for p in comp.pairs[1:]}
    assert rest == {(3000, 3000): (PairCode.COMPARED, False), (2990, 2990): (PairCode.COMPARED, False),
                    (2991, 2991): (PairCode.NO_GPU_WORK, False)}


def _sql(path: Path, statement: str, *args: object) -> None:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute(statement, args)
    con.commit()
    con.close()


def test_each_export_says_which_rule_of_ranks_its_processes_fail(tmp_path: Path) -> None:
    """Why an export's processes are not the ranks of one job is the first rule they fail: a
    GPU shared, a process on several GPUs, a process without collectives, communicators NCCL
    names apart; none for a job."""
    from perfdiff.ranks.discover import not_ranks
    from perfdiff.ranks.identity import NotRanks

    assert not_ranks(write_server(tmp_path / "server.sqlite", (BASE, BASE))) is NotRanks.SHARED_GPU
    alone = write_server(tmp_path / "workers.sqlite", (BASE, BASE), server=None)
    assert not_ranks(alone) is NotRanks.NO_COLLECTIVES
    _sql(alone, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 2 WHERE rowid IN (SELECT rowid FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL WHERE (globalPid >> 24) & 16777215 = 3000 LIMIT 3)")
    assert not_ranks(alone) is NotRanks.SEVERAL_GPUS
    job = write_job(tmp_path / "job.sqlite", (BASE, BASE))
    assert not_ranks(job) is None and is_job_export(job)
    _sql(job, "UPDATE NVTX_EVENTS SET jsonText = replace(jsonText, ?, ?) WHERE text LIKE 'ncclCommInit%' "
              "AND jsonText LIKE '%\"Rank\": 1,%'", str(COMM_ID), str(COMM_ID + 1))
    assert not_ranks(job) is NotRanks.SEPARATE_COMMUNICATORS and is_process_export(job)


def test_the_report_says_why_the_processes_are_not_ranks(tmp_path: Path) -> None:
    """Two GPU workers without NCCL: the report says that not all of them ran a collective,
    not that they share no communicator; with the API server on a worker's GPU, the GPU."""
    n, a = _pair(tmp_path, {"server": None}, {"server": None})
    comp = compare_processes(n, a, parallel=Parallel.serial())
    md, doc = comp.to_markdown(), comp.to_json()
    assert "not every one of them ran a collective (NCCL) kernel" in md and "share no NCCL communicator" not in md
    assert doc["not_ranks"] == ["no-collectives", "no-collectives"]
    (tmp_path / "server").mkdir()
    n, a = _pair(tmp_path / "server")
    md = compare_processes(n, a, parallel=Parallel.serial()).to_markdown()
    assert "they share GPU 0, as a server and its workers do" in md


def test_the_first_screen_names_the_changed_workers_kernel_with_its_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n, a = _pair(tmp_path)
    out = tmp_path / "report.md"
    code, _, err = run_cli(["compare", n, a, "-o", out, "--json", tmp_path / "r.json", "--no-plots"], capsys)
    assert code == 0, err
    md = out.read_text(encoding="utf-8")
    first = md[:md.index("\n## ")]
    assert "**Verdict:** 1 of the 3 processes compared changed: P2." in first
    lines = first.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("- **P2 · GPU worker on GPU 1 (python3, pid 3001 → 3001)"))
    assert any("**GPU kernel regression**: **void pytorch\\_flash::flash\\_fwd" in x for x in lines[at + 1:at + 4])
    assert "P1 · GPU worker on GPU 0 (python3, pid 3000 → 3000): no material change" in first
    assert "P3 · little GPU work, on GPU 0 (vllm-api-server, pid 2990 → 2990): no material change" in first
    assert "P4 · CUDA calls, no GPU work (tokenizer, pid 2991 → 2991)" in first
    # Each pair compared has its own section, the one that changed first; one legend at the end.
    heads = [x for x in md.splitlines() if x.startswith("## ")]
    assert heads[:4] == ["## Processes", "## P2 · GPU worker on GPU 1 (python3, pid 3001 → 3001)",
                         "## P1 · GPU worker on GPU 0 (python3, pid 3000 → 3000)",
                         "## P3 · little GPU work, on GPU 0 (vllm-api-server, pid 2990 → 2990)"]
    assert heads[-1] == "## Legend" and md.count("Legend") == 1
    assert (tmp_path / "report.P2.cycles.csv").exists() and not (tmp_path / "report.P4.cycles.csv").exists()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["format"] == "perfdiff-process-comparison"
    p2 = doc["pairs"][0]
    assert (p2["label"], p2["code"], p2["changed"], p2["abnormal"]["role"], p2["abnormal"]["gpus"]) == \
        (2, "compared", True, "worker", [1])
    assert p2["comparison"]["format"] == "perfdiff-comparison"
    assert doc["pairs"][-1]["code"] == "no-gpu-work" and doc["pairs"][-1]["comparison"] is None


def test_pid_still_compares_one_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n, a = _pair(tmp_path)
    code, out, _ = run_cli(["compare", n, a, "--pid", "3001", "--no-plots"], capsys)
    assert code == 0 and out.startswith("# Cross Performance Comparison") and "flash\\_fwd" in out
    code, out, err = run_cli(["compare", n, a, "--pid", "2991"], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "no GPU work of pid 2991" in err


@pytest.mark.parametrize("option", [["--html", "x.html"], ["--fail-on", "5"]])
def test_options_of_one_pair_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     option: list[str]) -> None:
    n, a = _pair(tmp_path)
    if option[0] == "--html":
        option = ["--html", str(tmp_path / "x.html")]
    code, out, err = run_cli(["compare", n, a, *option], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--pid" in err


def test_processes_pair_by_their_kernels_and_gpus_not_their_pids(tmp_path: Path) -> None:
    """The abnormal run's workers have other pids, in the other order of their GPUs: each is
    still compared with the worker of its GPU."""
    n, a = _pair(tmp_path, abnormal={"pids": (4001, 4000), "server": 3990, "tokenizer": 3991})
    comp = compare_processes(n, a, parallel=Parallel.serial())
    assert {p.pids for p in comp.pairs} == {(3000, 4001), (3001, 4000), (2990, 3990), (2991, 3991)}
    assert comp.pairs[0].pids == (3001, 4000) and comp.pairs[0].changed


def test_a_process_of_one_run_only_is_said_with_the_gpu_it_shares(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The normal run has no API server: the abnormal run's is said to be new, on GPU 0 where
    the first worker works too."""
    n, a = _pair(tmp_path, normal={"server": None})
    code, out, _ = run_cli(["compare", n, a, "--no-plots"], capsys)
    assert code == 0
    first = out[:out.index("\n## ")]
    assert "The abnormal run has 1 process with GPU work that the normal run does not." in first
    assert ("**P4 · little GPU work, on GPU 0 (vllm-api-server, pid 2990)**: in the abnormal run only "
            "(3 GPU activities on GPU 0, where P1 works too)") in first


def _proc(pid: int, gpus: tuple[int, ...], order: int, n: int = 100) -> ExportProcess:
    return ExportProcess(pid, "python3", ProcessRole.WORKER, gpus, n, 0.5, (), order)


def test_pairing_prefers_the_same_gpu_among_processes_running_the_same_kernels() -> None:
    """Workers running the same kernels pair by GPU, even where one run's kernels differ a
    little; a process with no kernel in common pairs with none."""
    same = frozenset({"gemm", "attention", "gelu", "softmax"})
    n = ProcessListing("n", (_proc(1, (0,), 0), _proc(2, (1,), 1)), {1: same, 2: same})
    a = ProcessListing("a", (_proc(7, (1,), 0), _proc(8, (0,), 1), _proc(9, (2,), 2)),
                       {7: same, 8: same - {"gelu"}, 9: frozenset({"other"})})
    pairs = pair_processes(n, a)
    assert [(p.pids, p.code, p.same_gpus) for p in pairs] == [
        ((1, 8), PairCode.COMPARED, True), ((2, 7), PairCode.COMPARED, True),
        ((None, 9), PairCode.ABNORMAL_ONLY, False)]
    assert pairs[0].kernels_in_common == pytest.approx(0.75)


def test_no_pair_comparable_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --cycle pattern no process has: every pair is refused, and so is the comparison."""
    n, a = _pair(tmp_path)
    code, out, err = run_cli(["compare", n, a, "--cycle", "no_such_range"], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "no pair of processes could be compared; P1 (pids 3000 → 3000)" in err


def test_an_export_against_a_trace_of_one_process_is_one_pair(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Beside a run that is no nsys export (here a bundle of the most active process), the
    export is read as that one process, as before."""
    n, a = _pair(tmp_path)
    code, _, err = run_cli(["import", n, "-o", tmp_path / "bundle"], capsys)
    assert code == 0, err
    code, out, _ = run_cli(["compare", tmp_path / "bundle", a, "--no-plots"], capsys)
    assert code == 0 and out.startswith("# Cross Performance Comparison")


def test_an_import_asked_to_stop_at_a_second_process_stops(tmp_path: Path) -> None:
    """import_nsys(several_processes="raise"): SeveralProcesses once the kernel rows show two
    processes, from the rows sampled before the read (the workers) or, where the sample misses
    a process with a kernel or two, from the table read whole; never with --pid, never for an
    export of one process."""
    from perfdiff.errors import InputError, SeveralProcesses
    from perfdiff.importers.nsys import import_nsys
    from perfdiff.importers.nsys.db import Export, connect
    from perfdiff.importers.nsys.process import sampled_pids

    n, _ = _pair(tmp_path)
    con = connect(n)
    try:
        assert sampled_pids(Export(con, n, None, "full")) == {3000, 3001, 2990}
    finally:
        con.close()
    with pytest.raises(SeveralProcesses, match="several processes launched kernels .pids 2990, 3000, 3001"):
        import_nsys(n, several_processes="raise")
    assert issubclass(SeveralProcesses, InputError)  # a caller that does not route it: one line, exit 2
    assert import_nsys(n, pid=3001, several_processes="raise").manifest["target"]["pid"] == 3001
    # One worker and, hidden from the sample, one kernel of another process.
    alone = write_server(tmp_path / "one.sqlite", (BASE, BASE), pids=(3000, 3000), server=None, tokenizer=None)
    assert import_nsys(alone, several_processes="raise").manifest["target"]["pid"] == 3000
    _sql(alone, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = ? WHERE rowid = 2", 4000 << 24)
    con = connect(alone)
    try:
        assert sampled_pids(Export(con, alone, None, "full")) == {3000}
    finally:
        con.close()
    with pytest.raises(SeveralProcesses, match="pids 3000, 4000"):
        import_nsys(alone, several_processes="raise")
    assert import_nsys(alone).manifest["target"]["pid"] == 3000  # the default: the most active one, as before


def test_exports_of_one_process_are_compared_without_a_scan_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`compare` of two exports of one process each reads no kernel table to tell how to
    compare them (their loading tells); exports of several processes are still routed."""
    from perfdiff.ranks import discover

    one = {"pids": (3000, 3000), "server": None, "tokenizer": None}
    n, a = _pair(tmp_path, normal=one, abnormal=one)
    read: list[str] = []
    monkeypatch.setattr(discover, "_export_processes", lambda path, *_: read.append(path))
    code, out, err = run_cli(["compare", n, a, "--no-plots"], capsys)
    assert code == 0 and out.startswith("# Cross Performance Comparison"), err
    assert read == []
    monkeypatch.undo()
    (tmp_path / "server").mkdir()
    n, a = _pair(tmp_path / "server")
    code, out, err = run_cli(["compare", n, a, "--no-plots"], capsys)
    assert code == 0 and out.startswith("# Process-by-Process Comparison"), err


def test_ranks_without_collectives_get_their_picture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--ranks reads each process as a rank; where none ran a collective the rank picture has
    one panel (the median cycle), not a crash."""
    n, a = _pair(tmp_path, normal={"server": None, "tokenizer": None}, abnormal={"server": None, "tokenizer": None})
    code, out, err = run_cli(["compare", n, a, "--ranks", "all", "--workers", "1", "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    assert (tmp_path / "r.ranks.png").stat().st_size > 0
    assert "r.ranks.png" in (tmp_path / "r.md").read_text()
