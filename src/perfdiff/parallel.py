"""Every fork, process pool, thread and memory setting of a comparison, in one place.

The pipeline (perfdiff.api) is handed a `Parallel` and asks it to run independent pieces of
work: the two runs' loading (`meet_pair`), the per-function tests (`start_map`), the μ tests
(`map`).  Each runs in forked
processes when the work is large enough to pay for the fork, else here, in order, with the
same results.  The statistics therefore read as serial code; `Parallel.serial()` runs
everything in this process.

Data the workers of a pool need is handed over by fork, never pickled: `start_map` and
`map` keep it in this module while their pool forks, so `fn(shared, item)` in a worker
reads the parent's arrays.  The two runs' results come back from their workers through
pickle protocol 5 with every array out of band, in files under /dev/shm (or the temporary
directory) that the parent maps copy-on-write: hundreds of MB cross over without a copy.
Errors keep their meaning: a PerfdiffError in a worker is raised again here with its message
and exit code; any other failure in a worker is a bug and comes back as an
errors.InternalError with its type, message, traceback and the input it was reading.
"""
from __future__ import annotations

import mmap
import os
import pickle
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from perfdiff import errors
from perfdiff.errors import PerfdiffError

__all__ = ["Parallel", "Pending", "Standby", "keep_freed_memory"]

# Data inherited by the forked workers of the pool being started (see the module docstring).
_SHARED: Any = None


def _call_shared(fn: Callable[[Any, Any], Any], item: Any) -> Any:
    return fn(_SHARED, item)


