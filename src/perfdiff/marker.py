"""Cycle markers for the target: ``with perfdiff.cycle("step"): ...`` and ``perfdiff.mark_cycle()``.

A mark is one line appended to a per-process file that ``perfdiff collect`` reads::

    <start_ns> <end_ns> <tid> <name>\\n        (CLOCK_REALTIME ns, native thread id)

Transport (the collector side is perfdiff.collectors.markers):

* The marks file is ``DIR/<pid>.marks``.  DIR is ``$PERFDIFF_MARKER_DIR`` when set (``collect
  -- CMD`` sets it for the command it starts, and the target may create its own file there),
  else ``/dev/shm/perfdiff-markers-<uid>`` (``/tmp/...`` without /dev/shm), where only a
  collector attached with ``--pid`` creates the file: no file, nobody listening, nothing written.
* The target looks for a listener at most every ``CHECK_NS`` (one ``stat``), so a mark with
  nobody listening costs two clock reads and an attribute lookup.  A listening collector
  touches the file's atime at every flush; a file whose atime is older than ``STALE_NS`` was
  left by a collector that died, and the target stops writing to it.
* One ``write`` per mark on an ``O_APPEND`` descriptor: atomic between threads and processes,
  and nothing is buffered in the target, so a crashing target loses no marks.
* Besides cycle marks the file carries two record kinds, written by the agent's framework
  adapters (``range_line``, ``load_line``; a reader that predates them counts them as malformed
  lines and skips them)::

    R <start_ns> <end_ns> <tid> <self_ns> <name>\\n                 a phase of the target (CPU range)
    L <start_ns> <end_ns> <requests> <tokens> <prefill> <decode>\\n  the load of one engine step

  Load values are integers, or ``-`` where the framework did not say.

The marker never raises into the target for an I/O problem: a failed write just stops
marking until the next check.  When the ``nvtx`` package is installed the same ranges are
emitted as NVTX ranges (set ``PERFDIFF_NVTX=0`` to turn that off).

This module must stay cheap to import (targets import it): standard library only.
"""
from __future__ import annotations

import os
import stat as _stat
import threading
import time
from types import ModuleType, TracebackType
from typing import Any

ENV_DIR = "PERFDIFF_MARKER_DIR"
ENV_NVTX = "PERFDIFF_NVTX"
SUFFIX = ".marks"
CHECK_NS = 100_000_000  # how often the target looks for a listener (monotonic ns)
STALE_NS = 3_000_000_000  # a listener refreshes the file's atime faster than this
MAX_NAME = 200  # bytes of a mark's name that are kept

_time_ns = time.time_ns
_mono_ns = time.monotonic_ns
_native_id = threading.get_native_id


def default_marker_dir(uid: int | None = None, root: str = "") -> str:
    """The directory a `--pid` collector creates marks files in, for `uid` (default: ours).

    /dev/shm (memory, no disk I/O per mark) when the system has it, else /tmp.  `root` is the
    target's root directory as the collector sees it ("/proc/PID/root" across mount namespaces;
    "" for the target itself), prefixed to the result.
    """
    base = "/dev/shm" if os.path.isdir(root + "/dev/shm") else "/tmp"
    return f"{root}{base}/perfdiff-markers-{os.getuid() if uid is None else uid}"


def marks_path(directory: str, pid: int) -> str:
    """The marks file of process `pid` in `directory`."""
    return os.path.join(directory, f"{pid}{SUFFIX}")


def encode_name(name: str) -> bytes:
    """A mark name as stored: UTF-8, no line breaks, at most MAX_NAME bytes."""
    clean = str(name).replace("\r", " ").replace("\n", " ").strip() or "cycle"
    return clean.encode("utf-8", "replace")[:MAX_NAME]


class _Channel:
    """Where this process's marks go: an O_APPEND descriptor or nothing (fd -1)."""

    def __init__(self) -> None:
        self.fd = -1
        self.ino = -1
        self.next_check = 0  # monotonic ns of the next look for a listener
        self.lock = threading.Lock()
        self.names: dict[str, bytes] = {}

    def reset(self) -> None:
        """Forget the descriptor (after fork: the child has another pid, hence another file)."""
        fd, self.fd, self.ino, self.next_check = self.fd, -1, -1, 0
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        self.lock = threading.Lock()

    def refresh(self, now_mono: int) -> None:
        """Open, keep or drop the marks file; called at most every CHECK_NS."""
        with self.lock:
            if now_mono < self.next_check:
                return
            self.next_check = now_mono + CHECK_NS
            env_dir = os.environ.get(ENV_DIR)
            directory = env_dir or default_marker_dir()
            path = marks_path(directory, os.getpid())
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and self._usable(st, now_mono):
                if st.st_ino == self.ino and self.fd >= 0:
                    return
                self._close()
                self._open(path, create=False)
                return
            self._close()
            if st is None and env_dir:
                # Only a directory announced through the environment lets the target create its
                # own file: a process started by `collect -- CMD` marks from its first cycle.
                self._open(path, create=True)

    @staticmethod
    def _usable(st: os.stat_result, now_mono: int) -> bool:
        if not _stat.S_ISREG(st.st_mode) or st.st_uid not in (os.getuid(), 0):
            return False  # someone else's file in a shared /tmp: never write to it
        return _time_ns() - st.st_atime_ns < STALE_NS

    def _open(self, path: str, *, create: bool) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:
            return
        self.fd, self.ino = fd, os.fstat(fd).st_ino

    def _close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd, self.ino = -1, -1

    def name_bytes(self, name: str) -> bytes:
        b = self.names.get(name)
        if b is None:
            b = self.names[name] = encode_name(name)
        return b

    def active(self) -> bool:
        """Whether a collector listens (looking for one at most every CHECK_NS)."""
        now = _mono_ns()
        if now >= self.next_check:
            self.refresh(now)
        return self.fd >= 0

    def emit(self, data: bytes) -> bool:
        """Append whole lines `data` in one write if a collector listens; True when written."""
        if not self.active():
            return False
        try:
            os.write(self.fd, data)
            return True
        except OSError:
            self._close()
            return False

    def write(self, start_ns: int, end_ns: int, name: str) -> None:
        """Append one mark if a collector listens (checking for one at most every CHECK_NS)."""
        now = _mono_ns()
        if now >= self.next_check:
            self.refresh(now)
        fd = self.fd
        if fd < 0:
            return
        try:
            os.write(fd, b"%d %d %d %s\n" % (start_ns, end_ns, _native_id(), self.name_bytes(name)))
        except OSError:
            self._close()  # a full disk or a vanished file must never break the target


