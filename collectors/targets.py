"""The target of `perfdiff collect`: the root process, its descendants, their NSpid.

`check_target` says in one line why a pid cannot be collected from; `TargetSet` follows the
root and every process started under it (found by scanning /proc, at the collect loop's
discovery cadence) and records each one for the manifest (times in CLOCK_REALTIME ns).
"""
from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass
from typing import Any

from perfdiff.collectors.host import parse_task_stat
from perfdiff.collectors.procfs import ProcFS
from perfdiff.errors import CollectionError


@dataclass
class TargetProcess:
    """One process of the target, as the manifest records it."""

    pid: int
    ppid: int
    cmdline: list[str]
    nspid: int
    first_seen_ns: int
    exited_ns: int | None = None


class TargetSet:
    """The root process and its descendants, found by scanning /proc for new pids.

    Only pids not seen before are read (their stat, for the parent pid), so a scan costs one
    listdir of /proc; and a scan is skipped when the host's fork counter ("processes" in
    /proc/stat, every clone since boot) has not moved.  A child that starts and exits between
    two scans is missed.
    """

    def __init__(self, root: int, *, procfs: ProcFS | None = None, exclude: set[int] | None = None):
        self.fs = procfs or ProcFS()
        self.root = root
        self.exclude = set(exclude or ())
        self.live: set[int] = {root}  # replaced, never mutated: samplers may hold the old one
        self.processes: dict[int, TargetProcess] = {}
        self.others: set[int] = set()
        self._root_fd = -1
        self._stat_fd = -1
        self._forks = -1
        self._pidfd = -1
        if self.fs.real and hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(root)
                self._poll = select.poll()  # registered once: a tick's check is one poll(0)
                self._poll.register(self._pidfd, select.POLLIN)
            except OSError:
                pass  # an older kernel, or the pid is gone: root_alive reads /proc
        now = time.time_ns()
        self.processes[root] = self._describe(root, now) or TargetProcess(root, 0, [], root, now)
        self.discover(now)  # children the root already has

    def pids(self) -> set[int]:
        """The live target pids (the set samplers call each tick)."""
        return self.live

    def _describe(self, pid: int, t_ns: int) -> TargetProcess | None:
        try:
            st = parse_task_stat(self.fs.read(pid, "stat"))
        except (OSError, ValueError, IndexError):
            return None
        return TargetProcess(pid, st.ppid, read_cmdline(self.fs, pid), self.fs.inner_pid(pid), t_ns)

    def _fork_count(self) -> int:
        """The last pid handed out (-1 when unknown: then every scan runs): the 5th field of
        /proc/loadavg, a 40-byte read, where /proc/stat's clone count formats the whole file
        (every CPU and interrupt).  Every fork and thread creation moves it."""
        try:
            if self._stat_fd < 0:
                self._stat_fd = os.open(os.path.join(self.fs.proc, "loadavg"), os.O_RDONLY | os.O_CLOEXEC)
            return int(os.pread(self._stat_fd, 256, 0).split()[4])
        except (OSError, ValueError, IndexError):
            return -1

    def discover(self, t_ns: int) -> list[TargetProcess]:
        """Scan /proc; returns the processes that joined the target set."""
        forks = self._fork_count()
        if forks >= 0 and forks == self._forks:
            return []  # no process (nor thread) was started anywhere since the last scan
        self._forks = forks
        try:
            current = {int(n) for n in os.listdir(self.fs.proc) if n.isdigit()}
        except OSError:
            return []
        self.others &= current
        gone = self.live - current
        for pid in gone:
            self.processes[pid].exited_ns = t_ns
        live = self.live - gone
        fresh = []
        for pid in current - live - self.others - self.exclude:
            try:
                st = parse_task_stat(self.fs.read(pid, "stat"))
            except (OSError, ValueError, IndexError):
                continue
            fresh.append((st.starttime, pid, st.ppid))
        joined = []
        # Oldest first, so a child and its grandchild found in the same scan both join.
        for _, pid, ppid in sorted(fresh):
            if ppid in live:
                proc = self._describe(pid, t_ns) or TargetProcess(pid, ppid, [], pid, t_ns)
                self.processes[pid] = proc
                live.add(pid)
                joined.append(proc)
            else:
                self.others.add(pid)
        if gone or joined:
            self.live = live
        return joined

    def root_alive(self) -> bool:
        """False once the root process has exited (a zombie counts as exited).

        Asked every tick: with a pidfd (Linux 5.3+) that is a zero-timeout poll; else a read
        and parse of the root's stat."""
        if self._pidfd >= 0:
            if not self._poll.poll(0):
                return True  # readable once the process has exited
            self._poll.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1  # exited (or reaped): confirm below, as without a pidfd
        path = os.path.join(self.fs.proc, str(self.root), "stat")
        try:
            if self._root_fd < 0:
                self._root_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            raw = os.pread(self._root_fd, 4096, 0)
            return bool(raw) and parse_task_stat(raw).state not in ("Z", "X")
        except (OSError, ValueError, IndexError):
            return False

    def close(self) -> None:
        for fd in (self._root_fd, self._stat_fd, self._pidfd):
            if fd >= 0:
                os.close(fd)
        self._root_fd = self._stat_fd = self._pidfd = -1

    def manifest(self) -> dict[str, Any]:
        return {
            "children": sorted(p for p in self.processes if p != self.root),
            "processes": [vars(p) for p in sorted(self.processes.values(), key=lambda p: p.first_seen_ns)],
        }


def read_cmdline(fs: ProcFS, pid: int) -> list[str]:
    try:
        raw = fs.read(pid, "cmdline")
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def check_target(pid: int, fs: ProcFS | None = None) -> None:
    """Raise CollectionError (one line) unless `pid` is a live process we may collect from."""
    fs = fs or ProcFS()
    if pid <= 0:
        raise CollectionError(f"no such process: pid {pid}")
    if pid == os.getpid():
        raise CollectionError(f"pid {pid} is this collector")
    try:
        st = parse_task_stat(fs.read(pid, "stat"))
    except FileNotFoundError:
        raise CollectionError(f"no such process: pid {pid} (or hidden from this user by a hidepid /proc mount)") from None
    except PermissionError:
        raise CollectionError(f"no permission to read /proc/{pid}/stat") from None
    except (OSError, ValueError, IndexError):
        raise CollectionError(f"no such process: pid {pid}") from None
    if st.state in ("Z", "X"):
        raise CollectionError(f"pid {pid} has already exited (zombie)")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise CollectionError(f"no such process: pid {pid}") from None
    except PermissionError:
        uid = uid_of(fs, pid)
        owner = "?" if uid is None else uid
        raise CollectionError(
            f"no permission to collect from pid {pid} (owned by uid {owner}, this is uid {os.geteuid()}): "
            "run perfdiff as that user or as root") from None
    try:
        os.listdir(os.path.join(fs.proc, str(pid), "task"))
    except PermissionError:
        raise CollectionError(f"no permission to list the threads of pid {pid} (/proc/{pid}/task)") from None


def uid_of(fs: ProcFS, pid: int) -> int | None:
    """The owner of /proc/PID (None when it is gone)."""
    try:
        return os.stat(os.path.join(fs.proc, str(pid))).st_uid
    except OSError:
        return None