@dataclass
class Parallel:
    """How a comparison may use this machine's cores.

    `cores`: cores to use (default: all).  The thresholds say when work is large enough for
    a fork to pay off: `pair_min_bytes` of trace input for loading the two runs in two
    workers, `pool_min_cycles` cycles of both runs for the function tests, `mu_min_pairs`
    (Σ n_N·n_A over the μ tests) for those.  `max_workers` caps a pool."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    pair_min_bytes: int = 64 << 20
    pool_min_cycles: int = 200_000
    mu_min_pairs: int = 20_000_000
    max_workers: int = 8

    @classmethod
    def serial(cls) -> Parallel:
        """Everything in this process, in order."""
        return cls(cores=1)

    @property
    def can_fork(self) -> bool:
        return self.cores >= 2 and hasattr(os, "fork") and sys.platform != "win32"

    # --- the two runs ------------------------------------------------------------------

    def meet_pair(self, first: Callable[[Any, int], tuple[Any, Any]], meet: Callable[[list[Any]], Any],
                  second: Callable[[Any, Any], Any], args: tuple[Any, Any], sizes: tuple[int, int] | None = None,
                  while_waiting: Callable[[], None] | None = None) -> list[Any]:
        """Work on two inputs that must agree on something half-way, in two forked workers
        when `sizes` (the inputs' bytes) add up to `pair_min_bytes`, else here one after the
        other.  `first(arg, cores)` gives each side's (state, summary), `cores` being what it
        may keep busy (half the cores in a worker); once both
        summaries are in, `meet([summary_0, summary_1])` gives one decision (in this process);
        then `second(state, decision)` gives each side's result.  The summaries and the
        decision cross between processes pickled (keep them small); the states never do.
        `while_waiting` is work for this process meanwhile, called once in either case.  The
        first side's error is the one raised when both fail, as in a serial run."""
        total = sum(sizes) if sizes else 0
        if total < self.pair_min_bytes or not self.can_fork:
            firsts = [first(a, self.cores) for a in args]
            decision = meet([f[1] for f in firsts])
            out = [second(f[0], decision) for f in firsts]
            if while_waiting is not None:
                while_waiting()
            return out
        base = Path(tempfile.mkdtemp(prefix="perfdiff-pair-", dir=_spool_dir(total * 4)))
        cores = max(1, self.cores // 2)
        workers: list[_Worker] = []
        try:
            try:
                for i, arg in enumerate(args):
                    # The second worker does not hold the first one's pipes open: _PARENT_ENDS.
                    workers.append(_Worker.fork(first, second, arg, cores, base / str(i)))
            except OSError:  # no fork now (EAGAIN, ENOMEM): stop what started, then here, in order
                for w in workers:
                    w.close()
                workers = []
                return Parallel.serial().meet_pair(first, meet, second, args, None, while_waiting)
            if while_waiting is not None:
                while_waiting()
            summaries = [w.summary() for w in workers]
            if any(s is _FAILED for s in summaries):
                for w in workers:
                    w.cancel()
            else:
                decision = meet(summaries)
                for w in workers:
                    w.decide(decision)
            statuses = [w.wait() for w in workers]
            if any(s is _FAILED for s in summaries):  # the first side's error, as in a serial run
                for w, arg, status, summary in zip(workers, args, statuses, summaries, strict=True):
                    # A side that sent its summary and was then cancelled left nothing: skip it.
                    if summary is _FAILED or (w.folder / "error.pickle").exists() or (w.folder / "crash.pickle").exists():
                        _collect_child(w.folder, arg, status)  # raises (a killed worker: says so)
            return [_collect_child(w.folder, arg, status) for w, arg, status in zip(workers, args, statuses,
                                                                                     strict=True)]
        finally:
            for w in workers:
                w.close()
            shutil.rmtree(base, ignore_errors=True)

    # --- pools ---------------------------------------------------------------------------

    def start_map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, shared: Any,
                  large: bool) -> Pending:
        """Start [fn(shared, x) for x in items]; `Pending.result()` waits for it.  In a pool
        of forked workers when `large` and there are cores to spare (the caller goes on
        meanwhile), else serially inside `result`."""
        workers = min(self.cores, self.max_workers, len(items))
        pending = Pending(fn, list(items), shared)
        if large and workers > 1 and self.can_fork:
            pending.start(workers)
        return pending

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, shared: Any = None,
            large: bool) -> list[Any]:
        """[fn(shared, x) for x in items], on every core when `large` (items are pickled to
        the workers in chunks; `shared` is inherited)."""
        workers = min(self.cores, self.max_workers)
        if large and workers > 1 and self.can_fork and len(items) >= 4 * workers:
            pool = _fork_pool(workers)
            if pool is not None:
                global _SHARED
                _SHARED = shared
                try:
                    with pool:
                        import functools

                        return list(pool.map(functools.partial(_call_shared, fn), items,
                                             chunksize=max(1, len(items) // (8 * workers))))
                finally:
                    _SHARED = None
        return [fn(shared, x) for x in items]


class Pending:
    """A map started by `Parallel.start_map`: `result()` returns its list, `close()` stops a
    pool never waited for."""

    def __init__(self, fn: Callable[[Any, Any], Any], items: list[Any], shared: Any):
        self.fn, self.items, self.shared = fn, items, shared
        self.pool: Any = None
        self.futures: list[Any] = []

    def start(self, workers: int) -> None:
        global _SHARED
        self.pool = _fork_pool(workers)
        if self.pool is None:
            return
        _SHARED = self.shared  # the workers fork at the first submit and inherit it
        try:
            self.futures = [self.pool.submit(_call_shared, self.fn, x) for x in self.items]
        except (OSError, RuntimeError):  # no fork now (EAGAIN, ENOMEM): serially in `result`
            self.close()

    def result(self) -> list[Any]:
        from concurrent.futures.process import BrokenProcessPool

        try:
            if self.pool is not None:
                try:
                    return [fu.result() for fu in self.futures]
                except BrokenProcessPool:  # a worker was killed (out of memory?): here instead
                    pass
            return [self.fn(self.shared, x) for x in self.items]
        finally:
            self.close()

    def close(self) -> None:
        global _SHARED
        _SHARED = None
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
            self.futures = []


def keep_freed_memory() -> None:
    """Let glibc's malloc keep freed memory for reuse instead of handing it back at once, and
    take fresh memory in small pages.

    A comparison allocates and frees hundreds of arrays of tens of MB; above 32 MB glibc maps
    each one fresh and unmaps it on free, so each is page-faulted in again.  Serving them from
    the heap, never trimmed, is faster at the same peak (docs/PERFORMANCE.md).  The memory a
    process touches first still costs the kernel its pages: numpy asks for transparent huge
    pages on every array of 4 MB or more, and where the kernel then backs 2 MB at once (a VM
    whose host backs its memory lazily, as the standard machine) a GB costs about twice the
    system time of 4 KiB pages, the user time unchanged (docs/PERFORMANCE_CHANGES.md): numpy
    is told not to ask.  Process-wide: the command line calls it, a library user may.  Linux
    with glibc only; elsewhere nothing happens."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    _small_pages()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: below 1 GiB, from the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never give the heap's top back early
    except (OSError, AttributeError):
        pass


def _small_pages() -> None:
    """Tell numpy not to ask for transparent huge pages for its arrays (keep_freed_memory)."""
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core", None)
    setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if setter is not None:
        setter(False)


def _fork_pool(workers: int) -> Any:
    """A pool of `workers` forked processes, or None where there is no fork."""
    import concurrent.futures as cf
    import multiprocessing as mp

    try:
        ctx = mp.get_context("fork")
    except ValueError:
        return None
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


# --- the pair's workers ---------------------------------------------------------------------

def _spool_dir(need_bytes: int) -> str:
    """/dev/shm when it has room for `need_bytes` twice over (RAM, no disk writes), else the
    temporary directory (the page cache keeps it in memory all the same)."""
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize >= 2 * need_bytes and os.access(shm, os.W_OK):
            return shm
    except OSError:
        pass
    return tempfile.gettempdir()


def _dump(obj: Any, folder: Path) -> None:
    """Pickle `obj` into `folder`: the pickle stream, and each out-of-band buffer in a file."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    for i, buf in enumerate(buffers):
        with open(folder / f"{i:06d}.buf", "wb") as fh:
            fh.write(buf.raw())
    tmp = folder / "result.pickle.tmp"
    tmp.write_bytes(data)
    tmp.rename(folder / "result.pickle")  # last: its presence says the rest is whole


def _load(folder: Path) -> Any:
    """The object `_dump` wrote, its arrays mapped copy-on-write from their files (removed at
    once: the mappings keep the memory until the arrays are freed)."""
    buffers: list[Any] = []
    for f in sorted(folder.glob("*.buf")):
        size = f.stat().st_size
        if size == 0:
            buffers.append(bytearray())
            continue
        with open(f, "rb") as fh:
            buffers.append(mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY))
        f.unlink()
    return pickle.loads((folder / "result.pickle").read_bytes(), buffers=buffers)


_FAILED = object()  # a worker's summary when its first step failed


class _Worker:
    """One side of `meet_pair` in a forked process: it computes `first`, sends its summary up
    a pipe, reads the decision from another, computes `second` and leaves its result (or its
    error) in `folder`."""

    def __init__(self, pid: int, folder: Path, up: int, down: int):
        self.pid, self.folder, self.up, self.down = pid, folder, up, down
        self.status: int | None = None

    @classmethod
    def fork(cls, first: Callable[[Any, int], tuple[Any, Any]], second: Callable[[Any, Any], Any], arg: Any,
             cores: int, folder: Path) -> _Worker:
        folder.mkdir()
        pid, (up_r, up_w), (down_r, down_w) = _fork_with_pipes()
        if pid:
            os.close(up_w)
            os.close(down_r)
            _keep(up_r, down_w)
            return cls(pid, folder, up_r, down_w)
        # The child: compute, hand over, and always leave through os._exit (never return into
        # the parent's code, never run its exit hooks).
        code = 1
        try:
            for fd in (up_r, down_w):
                os.close(fd)
            code = _child(first, second, arg, cores, folder, up_w, down_r)
        except BaseException:  # noqa: BLE001 - nothing may escape the child
            pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - a closed pipe: leave all the same
                pass
            os._exit(code)

    def summary(self) -> Any:
        """The worker's summary, or _FAILED when it ended without sending one."""
        data = _read_all(self.up)
        return pickle.loads(data) if data else _FAILED

    def decide(self, decision: Any) -> None:
        try:
            _write_all(self.down, pickle.dumps(decision))
        except OSError:  # the worker is gone: its folder says why
            pass
        self.cancel()

    def cancel(self) -> None:
        """Close the decision pipe: a worker still waiting for one ends."""
        if self.down >= 0:
            _close(self.down)
            self.down = -1

    def wait(self) -> int:
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]
        return self.status

    def close(self) -> None:
        self.cancel()
        if self.up >= 0:
            _close(self.up)
            self.up = -1
        if self.status is None:  # an error in this process: do not leave the worker behind
            try:
                os.kill(self.pid, 9)
            except OSError:
                pass
            self.wait()


# This process's ends of the pipes to its live workers and standbys.  Every process forked
# from it closes them first thing (os.register_at_fork): a child holding a copy of one would
# keep the pipe open after this process closes it, and the worker or standby on the other
# end, which waits for the pipe's end, would wait for that child too.
_PARENT_ENDS: set[int] = set()


def _close_parent_ends() -> None:
    for fd in _PARENT_ENDS:
        try:
            os.close(fd)
        except OSError:
            pass
    _PARENT_ENDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_parent_ends)


