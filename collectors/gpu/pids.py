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

A pid that exists in this /proc is always taken literally, so a container-local pid that
collides with an unrelated host pid never matches.  When no NVML pid matches, the devices the
target has open as /dev/nvidiaN (links in /proc/PID/fd; N = nvmlDeviceGetMinorNumber) are
used instead (docs/COLLECTORS.md).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable

_DEV_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")


def read_nspid(proc_root: str, pid: int) -> tuple[int, ...] | None:
    """The NSpid line of /proc/PID/status (outermost namespace first), or None if unreadable."""
    try:
        with open(f"{proc_root}/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        return None
    return (pid,) if pid_exists(proc_root, pid) else None  # kernels before 4.1 have no NSpid


def pid_exists(proc_root: str, pid: int) -> bool:
    """True when /proc/PID exists in this procfs."""
    return os.path.isdir(f"{proc_root}/{pid}")


def read_comm(proc_root: str, pid: int) -> str | None:
    """The command name of `pid` (/proc/PID/comm), or None when it is not visible."""
    try:
        with open(f"{proc_root}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def nvidia_minors_open(proc_root: str, pids: Iterable[int]) -> set[int]:
    """Minor numbers N of the /dev/nvidiaN files that `pids` hold open (/proc/PID/fd links).

    Processes we may not inspect (another user's, hidepid) are skipped: this is a fallback.
    """
    minors: set[int] = set()
    for pid in pids:
        fd_dir = f"{proc_root}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            m = _DEV_NVIDIA.match(target)
            if m:
                minors.add(int(m.group(1)))
    return minors


class PidMatcher:
    """Decides, with a cache, whether an NVML-reported pid belongs to the target set."""

    def __init__(self, proc_root: str):
        self.proc_root = proc_root
        self._targets: frozenset[int] = frozenset()
        self._inner_alias: dict[int, int] = {}  # rule 2: inner-namespace pid → target pid
        self._absent_targets: set[int] = set()  # rule 3: target pids not in this /proc
        self._cache: dict[int, bool] = {}
        self.aliases: dict[int, int] = {}  # NVML pid → target pid it was matched through NSpid

    def set_targets(self, pids: Iterable[int]) -> None:
        """Update the target set (target + children); the cache is rebuilt only on change."""
        targets = frozenset(int(p) for p in pids)
        if targets == self._targets:
            return
        self._targets = targets
        self._cache.clear()
        self._inner_alias = {}
        self._absent_targets = set()
        for t in targets:
            ns = read_nspid(self.proc_root, t)
            if ns is None:
                self._absent_targets.add(t)
            else:
                self._inner_alias.update((x, t) for x in ns[1:] if x != t)

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
            ns = read_nspid(self.proc_root, pid)
            if ns is None and pid in self._inner_alias:
                hit = True
                self.aliases[pid] = self._inner_alias[pid]
            elif ns is not None and len(ns) > 1 and ns[-1] in self._absent_targets:
                hit = True
                self.aliases[pid] = ns[-1]
        self._cache[pid] = hit
        return hit

    def visible(self, pid: int) -> bool:
        """True when `pid` exists in this /proc (NVML and /proc share the namespace)."""
        return pid_exists(self.proc_root, pid)
