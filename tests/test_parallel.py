"""perfdiff.parallel: work in forked workers (the two runs, the function tests, the μ tests)
gives the same report as in this process, and errors keep their meaning (one line, exit 2)
or, for bugs, their traceback."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from perfdiff import parallel
from perfdiff.api import compare
from perfdiff.parallel import Parallel
from perfdiff.errors import InputError, InternalError

RODINIA = "kmcho2019/Rodinia_3.1_Gaussian"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], a: Path, b: Path, name: str) -> dict:
    code, _, err = run_cli(["compare", a, b, "-o", tmp_path / f"{name}.md", "--json", tmp_path / f"{name}.json"],
                           capsys)
    assert code == 0, err
    return json.loads((tmp_path / f"{name}.json").read_text())


def _same(x: dict, y: dict) -> None:
    assert x["functions"] == y["functions"] and x["findings"] == y["findings"] and x["context"] == y["context"]


@pytest.mark.real
def test_forked_loading_gives_the_same_report(real: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite"
    forks = []
    real_fork = os.fork
    monkeypatch.setattr(parallel.os, "fork", lambda: forks.append(1) or real_fork())
    serial = compare(a, b, parallel=Parallel(pair_min_bytes=1 << 40, pool_min_cycles=1 << 40))
    assert not forks
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(parallel, "_spool_dir", lambda need: str(spool))
    forked = compare(a, b, parallel=Parallel(cores=2, pair_min_bytes=0, pool_min_cycles=1 << 40))
    assert len(forks) == 2
    _same(forked.to_json(), serial.to_json())
    assert forked.to_markdown() == serial.to_markdown()
    assert not list(spool.iterdir())  # nothing left behind


@pytest.mark.real
def test_function_and_mu_tests_in_a_pool_give_the_same_report(real: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The function tests run in a forked pool beside the rest of the comparison (long runs),
    the μ tests on every core (many), or both serially: the same numbers either way, and the
    pools are gone afterwards."""
    import multiprocessing

    a, b = real / RODINIA / "report3.sqlite", real / RODINIA / "report2.sqlite"
    serial = compare(a, b, parallel=Parallel.serial())
    pools = []
    real_pool = parallel._fork_pool
    monkeypatch.setattr(parallel, "_fork_pool", lambda n: pools.append(n) or real_pool(n))
    pooled = compare(a, b, parallel=Parallel(cores=2, pair_min_bytes=1 << 40, pool_min_cycles=0, mu_min_pairs=0))
    assert len(pools) >= 1 and pools[0] >= 2
    _same(pooled.to_json(), serial.to_json())
    assert parallel._SHARED is None and not multiprocessing.active_children()


def test_a_pool_map_hands_its_data_over_by_fork() -> None:
    """`map` and `start_map` call fn(shared, item) in forked workers: the shared data is not
    pickled (a lambda's closure could not be) and comes back cleared."""
    data = np.arange(100)
    par = Parallel(cores=2)
    got = par.map(_take, list(range(40)), shared=data, large=True)
    assert got == [int(data[i]) * 2 for i in range(40)]
    pending = par.start_map(_take, list(range(5)), shared=data, large=True)
    assert pending.result() == [0, 2, 4, 6, 8]
    assert parallel._SHARED is None


def _take(shared: np.ndarray, i: int) -> int:
    return int(shared[i]) * 2


def pair(par: Parallel, fn, args: tuple, sizes: tuple[int, int]) -> list:
    """[fn(args[0], cores), fn(args[1], cores)] through Parallel.meet_pair, with nothing to agree on."""
    return par.meet_pair(lambda a, cores: (fn(a, cores), None), lambda summaries: None,
                         lambda state, decision: state, args, sizes)


def side(arg: tuple[str, int], cores: int) -> dict:
    kind, n = arg
    if kind == "bad":
        raise InputError("not an nsys export (no CUPTI_ACTIVITY_KIND_KERNEL table)", path="/x/b.sqlite")
    if kind == "bug":
        raise ZeroDivisionError("a bug in a worker")
    return {"values": np.arange(n, dtype=np.int64), "name": kind}


def test_arrays_come_back_whole_and_writable() -> None:
    out = pair(Parallel(cores=2, pair_min_bytes=0), side, (("a", 1_000_000), ("b", 0)), (1 << 30, 1 << 30))
    assert out[0]["name"] == "a" and np.array_equal(out[0]["values"], np.arange(1_000_000))
    out[0]["values"][0] = 7  # copy-on-write mapping: the result is an ordinary array
    assert out[1]["values"].size == 0


def test_a_bad_input_in_a_worker_is_the_same_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        pair(Parallel(cores=2, pair_min_bytes=0), side, (("a", 10), ("bad", 10)), (1 << 30, 1 << 30))
    assert str(err.value) == "/x/b.sqlite: not an nsys export (no CUPTI_ACTIVITY_KIND_KERNEL table)"
    assert err.value.code == 2


def test_a_bug_in_a_worker_is_a_bug_with_its_traceback() -> None:
    with pytest.raises(InternalError, match=r"ZeroDivisionError: a bug in a worker") as info:
        pair(Parallel(cores=2, pair_min_bytes=0), side, (("bug", 1), ("a", 1)), (1 << 30, 1 << 30))
    assert info.value.type_name == "ZeroDivisionError"
    assert "Traceback" in info.value.traceback_text and "ZeroDivisionError" in info.value.traceback_text