def _keep(*fds: int) -> None:
    """Note `fds` as this process's ends of a child's pipes (see _PARENT_ENDS)."""
    _PARENT_ENDS.update(fds)


def _close(fd: int) -> None:
    """Close one of this process's ends of a child's pipes."""
    _PARENT_ENDS.discard(fd)
    os.close(fd)


def _fork_with_pipes() -> tuple[int, tuple[int, int], tuple[int, int]]:
    """Two pipes (read end, write end each), then a fork with the outputs flushed: (the child's
    pid here, 0 in the child; the pipes).  OSError with no descriptor left open where the fork
    fails."""
    one, two = os.pipe(), os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return os.fork(), one, two
    except OSError:
        for fd in (*one, *two):
            os.close(fd)
        raise


def _child(first: Callable[[Any, int], tuple[Any, Any]], second: Callable[[Any, Any], Any], arg: Any, cores: int,
           folder: Path, up: int, down: int) -> int:
    """A worker's life; returns its exit status."""
    try:
        state, summary = first(arg, cores)
        _write_all(up, pickle.dumps(summary))
        os.close(up)
        data = _read_all(down)
        if not data:  # the other side failed: nothing more to do
            return 0
        _dump(second(state, pickle.loads(data)), folder)
        return 0
    except PerfdiffError as exc:
        (folder / "error.pickle").write_bytes(pickle.dumps((type(exc).__name__, str(exc), exc.code)))
        return 2
    except MemoryError:
        (folder / "error.pickle").write_bytes(pickle.dumps(("MemoryError", "out of memory", 2)))
        return 2
    except BaseException as exc:  # noqa: BLE001 - a bug: its traceback goes to the parent
        (folder / "crash.pickle").write_bytes(pickle.dumps(
            (type(exc).__name__, str(exc), traceback.format_exc(), errors.input_of(exc))))
        return 1


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _collect_child(folder: Path, arg: Any, status: int) -> Any:
    """A finished worker's result, or its error raised here."""
    err = folder / "error.pickle"
    if err.exists():
        name, text, code = pickle.loads(err.read_bytes())
        if name == "MemoryError":
            raise MemoryError
        # The same class (InputError …), its message already whole (path included).
        cls = getattr(errors, name, PerfdiffError)
        if not (isinstance(cls, type) and issubclass(cls, PerfdiffError)):
            cls = PerfdiffError
        raise cls(text, code=code)
    crash = folder / "crash.pickle"
    if crash.exists():  # a bug in the worker: its type, message, traceback and input come along
        raise errors.InternalError(*pickle.loads(crash.read_bytes()))
    if not (folder / "result.pickle").exists():
        # Killed (the kernel's OOM killer sends SIGKILL): one line, not a traceback.
        why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        raise PerfdiffError(f"the worker loading this run ended without a result ({why}; out of memory?)",
                            path=arg)
    return _load(folder)


