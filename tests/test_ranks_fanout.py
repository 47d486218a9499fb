"""The local workers a multi-rank comparison starts itself: processes forked from a fork server
that imported what a rank's task needs (they start with perfdiff imported, in a fraction of a
second), no Dask on this path, and a comparison that runs through them end to end."""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from perfdiff.ranks import compare_ranks
from perfdiff.ranks.fanout import fanout, start_method

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402

pytestmark = pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(),
                                reason="workers come from a fork server where the platform has one")


def _imported(name: str) -> bool:
    return name in sys.modules


def test_local_workers_start_with_perfdiff_imported() -> None:
    assert start_method() == "forkserver"
    with fanout(None, workers=2, tasks=2, largest_bytes=1 << 20) as fan:
        seen = fan.map(_imported, ["perfdiff.ranks.part", "perfdiff.ranks.part"])
    assert fan.workers == 2 and seen == [True, True]


def test_a_failing_task_raises_its_error_here() -> None:
    """A task's PerfdiffError reaches the caller as itself, with its message and exit code."""
    from perfdiff.errors import InputError

    with pytest.raises(InputError, match="no such rank"):
        with fanout(None, workers=2, tasks=3, largest_bytes=1 << 20) as fan:
            fan.map(_fail_on_two, [1, 2, 3])


def test_a_worker_that_dies_is_one_line() -> None:
    """A worker killed while reading a rank (the kernel's OOM killer, a crash in a library)
    breaks the pool: one line that says so and what to try, exit 2, no traceback."""
    from perfdiff.errors import PerfdiffError

    with pytest.raises(PerfdiffError, match="worker process ended while reading a rank") as info:
        with fanout(None, workers=2, tasks=2, largest_bytes=1 << 20) as fan:
            fan.map(_die_on_two, [1, 2])
    assert info.value.code == 2 and "\n" not in str(info.value)


def _die_on_two(x: int) -> int:
    if x == 2:
        os._exit(9)
    return x


def _fail_on_two(x: int) -> int:
    from perfdiff.errors import InputError

    if x == 2:
        raise InputError("no such rank")
    return x


def test_comparison_through_local_worker_processes(tmp_path: Path) -> None:
    n, a = gen_ranks.generate(tmp_path, fmt="kineto", plant=gen_ranks.Plant(straggler=1), ranks=4, kernels=1_200,
                              steps=16, collectives=3)
    res = compare_ranks(n, a, workers=2)
    assert res.workers == 2 and res.stragglers[1].culprit == 1


def test_the_phases_are_timed(tmp_path: Path) -> None:
    """Each phase's wall time is in the result and its JSON, in order, and they add up to no
    more than the whole call; the phases of tasks say how many and their own time."""
    import time

    from perfdiff.render.ranks import rank_json

    n, a = gen_ranks.generate(tmp_path, fmt="nsys", plant=gen_ranks.Plant(straggler=1), ranks=2, kernels=600,
                              steps=12, collectives=2)
    t0 = time.perf_counter()
    res = compare_ranks(n, a, workers=1, processes=False)
    whole = time.perf_counter() - t0
    assert [p.name for p in res.phases] == ["start", "plan", "ranks", "analysis"]
    assert all(p.wall_s > 0 for p in res.phases) and sum(p.wall_s for p in res.phases) <= whole
    assert [p["name"] for p in rank_json(res)["phases"]] == ["start", "plan", "ranks", "analysis"]
    # The phases of tasks count them and sum their own times: one worker is busy at most
    # the phase's whole wall time.
    start, plan, ranks, analysis = res.phases
    assert (plan.tasks, ranks.tasks) == (2, 4) and start.tasks == analysis.tasks == 0
    assert 0 < plan.work_s <= plan.wall_s and 0 < ranks.work_s <= ranks.wall_s
    assert [p["work_s"] for p in rank_json(res)["phases"]][::3] == [None, None]


def test_warm_up_starts_the_fork_server_with_the_preload() -> None:
    """Started early, the fork server imports what the workers need while the driver goes on."""
    from multiprocessing import forkserver

    from perfdiff.ranks.fanout import PRELOAD, warm_up

    warm_up()
    server = forkserver._forkserver
    assert server._forkserver_pid is not None and server._preload_modules == list(PRELOAD)


def test_a_local_comparison_needs_no_dask(tmp_path: Path) -> None:
    """Ranks compared on this machine run in a pool of our own: Dask (the extra perfdiff[ranks])
    is for a cluster given by address, and is never imported here."""
    import subprocess

    n, a = gen_ranks.generate(tmp_path, fmt="nsys", plant=gen_ranks.Plant(straggler=1), ranks=2, kernels=600,
                              steps=12, collectives=2)
    code = ("import sys; from perfdiff.ranks import compare_ranks\n"
            f"r = compare_ranks({str(n)!r}, {str(a)!r}, workers=2)\n"
            "print(r.workers, r.stragglers[1].culprit, 'distributed' in sys.modules, 'dask' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2", "1", "False", "False"]