def test_bad_trace_through_the_cli_with_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Parallel, "pair_min_bytes", 0)
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
    from perfdiff.api import _input_bytes

    assert (_input_bytes(tmp_path / "b"), _input_bytes(trace)) == (0, 1000)


def killed(arg: tuple[str, int], cores: int) -> dict:
    if arg[0] == "oom":
        os.kill(os.getpid(), 9)  # as the kernel's OOM killer would
    return {"name": arg[0]}


def test_a_worker_killed_is_one_line_naming_the_input() -> None:
    from perfdiff.errors import PerfdiffError

    with pytest.raises(PerfdiffError, match=r"ended without a result \(killed by signal 9; out of memory\?\)"):
        pair(Parallel(cores=2, pair_min_bytes=0), killed, (("a", 1), ("oom", 1)), (1 << 30, 1 << 30))


def test_a_worker_has_half_the_cores_for_its_run() -> None:
    out = pair(Parallel(cores=8, pair_min_bytes=0), lambda _, cores: cores, (0, 1), (1, 1))
    assert out == [4, 4]
    assert pair(Parallel(cores=8), lambda _, cores: cores, (0, 1), (1, 1)) == [8, 8]  # in-process: all


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
def test_function_tests_run_here_when_the_pool_fails(real: Path, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """No fork at submit (EAGAIN), or a worker killed (BrokenProcessPool): the tests run in
    this process instead, with the same results, and the pool is shut down."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

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
    serial = compare(a, b, parallel=Parallel.serial())
    monkeypatch.setattr(parallel, "_fork_pool", lambda n: FailingPool())
    failed = compare(a, b, parallel=Parallel(cores=2, pair_min_bytes=1 << 40, pool_min_cycles=0))
    _same(failed.to_json(), serial.to_json())
    assert FailingPool.shut and parallel._SHARED is None


# --- a standby process ----------------------------------------------------------------

def _ready_marker(path: str) -> None:
    Path(path).write_text(str(os.getpid()))


def _pid_and(x: int) -> tuple[int, int]:
    return os.getpid(), x * 2


def _bad_input(path: str) -> None:
    raise InputError("no such trace", path=path)


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not this one")


def _unpicklable() -> None:
    raise _Unpicklable("a bug")


def test_a_standby_readies_itself_then_answers_its_one_call(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    s = parallel.Standby.fork(lambda: _ready_marker(str(marker)), "the test's standby")
    assert s is not None
    pid, doubled = s.call(_pid_and, 21)
    assert doubled == 42 and pid == int(marker.read_text()) != os.getpid()  # readied and called there
    with pytest.raises(ProcessLookupError):  # it ended, and was reaped
        os.kill(pid, 0)


def test_a_standby_raises_its_errors_here(tmp_path: Path) -> None:
    s = parallel.Standby.fork(lambda: None, "the test's standby")
    with pytest.raises(InputError, match="no such trace") as e:
        s.call(_bad_input, str(tmp_path / "x"))
    assert e.value.code == 2
    s = parallel.Standby.fork(lambda: None, "the test's standby")
    with pytest.raises(InternalError, match="_Unpicklable: a bug") as bug:
        s.call(_unpicklable)
    assert "_unpicklable" in bug.value.traceback_text
    # What failed while it readied itself is raised at the call, not before.
    s = parallel.Standby.fork(lambda: _bad_input("early"), "the test's standby")
    with pytest.raises(InputError, match="no such trace"):
        s.call(_pid_and, 1)


def test_a_standby_that_dies_is_one_line_and_one_never_called_ends(tmp_path: Path) -> None:
    s = parallel.Standby.fork(lambda: os.kill(os.getpid(), 9), "the test's standby")
    with pytest.raises(parallel.PerfdiffError, match="the test's standby ended without a result"):
        s.call(_pid_and, 1)
    s = parallel.Standby.fork(lambda: __import__("time").sleep(60), "the test's standby")
    pid = s.pid
    s.close()  # at once: it is not waited for while it readies itself
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_process_forked_after_a_standby_does_not_hold_its_pipes_open() -> None:
    """A standby reads its call to the pipe's end: a process forked later (a worker loading a
    run, a pool's) must not keep a copy of that pipe, or the call waits until it ends."""
    import select

    s = parallel.Standby.fork(lambda: None, "the test's standby")
    assert s is not None
    release_r, release_w = os.pipe()
    later = os.fork()
    if later == 0:  # lives until told, or 30 s at most
        try:
            os.close(release_w)
            select.select([release_r], [], [], 30.0)
        finally:
            os._exit(0)
    os.close(release_r)
    try:
        pid, doubled = s.call(_pid_and, 21)
        assert doubled == 42
        assert os.waitpid(later, os.WNOHANG) == (0, 0)  # answered while the later process lives
    finally:
        os.close(release_w)
        os.waitpid(later, 0)
    assert not parallel._PARENT_ENDS  # the standby's ends were closed and forgotten


@pytest.mark.skipif(sys.platform != "linux", reason="a Linux memory setting")
def test_fresh_memory_comes_in_small_pages() -> None:
    """keep_freed_memory tells numpy not to ask for transparent huge pages: on the standard
    machine a fresh GB cost twice the system time in them (docs/PERFORMANCE_CHANGES.md)."""
    import platform

    from perfdiff.parallel import keep_freed_memory

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    multiarray = np._core.multiarray
    before = multiarray._get_madvise_hugepage()
    try:
        multiarray._set_madvise_hugepage(True)
        keep_freed_memory()
        assert not multiarray._get_madvise_hugepage()
    finally:
        multiarray._set_madvise_hugepage(before)
