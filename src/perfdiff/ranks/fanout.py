"""Run the ranks' tasks on Dask: a local cluster sized to the machine, or an existing one.

Every process-level parallelism of a multi-rank comparison is here (the single pair's is in
perfdiff.parallel).  A local cluster has one single-threaded worker process per core, so a
worker holds one rank's trace at a time: its memory is bounded by the largest rank, not by the
world size; there are fewer workers when memory holds fewer such ranks.  Ranks go to the
workers in batches, one Dask task a batch, run one after the other there (still one trace at a
time).  Results are taken as they complete and their futures released, so the scheduler keeps
none of them.
Dask is the optional extra `perfdiff[ranks]`.
"""
from __future__ import annotations

import importlib.util
import logging
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfdiff.errors import InputError

__all__ = ["DASK_MISSING", "Fanout", "estimate_bytes", "local_workers", "require_dask", "start_method",
           "warm_up"]

DASK_MISSING = "comparing runs of many ranks needs Dask: pip install perfdiff[ranks]"
BASE_BYTES = 400 << 20  # a worker process with numpy, pandas and perfdiff imported
# Peak memory of importing a trace, per byte of the file (JSON text, gzip'ed JSON, SQLite, bundle).
BYTES_PER_FILE_BYTE = {".json": 3.0, ".gz": 25.0, ".sqlite": 1.5, "bundle": 4.0}


def require_dask() -> Any:
    """The `distributed` module, or InputError with the line that says how to get it."""
    try:
        import distributed
    except ImportError:
        raise InputError(DASK_MISSING) from None
    return distributed


def estimate_bytes(path: str) -> int:
    """Memory one rank's task needs at its peak (bytes), from the size of its input."""
    p = Path(path)
    try:
        if p.is_dir():
            size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            return BASE_BYTES + int(BYTES_PER_FILE_BYTE["bundle"] * size)
        factor = next((f for s, f in BYTES_PER_FILE_BYTE.items() if p.name.endswith(s)), 3.0)
        return BASE_BYTES + int(factor * p.stat().st_size)
    except OSError:
        return BASE_BYTES


