"""Load and segment the two runs of a comparison at once, one child process per run.

Importing a large trace is single-threaded work (the nsys reader, the Kineto parser), and the
two runs are independent: on two cores they take the time of one.  Each side runs in a
forked child; its result (RunData, Cycles) comes back through pickle protocol 5 with every
array *out of band*: the child writes each array's bytes to its own file in /dev/shm (or
the temporary directory) and the parent maps them copy-on-write, so hundreds of MB cross
over without being copied or re-parsed.  Small inputs, a platform without fork, or one
core: both sides load in this process, one after the other.

Errors keep their meaning: a PerfdiffError raised in a child (a bad trace) is raised again
here with its message and exit code; any other failure in a child is a bug and says so.
"""
from __future__ import annotations

import mmap
import os
import pickle
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

from perfdiff import errors
from perfdiff.errors import PerfdiffError

PARALLEL_MIN_BYTES = 64 << 20  # inputs smaller than this together load in-process: a fork costs more


def _input_bytes(path: str | os.PathLike[str]) -> int:
    """Size of a trace file or of everything under a directory (0 when unreadable)."""
    p = Path(path)
    try:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    except OSError:
        return 0


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
    """The object `_dump` wrote, its arrays mapped copy-on-write from their files (which are
    removed at once: the mappings keep the memory until the arrays are freed)."""
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


def _child(fn: Callable[..., Any], arg: Any, folder: Path) -> int:
    try:
        # The other run loads beside this one: half the cores each (no helper threads on 2).
        _dump(fn(arg, cores=max(1, (os.cpu_count() or 1) // 2)), folder)
        return 0
    except PerfdiffError as exc:
        (folder / "error.pickle").write_bytes(pickle.dumps((type(exc).__name__, str(exc), exc.code)))
        return 2
    except MemoryError:
        (folder / "error.pickle").write_bytes(pickle.dumps(("MemoryError", "out of memory", 2)))
        return 2
    except BaseException:  # noqa: BLE001 - a bug: its traceback goes to the parent
        (folder / "crash.txt").write_text(traceback.format_exc())
        return 1


def map_pair(fn: Callable[[Any], Any], args: tuple[Any, Any], sizes: tuple[int, int] | None = None,
             while_waiting: Callable[[], None] | None = None) -> list[Any]:
    """[fn(args[0]), fn(args[1])], computed in two forked children when worth it.

    In a child, fn is called as fn(arg, cores=n): n is its share of the CPU cores.

    `sizes`: the inputs' bytes (decides whether forking pays off; default: in-process).
    `while_waiting`: work for this process meanwhile (imports the next steps need); called
    once in either case.  The first side's error is the one raised when both fail, as in a
    serial run.
    """
    total = sum(sizes) if sizes else 0
    if (total < PARALLEL_MIN_BYTES or not hasattr(os, "fork") or (os.cpu_count() or 1) < 2
            or sys.platform == "win32"):
        out = [fn(a) for a in args]
        if while_waiting is not None:
            while_waiting()
        return out
    base = Path(tempfile.mkdtemp(prefix="perfdiff-pair-", dir=_spool_dir(total * 4)))
    try:
        folders = [base / str(i) for i in range(2)]
        pids = []
        for folder, arg in zip(folders, args, strict=True):
            folder.mkdir()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child: compute, hand over, leave without running the parent's exit hooks
                code = 1
                try:
                    code = _child(fn, arg, folder)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            pids.append(pid)
        if while_waiting is not None:
            while_waiting()
        statuses = [os.waitpid(pid, 0)[1] for pid in pids]
        out = []
        for folder, arg, status in zip(folders, args, statuses, strict=True):
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
            crash = folder / "crash.txt"
            if crash.exists():
                raise RuntimeError("loading a run failed in its worker process:\n" + crash.read_text())
            if not (folder / "result.pickle").exists():
                # Killed (the kernel's OOM killer sends SIGKILL): one line, not a traceback.
                why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exit status {os.waitstatus_to_exitcode(status)}")
                raise PerfdiffError(f"the worker loading this run ended without a result ({why}; out of "
                                    "memory?)", path=arg)
            out.append(_load(folder))
        return out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def input_sizes(paths: tuple[str | os.PathLike[str], str | os.PathLike[str]]) -> tuple[int, int]:
    """Bytes of the two inputs that are traces to import (see map_pair); a run bundle counts 0:
    it loads in about a second (Parquet), and handing its rows back from a worker costs about
    as much as loading it (measured: 5 M-row bundles compared 25 % slower through workers)."""
    from perfdiff.bundle import is_bundle

    return tuple(0 if is_bundle(p) else _input_bytes(p) for p in paths)  # type: ignore[return-value]
