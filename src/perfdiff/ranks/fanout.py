"""Run the ranks' tasks: in worker processes of this machine, or on an existing Dask cluster.

Every process-level parallelism of a multi-rank comparison is here (the single pair's is in
perfdiff.parallel).  On this machine a pool of single-threaded worker processes, one per core,
forked from a fork server that imported what a rank's task needs: a worker holds one rank's
trace at a time, so its memory is bounded by the largest rank, not by the world size, and
there are fewer workers when memory holds fewer such ranks.  No scheduler runs: a task costs a
pickle each way, where a Dask task costs a few ms of CPU in the scheduler's and the worker's
event loops, taken from the cores the tasks run on (docs/PERFORMANCE.md, multi-rank).  Given a
scheduler's address (`--scheduler`), the tasks go to that Dask cluster instead, in batches (one
Dask task a batch); Dask is the optional extra `perfdiff[ranks]`, needed only for that.
Results are taken as they complete and their futures released, so nobody keeps them.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfdiff.errors import InputError, PerfdiffError

__all__ = ["DASK_MISSING", "Fanout", "estimate_bytes", "local_workers", "require_dask", "start_method",
           "warm_up"]

DASK_MISSING = "a Dask scheduler (--scheduler) needs Dask: pip install perfdiff[ranks]"
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


def local_workers(tasks: int, largest_bytes: int) -> int:
    """Local worker processes: one per core, no more than there are tasks, and only as many as
    memory holds ranks of the largest size (`largest_bytes`, estimate_bytes)."""
    fit = max(1, _memory_bytes() // max(largest_bytes, 1))
    return max(1, min(_cores(), tasks, fit))


class Fanout:
    """Where the tasks run and how many run at once; `map` runs one function over items."""

    def __init__(self, workers: int, progress: bool, threads: int = 0):
        self.workers = workers
        # Tasks run at once (the workers' threads); 0: unknown, as for an adaptive Dask cluster
        # with no worker yet.
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
        to a worker as one task, run one after the other (a worker still holds one item's
        data at a time); the progress line counts items."""
        items = list(items)
        batch = max(1, batch)
        chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
        out: list[Any] = [None] * len(chunks)
        work_s = 0.0
        done = 0
        try:
            for i, (results, seconds) in self._completed(fn, chunks, kwargs):
                out[i] = results
                work_s += seconds
                done += len(chunks[i])
                if self.progress:
                    print(f"\rperfdiff: {what} {done}/{len(items)}", end="", file=sys.stderr, flush=True)
        finally:
            if self.progress and done:
                print(file=sys.stderr)
        return [r for chunk in out for r in chunk], work_s

    def batch_for(self, items: int) -> int:
        """Items per task: one (a task of the local pool costs next to nothing)."""
        return 1

    def _completed(self, fn: Callable[..., Any], chunks: list[list[Any]],
                   kwargs: dict[str, Any]) -> Iterator[tuple[int, tuple[list[Any], float]]]:
        """(chunk index, _timed's result) of each chunk as it completes."""
        raise NotImplementedError


class InlineFanout(Fanout):
    """Every task in this process, one after the other (`processes=False`: a library caller's
    or a test's choice)."""

    def _completed(self, fn, chunks, kwargs):
        for i, chunk in enumerate(chunks):
            yield i, _timed(chunk, _fn=fn, **kwargs)


class PoolFanout(Fanout):
    """Worker processes of this machine (concurrent.futures), forked from the fork server."""

    def __init__(self, pool: cf.ProcessPoolExecutor, workers: int, progress: bool):
        super().__init__(workers, progress, workers)
        self.pool = pool

    def _completed(self, fn, chunks, kwargs):
        futures = {self.pool.submit(_timed, chunk, _fn=fn, **kwargs): i for i, chunk in enumerate(chunks)}
        try:
            for fut in cf.as_completed(futures):
                i = futures.pop(fut)
                try:
                    yield i, fut.result()
                except cf.BrokenExecutor:  # a worker died (killed for memory, a crash in a library)
                    raise PerfdiffError("a worker process ended while reading a rank (out of memory?); try fewer "
                                        "--workers") from None
        finally:
            for fut in futures:  # the first failure (or an interrupt) cancels what has not started
                fut.cancel()


class DaskFanout(Fanout):
    """A Dask cluster's client; rank tasks go in batches, about TASKS_PER_WORKER tasks a thread."""

    def __init__(self, client: Any, workers: int, progress: bool, threads: int = 0):
        super().__init__(workers, progress, threads)
        self.client = client

    def batch_for(self, items: int) -> int:
        """Items per Dask task: about TASKS_PER_WORKER tasks for each thread of the cluster, so
        the fixed cost of a task (scheduling, the worker's and the scheduler's event loops) is
        spread over several items, while the last tasks are short enough to keep every thread
        busy to the end.  One item a task when the cluster's threads are not known (it may
        still grow)."""
        if self.threads <= 0:
            return 1
        return max(1, items // (self.threads * TASKS_PER_WORKER))

    def _completed(self, fn, chunks, kwargs):
        from distributed import as_completed

        futures = self.client.map(_timed, chunks, _fn=fn, pure=False, **kwargs)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                result = fut.result()
                fut.release()
                yield index[fut.key], result
        except BaseException:
            self.client.cancel(futures)
            raise


# Dask tasks per worker thread when items are batched.  A Dask task costs CPU in the worker's
# event loop and the scheduler's, which the items' own work competes with when every core runs
# a worker (docs/PERFORMANCE.md, multi-rank).
TASKS_PER_WORKER = 8


def _timed(chunk: list[Any], *, _fn: Callable[..., Any], **kwargs: Any) -> tuple[list[Any], float]:
    """([_fn(item, **kwargs) for each item], their wall time in s): one task, run on a worker."""
    t = time.perf_counter()
    results = [_fn(item, **kwargs) for item in chunk]
    return results, time.perf_counter() - t


# What the fork server imports once, so that every worker it forks starts with it.
PRELOAD = ("numpy", "pandas", "perfdiff.ranks.part")


def start_method() -> str:
    """How the local workers start: forked from a fork server (a clean single-threaded
    process that imported PRELOAD once: quick to start, and safe, where forking the driver
    would copy a process whose threads may hold locks) where the platform has one; spawned
    otherwise."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def warm_up() -> None:
    """Start the fork server now, so that it imports PRELOAD while this process goes on with
    its own imports and finding the ranks (the local workers then fork at once)."""
    if start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()


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
    """A Fanout on the Dask cluster at `scheduler` (its workers must read the inputs' paths),
    else on a pool of worker processes started here (`workers`: how many, no more than there
    are tasks; default local_workers) and closed on leaving; `processes=False`: in this
    process."""
    if scheduler:
        distributed = require_dask()
        _probe(scheduler, SCHEDULER_TIMEOUT_S)
        try:
            client = distributed.Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S:g}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        try:
            known = client.scheduler_info().get("workers", {})
            threads = sum(int(w.get("nthreads", 0) or 0) for w in known.values())
            yield DaskFanout(client, max(1, len(known)), progress, threads)
        finally:
            client.close()
        return
    if not processes:
        yield InlineFanout(1, progress, 1)
        return
    # A worker more than there are tasks would start and idle.
    n = max(1, min(workers, tasks)) if workers else local_workers(tasks, largest_bytes)
    warm_up()  # a no-op when the caller started it early, as the command line does
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context(start_method()))
    try:
        yield PoolFanout(pool, n, progress)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # tasks not started are dropped