def _memory_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def local_workers(tasks: int, largest_bytes: int) -> tuple[int, int]:
    """(workers, memory limit per worker in bytes) for a local cluster: one per core, no more
    than there are tasks, and only as many as memory holds ranks of the largest size."""
    mem = _memory_bytes()
    fit = max(1, mem // max(largest_bytes, 1))
    n = max(1, min(_cores(), tasks, fit))
    return n, max(largest_bytes, mem // n)


class Fanout:
    """A Dask client and how many workers it has; `map` runs one function over items."""

    def __init__(self, client: Any, workers: int, progress: bool, threads: int = 0):
        self.client = client
        self.workers = workers
        # Tasks the cluster runs at once (its workers' threads); 0: unknown, as for an
        # adaptive cluster with no worker yet.
        self.threads = threads
        self.progress = progress and sys.stderr.isatty()

    def map(self, fn: Callable[..., Any], items: Sequence[Any], what: str = "ranks", **kwargs: Any) -> list[Any]:
        """fn(item, **kwargs) for every item, on the workers, in the items' order.  The first
        task to fail cancels the others and raises its error here."""
        return self.map_timed(fn, items, what, **kwargs)[0]

    def map_timed(self, fn: Callable[..., Any], items: Sequence[Any], what: str = "ranks", batch: int = 1,
                  **kwargs: Any) -> tuple[list[Any], float]:
        """As `map`, with the items' own wall times summed (s, each measured in its worker):
        against the fan-out's wall time it says how busy the workers were.  `batch` items go
        to a worker as one Dask task, run one after the other (a worker still holds one item's
        data at a time); the progress line counts items."""
        from distributed import as_completed

        items = list(items)
        batch = max(1, batch)
        chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
        futures = self.client.map(_timed, chunks, _fn=fn, pure=False, **kwargs)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[Any] = [None] * len(futures)
        work_s = 0.0
        done = 0
        try:
            for fut in as_completed(futures):
                i = index[fut.key]
                out[i], seconds = fut.result()
                work_s += seconds
                fut.release()
                done += len(chunks[i])
                if self.progress:
                    print(f"\rperfdiff: {what} {done}/{len(items)}", end="", file=sys.stderr, flush=True)
        except BaseException:
            self.client.cancel(futures)
            raise
        finally:
            if self.progress and done:
                print(file=sys.stderr)
        return [r for chunk in out for r in chunk], work_s

    def batch_for(self, items: int) -> int:
        """Items per Dask task: about TASKS_PER_WORKER tasks for each thread of the cluster, so
        the fixed cost of a task (scheduling, the worker's and the scheduler's event loops) is
        spread over several items, while the last tasks are short enough to keep every thread
        busy to the end.  One item a task when the cluster's threads are not known (it may
        still grow)."""
        if self.threads <= 0:
            return 1
        return max(1, items // (self.threads * TASKS_PER_WORKER))


# Dask tasks per worker thread when items are batched.  A Dask task costs CPU in the worker's
# event loop and the scheduler's, which the items' own work competes with when every core runs
# a worker (docs/PERFORMANCE.md, multi-rank).
TASKS_PER_WORKER = 8


def _timed(chunk: list[Any], *, _fn: Callable[..., Any], **kwargs: Any) -> tuple[list[Any], float]:
    """([_fn(item, **kwargs) for each item], their wall time in s): one task, run on a worker."""
    t = time.perf_counter()
    results = [_fn(item, **kwargs) for item in chunk]
    return results, time.perf_counter() - t


# Our own cluster's workers have one task at a time and nobody watching a dashboard: the
# sampling profiler in every worker (each 10 ms), the GIL monitor and the system monitor cost
# CPU that the tasks need on a small machine.  A cluster given by address keeps its own settings.
QUIET_CLUSTER = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.gil.enabled": False,
                 "distributed.admin.system-monitor.interval": "2s", "distributed.worker.memory.monitor-interval": "500ms"}


# What the fork server imports once, so that every worker it forks starts with it.
PRELOAD = ("distributed", "numpy", "pandas", "perfdiff.ranks.part")


def start_method() -> str:
    """How a local cluster starts its worker processes: from a fork server (a clean
    single-threaded process that imported PRELOAD once and forks each worker from there:
    quick to start, and safe, where forking the driver would copy a process whose Dask
    threads may hold locks) where the platform has one; spawned otherwise, as Dask does by
    default."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def warm_up() -> None:
    """Start the fork server now, so that it imports PRELOAD while this process goes on with
    its own imports and finding the ranks (the local cluster's workers then fork at once).
    This process imports nothing of Dask for it: Dask names its own preload list on its first
    use of the fork-server context (importing that list here first), which a running server
    ignores.  InputError (how to get it) without Dask."""
    if start_method() != "forkserver":
        return
    if importlib.util.find_spec("distributed") is None:
        raise InputError(DASK_MISSING)
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()


def _preload() -> None:
    """Name PRELOAD to the fork server before Dask starts it.  Dask names its own list on its
    first use of the fork-server context and never again, so it is asked first and then
    replaced (a fork server already running keeps what it has; its workers import perfdiff on
    their first task)."""
    import dask
    from distributed.utils import get_mp_context

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        get_mp_context().set_forkserver_preload(list(PRELOAD))


SCHEDULER_TIMEOUT_S = 20.0  # to reach a scheduler given by address and hear it answer


def _probe(address: str, seconds: float) -> None:
    """InputError unless a Dask scheduler answers `identity` at `address` within `seconds`.
    Dask's Client waits forever on a service that accepts the connection and never answers
    (an HTTP server, the dashboard's port), and reads an answering one's bytes as a frame
    length (exabytes: "out of memory"); one question on a connection of our own tells."""
    import asyncio

    from distributed.comm import connect

    async def ask() -> Any:
        comm = await connect(address, timeout=seconds)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(ask(), seconds))
    except (TimeoutError, asyncio.TimeoutError):
        raise InputError(f"no Dask scheduler answers at {address} within {seconds:g} s") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    except MemoryError:  # bytes read as a frame length
        raise InputError(f"{address} does not answer as a Dask scheduler (it sent no Dask message)") from None
    except Exception as exc:  # noqa: BLE001 - whatever a service that is no scheduler sends back
        raise InputError(f"{address} does not answer as a Dask scheduler ({type(exc).__name__})") from None
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        raise InputError(f"{address} answers, but not as a Dask scheduler")


@contextmanager
def fanout(scheduler: str | None, *, workers: int | None, tasks: int, largest_bytes: int,
           progress: bool = False, processes: bool = True) -> Iterator[Fanout]:
    """A Fanout on the cluster at `scheduler` (its workers must read the inputs' paths), else
    on a local cluster started here (`workers`: how many, no more than there are tasks;
    default local_workers) and closed on leaving."""
    distributed = require_dask()
    if scheduler:
        _probe(scheduler, SCHEDULER_TIMEOUT_S)
        try:
            client = distributed.Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S:g}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        try:
            known = client.scheduler_info().get("workers", {})
            threads = sum(int(w.get("nthreads", 0) or 0) for w in known.values())
            yield Fanout(client, max(1, len(known)), progress, threads)
        finally:
            client.close()
        return
    n, limit = local_workers(tasks, largest_bytes)
    if workers:
        n = max(1, min(workers, tasks))  # a worker more than there are tasks would start and idle
        limit = max(largest_bytes, _memory_bytes() // n)
    import dask

    method = start_method()
    if method == "forkserver":
        _preload()
    with dask.config.set({"distributed.worker.multiprocessing-method": method, **QUIET_CLUSTER}):
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=processes,
                                           memory_limit=limit, dashboard_address=":0",
                                           # A task's error reaches the client as an exception; what the
                                           # workers log (a heartbeat to a scheduler closing) is noise.
                                           silence_logs=logging.CRITICAL)
    try:
        with distributed.Client(cluster) as client:
            yield Fanout(client, n, progress, n)  # one thread a worker
    finally:
        cluster.close()
