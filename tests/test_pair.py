"""perfdiff.pair: both runs loaded in forked workers give the same report as in-process, and
errors keep their meaning (one line, exit 2) or, for bugs, their traceback."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from perfdiff import pair
from perfdiff.errors import InputError

RODINIA = "kmcho2019/Rodinia_3.1_Gaussian"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], a: Path, b: Path, name: str) -> dict:
    code, _, err = run_cli(["compare", a, b, "-o", tmp_path / f"{name}.md", "--json", tmp_path / f"{name}.json"],
                           capsys)
    assert code == 0, err
    return json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.real
def test_forked_loading_gives_the_same_report(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite"
    forks = []
    real_fork = os.fork
    monkeypatch.setattr(pair.os, "fork", lambda: forks.append(1) or real_fork())
    monkeypatch.setattr(pair, "PARALLEL_MIN_BYTES", 1 << 40)  # in-process
    serial = report(tmp_path, capsys, a, b, "serial")
    assert not forks
    monkeypatch.setattr(pair, "PARALLEL_MIN_BYTES", 0)  # two workers
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(pair, "_spool_dir", lambda need: str(spool))
    forked = report(tmp_path, capsys, a, b, "forked")
    assert len(forks) == 2
    assert forked["functions"] == serial["functions"] and forked["findings"] == serial["findings"]
    md = [(tmp_path / f"{n}.md").read_text().replace(f"{n}.cycles.csv", "X") for n in ("serial", "forked")]
    assert md[0] == md[1]
    assert not list(spool.iterdir())  # nothing left behind


@pytest.mark.real
def test_function_tests_in_a_pool_give_the_same_report(real: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The function tests run in a forked pool beside the rest of the comparison (long runs)
    or serially: the same numbers either way, and the pool is gone afterwards."""
    import multiprocessing

    from perfdiff import analyze

    a, b = real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite"
    monkeypatch.setattr(analyze, "PARALLEL_MIN_CYCLES", 1 << 40)
    serial = report(tmp_path, capsys, a, b, "serial")
    pools = []
    real_pool = analyze._fork_pool
    monkeypatch.setattr(analyze, "_fork_pool", lambda n: pools.append(n) or real_pool(n))
    monkeypatch.setattr(analyze, "PARALLEL_MIN_CYCLES", 0)
    pooled = report(tmp_path, capsys, a, b, "pooled")
    assert pools and pools[0] >= 2
    assert pooled["functions"] == serial["functions"] and pooled["findings"] == serial["findings"]
    assert analyze._FUNCTION_TEST_DATA is None and not multiprocessing.active_children()


def side(arg: tuple[str, int], cores: int | None = None) -> dict:
    kind, n = arg
    if kind == "bad":
        raise InputError("not an nsys export (no CUPTI_ACTIVITY_KIND_KERNEL table)", path="/x/b.sqlite")
    if kind == "bug":
        raise ZeroDivisionError("a bug in a worker")
    return {"values": np.arange(n, dtype=np.int64), "name": kind}


def test_arrays_come_back_whole_and_writable() -> None:
    out = pair.map_pair(side, (("a", 1_000_000), ("b", 0)), (1 << 30, 1 << 30))
    assert out[0]["name"] == "a" and np.array_equal(out[0]["values"], np.arange(1_000_000))
    out[0]["values"][0] = 7  # copy-on-write mapping: the result is an ordinary array
    assert out[1]["values"].size == 0


def test_a_bad_input_in_a_worker_is_the_same_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        pair.map_pair(side, (("a", 10), ("bad", 10)), (1 << 30, 1 << 30))
    assert str(err.value) == "/x/b.sqlite: not an nsys export (no CUPTI_ACTIVITY_KIND_KERNEL table)"
    assert err.value.code == 2


def test_a_bug_in_a_worker_is_a_bug_with_its_traceback() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)failed in its worker process.*ZeroDivisionError: a bug in a worker"):
        pair.map_pair(side, (("bug", 1), ("a", 1)), (1 << 30, 1 << 30))