class Standby:
    """A process forked now that readies itself (`ready()`: an import, say) while this one
    works on, then runs the one call it is handed (`call`) and ends.  The call's function,
    arguments and result cross pickled (keep them small); its error is raised here: the same
    exception where it pickles, else an errors.InternalError with its traceback.  A standby
    never called ends when `close()` closes its pipe, or when this process ends."""

    def __init__(self, pid: int, job: int, answer: int, what: str):
        self.pid, self.job, self.answer, self.what = pid, job, answer, what

    @classmethod
    def fork(cls, ready: Callable[[], None], what: str) -> Standby | None:
        """The standby (`what` names it in an error), or None where this process cannot fork
        (the caller then makes the call itself)."""
        if not Parallel().can_fork:
            return None
        try:
            pid, (job_r, job_w), (answer_r, answer_w) = _fork_with_pipes()
        except OSError:
            return None
        if pid:
            os.close(job_r)
            os.close(answer_w)
            _keep(job_w, answer_r)
            return cls(pid, job_w, answer_r, what)
        code = 1
        try:  # the child: as _Worker.fork's, it never returns into the parent's code
            os.close(job_w)
            os.close(answer_r)
            _stand_by(ready, job_r, answer_w)
            code = 0
        except BaseException:  # noqa: BLE001 - nothing may escape the child
            pass
        finally:
            os._exit(code)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in the standby (once it is ready); its result, or its error raised here."""
        try:
            try:
                _write_all(self.job, pickle.dumps((fn, args), protocol=5))
            except OSError:  # it ended early: what it left says why
                pass
            _close(self.job)
            self.job = -1
            data = _read_all(self.answer)
        finally:
            self.close()
        if not data:
            raise PerfdiffError(f"{self.what} ended without a result (out of memory?)")
        kind, value = pickle.loads(data)
        if kind == "error":
            raise value
        if kind == "crash":
            raise errors.InternalError(*value)
        return value

    def close(self) -> None:
        """End the standby (a call not made is not made) and reap it."""
        if self.job >= 0 and self.pid:  # never called: it may still be readying itself
            try:
                os.kill(self.pid, 9)
            except OSError:
                pass
        for name in ("job", "answer"):
            fd = getattr(self, name)
            if fd >= 0:
                _close(fd)
                setattr(self, name, -1)
        if self.pid:
            os.waitpid(self.pid, 0)
            self.pid = 0


def _stand_by(ready: Callable[[], None], job: int, answer: int) -> None:
    """A standby's life: ready itself, wait for its call (none: end), answer it."""
    failed: BaseException | None = None
    try:
        ready()
    except Exception as exc:  # noqa: BLE001 - the call raises it: the caller decides what it means
        failed = exc
    data = _read_all(job)
    if not data:
        return
    try:
        if failed is not None:
            raise failed
        fn, args = pickle.loads(data)
        out: tuple[str, Any] = ("result", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - every error goes to the caller
        out = ("error", exc)
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - an error that does not cross: its text does
            out = ("crash", (type(exc).__name__, str(exc), traceback.format_exc(), errors.input_of(exc)))
    _write_all(answer, pickle.dumps(out, protocol=5))


def exit_now(code: int) -> None:
    """Leave the process with `code` once its outputs are flushed, without tearing down the
    interpreter: after a large comparison, freeing gigabytes object by object takes a
    noticeable part of the run.  For the command line only."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