_channel = _Channel()
os.register_at_fork(after_in_child=_channel.reset)


def cycle_line(start_ns: int, end_ns: int, tid: int, name: bytes) -> bytes:
    """One cycle mark as stored (`name` already encoded with ``encode_name``)."""
    return b"%d %d %d %s\n" % (start_ns, end_ns, tid, name)


def range_line(start_ns: int, end_ns: int, tid: int, self_ns: int, name: bytes) -> bytes:
    """One phase (CPU range) record: its interval, thread and own time without nested phases."""
    return b"R %d %d %d %d %s\n" % (start_ns, end_ns, tid, self_ns, name)


def _count(v: int | None) -> bytes:
    return b"-" if v is None else b"%d" % v


def load_line(start_ns: int, end_ns: int, requests: int | None, tokens: int | None,
              prefill: int | None, decode: int | None) -> bytes:
    """The load one engine step carried over [start_ns, end_ns]; None where unknown."""
    return b"L %d %d %s %s %s %s\n" % (start_ns, end_ns, _count(requests), _count(tokens), _count(prefill),
                                        _count(decode))


def emit(data: bytes) -> bool:
    """Append records built with the ``*_line`` functions (one write) if a collector listens."""
    return _channel.emit(data)


def active() -> bool:
    """Whether a collector listens now (a clock read; a ``stat`` at most every CHECK_NS)."""
    return _channel.active()

# --------------------------------------------------------------------------- NVTX

_nvtx: Any = None  # the nvtx module, False when absent or disabled, None before first use


def _load_nvtx() -> Any:
    global _nvtx
    if os.environ.get(ENV_NVTX, "1") == "0":
        _nvtx = False
        return _nvtx
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        nvtx = False
    _nvtx = nvtx
    return _nvtx


def set_nvtx(module: ModuleType | None) -> None:
    """Use `module` as the NVTX binding (None: none).  For tests and for hosts that bring their own."""
    global _nvtx
    _nvtx = module if module is not None else False


# --------------------------------------------------------------------------- public API


class cycle:  # noqa: N801 - used like a function: `with perfdiff.cycle("step"):`
    """Mark one cycle (one iteration of the main loop) as a range: ``with cycle("step"): ...``.

    The range's start and end are CLOCK_REALTIME ns taken at enter and exit.  Costs about a
    microsecond with nobody listening, a few with a collector (one write).
    """

    __slots__ = ("name", "start_ns")

    def __init__(self, name: str = "cycle"):
        self.name = name
        self.start_ns = 0

    def __enter__(self) -> "cycle":
        nv = _nvtx if _nvtx is not None else _load_nvtx()
        if nv:
            nv.push_range(self.name)
        self.start_ns = _time_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        end = _time_ns()
        _channel.write(self.start_ns, end, self.name)
        if _nvtx:
            _nvtx.pop_range()


_last = threading.local()  # per thread: start ns and NVTX range id of the open mark_cycle cycle


def mark_cycle(name: str = "cycle") -> None:
    """Mark a cycle boundary on this thread: ends the cycle the previous call began, begins the next.

    The first call on a thread only begins a cycle.  Use it where a context manager does not
    fit (a loop whose body is spread over callbacks).
    """
    now = _time_ns()
    prev = getattr(_last, "start_ns", 0)
    _last.start_ns = now
    if prev:
        _channel.write(prev, now, name)
    nv = _nvtx if _nvtx is not None else _load_nvtx()
    if nv:
        rid = getattr(_last, "nvtx_id", None)
        if rid is not None:
            nv.end_range(rid)
        _last.nvtx_id = nv.start_range(name)


def listening() -> bool:
    """True when a collector currently receives this process's marks (checks now)."""
    _channel.next_check = 0
    _channel.refresh(_mono_ns())
    return _channel.fd >= 0