def test_bad_trace_through_the_cli_with_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pair, "PARALLEL_MIN_BYTES", 0)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(["compare", bad, bad, "-o", tmp_path / "r.md"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "bad.json" in err and "Traceback" not in err


def test_bundles_load_in_process_traces_in_workers(tmp_path: Path) -> None:
    from perfdiff.bundle import base_manifest, write_bundle
    from perfdiff.bundle import RunData, empty_table

    write_bundle(tmp_path / "b", RunData(base_manifest(), empty_table("activity"), empty_table("samples"),
                                         empty_table("markers")))
    trace = tmp_path / "t.sqlite"
    trace.write_bytes(b"x" * 1000)
    assert pair.input_sizes((tmp_path / "b", trace)) == (0, 1000)


def killed(arg: tuple[str, int], cores: int | None = None) -> dict:
    if arg[0] == "oom":
        os.kill(os.getpid(), 9)  # as the kernel's OOM killer would
    return {"name": arg[0]}


def test_a_worker_killed_is_one_line_naming_the_input() -> None:
    from perfdiff.errors import PerfdiffError

    with pytest.raises(PerfdiffError, match=r"ended without a result \(killed by signal 9; out of memory\?\)"):
        pair.map_pair(killed, (("a", 1), ("oom", 1)), (1 << 30, 1 << 30))


def test_a_worker_has_half_the_cores_for_its_run() -> None:
    from perfdiff.importers.common import resolve_cores

    cores = os.cpu_count() or 1
    assert resolve_cores(None) == cores
    out = pair.map_pair(lambda _, cores=None: resolve_cores(cores), (0, 1), (1 << 30, 1 << 30))
    assert out == [max(1, cores // 2)] * 2
    assert resolve_cores(None) == cores  # the parent's own count is unchanged


@pytest.mark.real
def test_nsys_reads_the_runtime_table_without_a_thread_when_no_core_is_spare(
        real: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from perfdiff.importers import nsys as nsys_mod

    path = real / RODINIA / "report3.sqlite"
    submitted = []
    real_submit = ThreadPoolExecutor.submit
    monkeypatch.setattr(ThreadPoolExecutor, "submit", lambda self, *a, **k: submitted.append(a) or real_submit(self, *a, **k))
    threaded = nsys_mod.import_nsys(path, cores=2)
    assert len(submitted) == 1
    serial = nsys_mod.import_nsys(path, cores=1)
    assert len(submitted) == 1  # no second helper thread
    import pandas as pd

    pd.testing.assert_frame_equal(serial.activity, threaded.activity)


@pytest.mark.real
@pytest.mark.parametrize("failure", ["submit", "broken"])
def test_function_tests_run_here_when_the_pool_fails(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """No fork at submit (EAGAIN), or a worker killed (BrokenProcessPool): the tests run in
    this process instead, with the same results, and the pool is shut down."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from perfdiff import analyze

    class FailingPool:
        shut = False

        def submit(self, fn, *args):
            if failure == "submit":
                raise OSError(11, "Resource temporarily unavailable")
            fut: Future = Future()
            fut.set_exception(BrokenProcessPool("a worker died"))
            return fut

        def shutdown(self, cancel_futures: bool = False) -> None:
            FailingPool.shut = True

    a, b = real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite"
    monkeypatch.setattr(analyze, "PARALLEL_MIN_CYCLES", 1 << 40)
    serial = report(tmp_path, capsys, a, b, "serial")
    monkeypatch.setattr(analyze, "PARALLEL_MIN_CYCLES", 0)
    monkeypatch.setattr(analyze, "_fork_pool", lambda n: FailingPool())
    failed = report(tmp_path, capsys, a, b, "failed")
    assert failed["functions"] == serial["functions"] and FailingPool.shut
    assert analyze._FUNCTION_TEST_DATA is None


@pytest.mark.real
def test_the_callers_threads_start_after_the_test_pool_forked(real: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare_runs calls `tests_started` once its pool exists: the CSV thread never runs
    while the pool forks."""
    from perfdiff import analyze
    from perfdiff.attribute import attribute_activity
    from perfdiff.load import open_run
    from perfdiff.segment import segment_cycles

    order = []
    real_pool = analyze._fork_pool
    monkeypatch.setattr(analyze, "_fork_pool", lambda n: order.append("pool") or real_pool(n))
    monkeypatch.setattr(analyze, "PARALLEL_MIN_CYCLES", 0)
    runs = [open_run(real / RODINIA / f"{n}.sqlite") for n in ("report3", "report2")]
    cyc = [segment_cycles(r) for r in runs]
    mats = (attribute_activity(runs[0], cyc[0]), attribute_activity(runs[1], cyc[1]))
    analyze.compare_runs(runs[0], runs[1], cyc[0], cyc[1], matrices=mats, tests_started=lambda: order.append("started"))
    assert order == ["pool", "started"]