def test_the_command_starts_the_fork_server_before_pandas(tmp_path: Path) -> None:
    """`perfdiff compare` tells runs of many ranks from a pair without importing pandas, and
    starts the local cluster's fork server then: its imports (~0.9 s) run beside the driver's
    from the start, not after them."""
    import subprocess

    n, a = gen_ranks.generate(tmp_path, fmt="kineto", plant=gen_ranks.Plant(), ranks=2, kernels=200, steps=4,
                              collectives=1)
    code = ("import sys; import perfdiff.ranks.fanout as f\n"
            "def seen(): print('pandas' in sys.modules, 'numpy' in sys.modules, flush=True); raise SystemExit(0)\n"
            "f.warm_up = seen\n"
            f"from perfdiff.cli import main; main(['compare', {str(n)!r}, {str(a)!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_driver_imports_no_scipy_stats() -> None:
    """Importing the driver of a multi-rank comparison imports no scipy: scipy.stats (~0.5 s)
    would sit on the way to the cluster; the statistics' special functions are perfdiff's."""
    import subprocess

    code = ("import sys, perfdiff.api, perfdiff.ranks.pipeline, perfdiff.render.ranks; "
            "print('scipy.special' in sys.modules, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_workers_preload_no_analysis() -> None:
    """What the fork server imports for every worker (PRELOAD) leaves out the analysis and
    scipy, which the rank tasks do not use: each would add to the time before the first task
    and to every worker's memory."""
    import subprocess

    from perfdiff.ranks.fanout import PRELOAD

    code = (f"import sys; [__import__(m) for m in {list(PRELOAD)!r}]; "
            "print('scipy' in sys.modules, 'perfdiff.analyze' in sys.modules, 'perfdiff.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def _square(x: int, *, plus: int = 0) -> int:
    return x * x + plus


def _threads_cluster(threads: int):
    import distributed

    return distributed.LocalCluster(n_workers=1, threads_per_worker=threads, processes=False, dashboard_address=":0")


def test_batched_items_come_back_in_order_from_fewer_tasks() -> None:
    """On a Dask cluster, items go to the workers in batches (one Dask task each), run one after
    the other there, and come back flat in the items' order; a batch of one is a task per item.
    The local pool keeps the order too, one item a task."""
    from distributed import get_task_stream

    with _threads_cluster(2) as cl, fanout(cl.scheduler_address, workers=None, tasks=10, largest_bytes=1 << 20) as fan:
        for batch, tasks in ((3, 4), (1, 10)):
            with get_task_stream(fan.client) as ts:
                out, work = fan.map_timed(_square, range(10), batch=batch, plus=1)
            assert out == [x * x + 1 for x in range(10)] and work >= 0
            assert len({r["key"] for r in ts.data}) == tasks
        # About eight tasks a thread: 128 ranks on 2 threads go 8 to a task; few ranks, one each.
        assert (fan.batch_for(128), fan.batch_for(10)) == (8, 1)
    with fanout(None, workers=2, tasks=10, largest_bytes=1 << 20) as fan:
        out, work = fan.map_timed(_square, range(10), batch=3, plus=1)
        assert out == [x * x + 1 for x in range(10)] and work >= 0 and fan.batch_for(128) == 1


def test_batches_leave_the_comparison_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfdiff.ranks import fanout as fanout_module

    n, a = gen_ranks.generate(tmp_path, fmt="nsys", plant=gen_ranks.Plant(straggler=2), ranks=4, kernels=800,
                              steps=12, collectives=2)
    one = compare_ranks(n, a, processes=False)
    monkeypatch.setattr(fanout_module, "TASKS_PER_WORKER", 1)  # 8 rank tasks in 4 Dask tasks of 2
    with _threads_cluster(2) as cl:
        batched = compare_ranks(n, a, scheduler=cl.scheduler_address)
    assert batched.rows == one.rows and batched.stragglers == one.stragglers and batched.findings == one.findings
    assert [p.tasks for p in batched.phases] == [p.tasks for p in one.phases] == [0, 2, 8, 0]


def test_batches_follow_the_threads_of_a_cluster_given_by_address() -> None:
    """A cluster reached by --scheduler: batches are sized by its workers' threads (one worker
    of four threads runs four tasks at once), and one rank a task while no worker is known."""
    from perfdiff.ranks.fanout import DaskFanout

    with _threads_cluster(4) as cl:
        with fanout(cl.scheduler_address, workers=None, tasks=64, largest_bytes=1 << 20) as fan:
            assert (fan.workers, fan.threads) == (1, 4)
            assert fan.batch_for(64) == 2  # 32 tasks: 8 for each thread
    assert DaskFanout(client=None, workers=1, progress=False).batch_for(1024) == 1


@pytest.mark.parametrize(("reply", "needle"), [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "does not answer as a Dask scheduler"),
    (None, "no Dask scheduler answers at"),
])
def test_an_address_that_is_no_scheduler_is_one_line(reply: bytes | None, needle: str, monkeypatch) -> None:
    """--scheduler at the dashboard's port, or any service that is no scheduler: Dask's Client
    waited forever on one that never answers, and read an HTTP reply as a frame length of
    exabytes ("out of memory").  One question tells, within the timeout (1 s here)."""
    import socket
    import threading

    import perfdiff.ranks.fanout as fo
    from perfdiff.errors import InputError

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setattr(fo, "SCHEDULER_TIMEOUT_S", 1.0)
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        with pytest.raises(InputError, match=needle) as e:
            with fanout(address, workers=None, tasks=2, largest_bytes=1 << 20):
                pass
        assert "\n" not in str(e.value)
    finally:
        server.close()
        for c in held:
            c.close()
