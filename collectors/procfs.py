"""The one seam through which the collectors read /proc and /sys.

`ProcFS` names where /proc and /sys are (tests point both at a folder of fake files) and
reads whole files, folders and links under them; `FdCache`, `pread_file` and `read_all`
keep /proc files open for the host sampler's per-tick preads.  `ProcFS.nspid` is the one
reader of a process's pid in each PID namespace (the ``NSpid:`` line of /proc/PID/status).
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass

FD_RESERVE = 256  # descriptors left for everything else when caching /proc descriptors


def field(raw: bytes, key: bytes) -> bytes | None:
    """The text after "key:" on the line that starts with `key` in a "key: value" file, or None."""
    i = raw.find(b"\n" + key + b":")
    if i < 0:
        if not raw.startswith(key + b":"):
            return None
        i = -1
    start = i + len(key) + 2
    end = raw.find(b"\n", start)
    return raw[start:] if end < 0 else raw[start:end]


@dataclass(frozen=True)
class ProcFS:
    """Where /proc and /sys are (tests point these at a folder of fake files)."""

    proc: str = "/proc"
    sys: str = "/sys"

    @property
    def real(self) -> bool:
        """True on the machine's own /proc (process CPU clocks and pidfds then apply)."""
        return self.proc == "/proc"

    def path(self, *parts: object) -> str:
        """The path of a file under /proc."""
        return os.path.join(self.proc, *map(str, parts))

    def read(self, *parts: object) -> bytes:
        """Whole file under /proc (raises OSError)."""
        with open(self.path(*parts), "rb") as fh:
            return fh.read()

    def read_sys(self, *parts: object) -> bytes:
        """Whole file under /sys (raises OSError)."""
        with open(os.path.join(self.sys, *map(str, parts)), "rb") as fh:
            return fh.read()

    def listdir(self, *parts: object) -> list[str]:
        """Names in a folder under /proc (raises OSError)."""
        return os.listdir(self.path(*parts))

    def readlink(self, *parts: object) -> str:
        """Target of a link under /proc (raises OSError)."""
        return os.readlink(self.path(*parts))

    def exists(self, pid: int) -> bool:
        """True when /proc/PID exists in this procfs."""
        return os.path.isdir(self.path(pid))

    def nspid(self, pid: int) -> tuple[int, ...] | None:
        """`pid` in each PID namespace, outermost (the one that mounted this procfs) first:
        the NSpid line of /proc/PID/status (proc(5)); ``(pid,)`` on a kernel without one
        (before 4.1) where /proc/PID exists; None when the process is not readable here."""
        try:
            text = field(self.read(pid, "status"), b"NSpid")
            if text is not None:
                return tuple(int(x) for x in text.split())
        except (OSError, ValueError):
            return None
        return (pid,) if self.exists(pid) else None

    def inner_pid(self, pid: int) -> int:
        """The pid as the process itself sees it (innermost PID namespace); `pid` when unknown."""
        ns = self.nspid(pid)
        return ns[-1] if ns else pid


def as_procfs(root: str | ProcFS) -> ProcFS:
    """`root` itself, or a ProcFS on the /proc folder it names (callers that pass a path)."""
    return root if isinstance(root, ProcFS) else ProcFS(proc=root)


# ----------------------------------------------------------------------------- kept descriptors


class FdCache:
    """Keeps /proc files open for pread; past `limit` descriptors, files are opened per read."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0

    def open(self, path: str) -> int:
        """A descriptor for `path`, or -1 when the cache is full (raises OSError when unreadable)."""
        if self.count >= self.limit:
            os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))  # still raise when unreadable
            return -1
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.count += 1
        return fd

    def close(self, fd: int) -> None:
        if fd >= 0:
            os.close(fd)
            self.count -= 1


def pread_file(fd: int, path: str) -> bytes:
    """pread a kept /proc descriptor from 0 (seq files regenerate), or open-read-close."""
    if fd >= 0:
        return os.pread(fd, 4096, 0)
    with open(path, "rb", buffering=0) as fh:
        return fh.read(4096)


def read_all(fd: int, path: str) -> bytes:
    """Whole content of a kept /proc descriptor (any size), or open-read-close."""
    if fd < 0:
        with open(path, "rb") as fh:
            return fh.read()
    size = 65536
    while True:
        raw = os.pread(fd, size, 0)
        if len(raw) < size:
            return raw
        size *= 4


def fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one and return how many we may cache."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = 65536 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return max(0, soft - FD_RESERVE)
