"""Which NVML processes are the target's: pid namespaces and the /dev/nvidiaN fallback.

NVML reports pids in the namespace the driver sees, which is not always the one the
collector's /proc shows (a container).  `/proc/PID/status` has an ``NSpid:`` line listing a
process's pid in each namespace, outermost (the one that mounted this procfs) first
(proc(5)).  So an NVML pid is the target's when

1. it is one of the target's pids; or
2. it does not exist in this /proc, and it is the target's pid in an inner namespace
   (a later entry of the target's NSpid line); or
3. it exists here as an outer pid whose innermost NSpid entry is a target pid that does not
   exist in this /proc (the target was named by its in-container pid and /proc is the host's).

perfdiff's own processes — the collector and the helpers it starts (its process tree, less
the target's) — are neither the target nor "another process": ``is_own`` tells them, and the
readers leave them out of every per-process reading (their command line names the target,
and a verdict "another process on the GPU: pid … (perfdiff)" would point at the collector).

A pid that exists in this /proc is always taken literally, so a container-local pid that
collides with an unrelated host pid never matches.  When no NVML pid matches, the devices the
target has open as /dev/nvidiaN (links in /proc/PID/fd; N = nvmlDeviceGetMinorNumber) are
used instead (docs/COLLECTORS.md).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable

from perfdiff.collectors.procfs import ProcFS
from perfdiff.collectors.procfs import as_procfs as _fs

_DEV_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")


def read_comm(proc_root: str | ProcFS, pid: int) -> str | None:
    """The command name of `pid` (/proc/PID/comm), or None when it is not visible."""
    try:
        return _fs(proc_root).read(pid, "comm").decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def nvidia_minors_open(proc_root: str | ProcFS, pids: Iterable[int]) -> set[int]:
    """Minor numbers N of the /dev/nvidiaN files that `pids` hold open (/proc/PID/fd links).

    Processes we may not inspect (another user's, hidepid) are skipped: this is a fallback.
    """
    fs = _fs(proc_root)
    minors: set[int] = set()
    for pid in pids:
        try:
            names = fs.listdir(pid, "fd")
        except OSError:
            continue
        for name in names:
            try:
                target = fs.readlink(pid, "fd", name)
            except OSError:
                continue
            m = _DEV_NVIDIA.match(target)
            if m:
                minors.add(int(m.group(1)))
    return minors


class PidMatcher:
    """Decides, with a cache, whether an NVML-reported pid belongs to the target set."""

    def __init__(self, proc_root: str | ProcFS):
        self.fs = _fs(proc_root)
        self._targets: frozenset[int] = frozenset()
        self._inner_alias: dict[int, int] = {}  # rule 2: inner-namespace pid → target pid
        self._absent_targets: set[int] = set()  # rule 3: target pids not in this /proc
        self._cache: dict[int, bool] = {}
        self._own: dict[int, bool] = {}
        self.own_pid = os.getpid()
        self.aliases: dict[int, int] = {}  # NVML pid → target pid it was matched through NSpid

    def set_targets(self, pids: Iterable[int]) -> None:
        """Update the target set (target + children); the cache is rebuilt only on change."""
        targets = frozenset(int(p) for p in pids)
        if targets == self._targets:
            return
        self._targets = targets
        self._cache.clear()
        self._own.clear()
        self._inner_alias = {}
        self._absent_targets = set()
        for t in targets:
            ns = self.fs.nspid(t)
            if ns is None:
                self._absent_targets.add(t)
            else:
                self._inner_alias.update((x, t) for x in ns[1:] if x != t)

    @property
    def proc_root(self) -> str:
        return self.fs.proc

    @property
    def targets(self) -> frozenset[int]:
        return self._targets

    def is_target(self, pid: int) -> bool:
        """True when NVML's `pid` is one of the target's processes (rules in the module doc)."""
        hit = self._cache.get(pid)
        if hit is not None:
            return hit
        hit = pid in self._targets
        if not hit:
            ns = self.fs.nspid(pid)
            if ns is None and pid in self._inner_alias:
                hit = True
                self.aliases[pid] = self._inner_alias[pid]
            elif ns is not None and len(ns) > 1 and ns[-1] in self._absent_targets:
                hit = True
                self.aliases[pid] = ns[-1]
        self._cache[pid] = hit
        return hit

    def is_own(self, pid: int) -> bool:
        """True when `pid` is perfdiff's own: this process, or one it started (through parents
        that are not the target's) — read in the host's /proc, where this process lives."""
        hit = self._own.get(pid)
        if hit is None:
            hit = self._own[pid] = pid not in self._targets and descends_from(pid, self.own_pid, self._targets)
        return hit

    def visible(self, pid: int) -> bool:
        """True when `pid` exists in this /proc (NVML and /proc share the namespace)."""
        return self.fs.exists(pid)


def descends_from(pid: int, ancestor: int, stop: Iterable[int] = (), proc_root: str = "/proc") -> bool:
    """Whether `pid` is `ancestor` or its descendant through parents none of which is in `stop`
    (/proc/PID/stat's parent field, at most 64 steps)."""
    stops = set(stop)
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid in stops or pid <= 1:
            return False
        try:
            with open(f"{proc_root}/{pid}/stat", "rb") as fh:
                raw = fh.read()
            pid = int(raw[raw.rindex(b")") + 2:].split()[1])  # after "(comm)": state, ppid
        except (OSError, ValueError, IndexError):
            return False
    return False
