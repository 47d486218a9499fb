"""CPU quota throttling of the target's cgroup: CFS `cpu.stat` and the quota, v1 and v2.

A container's CPU limit is the commonest cause of a slower GPU process in Kubernetes pods,
and it shows in /proc only as run-queue wait.  The kernel counts it per cgroup: periods,
throttled periods and throttled time (`cpu.stat`), against the quota (`cpu.max` in cgroup v2,
`cpu.cfs_quota_us` / `cpu.cfs_period_us` in v1).  Read through the ProcFS seam (tests point
it at fake /proc and /sys trees); a cgroup or file that cannot be read is unsupported with
the reason, never 0.  docs/COLLECTORS.md.

Samples (device "Host"), each over the interval since the previous reading:
`cgroup_cpu_throttled` % of the CFS periods that were throttled, `cgroup_cpu_throttled_time`
ms of throttling per s, and `cgroup_cpu_quota` the quota in CPUs (a point reading; absent
when there is no limit).
"""
from __future__ import annotations

from typing import Any, Callable

from perfdiff.collectors.base import RowBuffer, SamplerState
from perfdiff.collectors.procfs import ProcFS

DEVICE = "Host"
METRICS = ("cgroup_cpu_throttled", "cgroup_cpu_throttled_time", "cgroup_cpu_quota")


def cgroup_paths(fs: ProcFS, pid: int) -> tuple[str, str] | None:
    """(version, folder under /sys holding the target's CPU files), or None: the v2 unified
    hierarchy ("0::/path") where it has cpu.stat, else the v1 hierarchy of the `cpu`
    controller (hybrid hosts list both)."""
    try:
        lines = fs.read(pid, "cgroup").decode(errors="replace").splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            candidates.insert(0, ("v2", "fs/cgroup" + path.rstrip("/")))
        elif "cpu" in controllers.split(","):
            candidates.append(("v1", f"fs/cgroup/{controllers}" + path.rstrip("/")))
    for version, folder in candidates:
        try:
            fs.read_sys(folder, "cpu.stat")
            return version, folder
        except OSError:
            continue
    return candidates[-1] if candidates else None


def parse_cpu_stat(raw: bytes, version: str) -> tuple[int, int, float]:
    """(periods, throttled periods, throttled ns) from cpu.stat (v2 counts µs, v1 ns)."""
    keys = {}
    for line in raw.decode(errors="replace").splitlines():
        k, _, v = line.partition(" ")
        if v.strip().isdigit():
            keys[k] = int(v)
    if version == "v2":
        return keys["nr_periods"], keys["nr_throttled"], keys["throttled_usec"] * 1e3
    return keys["nr_periods"], keys["nr_throttled"], float(keys["throttled_time"])


class CgroupCpuSampler:
    """The target cgroup's CPU throttling, every `interval_ns` (default 1 s)."""

    name = "cgroup"

    def __init__(self, pid: int | Callable[[], int | None], *, procfs: ProcFS | None = None,
                 interval_ns: int = 1_000_000_000):
        self._pid = pid  # or a callable: a started command's pid is known only at start
        self.pid: int | None = None
        self.fs = procfs or ProcFS()
        self.interval_ns = interval_ns
        self.state = SamplerState()
        self.where: tuple[str, str] | None = None
        self.last: tuple[int, int, int, float] | None = None  # (t_ns, periods, throttled, ns)

    def _unsupported(self, why: str, t_ns: int) -> None:
        for m in METRICS:
            self.state.mark_unsupported(DEVICE, m, why, t_ns)

    def start(self, t_ns: int) -> None:
        self.pid = self._pid() if callable(self._pid) else self._pid
        if self.pid is None:
            self._unsupported("no target process", t_ns)
            return
        self.where = cgroup_paths(self.fs, self.pid)
        if self.where is None:
            self._unsupported(f"/proc/{self.pid}/cgroup names no CPU cgroup", t_ns)
            return
        try:
            stat = parse_cpu_stat(self.fs.read_sys(self.where[1], "cpu.stat"), self.where[0])
        except (OSError, KeyError, ValueError) as exc:
            self._unsupported(f"{self.where[1]}/cpu.stat unreadable ({exc.__class__.__name__})", t_ns)
            self.where = None
            return
        self.last = (t_ns, *stat)

    def sample(self, t_ns: int) -> dict[str, Any]:
        if self.where is None or self.last is None:
            return {}
        rows = RowBuffer()
        version, folder = self.where
        try:
            periods, throttled, ns = parse_cpu_stat(self.fs.read_sys(folder, "cpu.stat"), version)
        except (OSError, KeyError, ValueError):
            return {}  # the cgroup went away with the target: nothing this interval
        t0, p0, th0, ns0 = self.last
        self.last = (t_ns, periods, throttled, ns)
        if t_ns > t0:
            dp = periods - p0
            # No CFS period elapsed (no quota, or nothing runnable): nothing could be throttled,
            # which is 0 %, not unknown; a run without a limit then compares with one that has it.
            share = 100.0 * (throttled - th0) / dp if dp > 0 else 0.0
            rows.sample("cgroup_cpu_throttled", DEVICE, t0, t_ns, share)
            rows.sample("cgroup_cpu_throttled_time", DEVICE, t0, t_ns, (ns - ns0) / 1e6 / ((t_ns - t0) / 1e9))
        quota = self._quota(version, folder)
        if quota is not None:
            rows.sample("cgroup_cpu_quota", DEVICE, t_ns, t_ns, quota)
        return rows.take()

    def _quota(self, version: str, folder: str) -> float | None:
        """The CPU limit in CPUs, None without one (or unreadable)."""
        try:
            if version == "v2":
                fields = self.fs.read_sys(folder, "cpu.max").decode().split()  # "max 100000" or "15000 100000"
                return None if fields[0] == "max" else int(fields[0]) / int(fields[1])
            q = int(self.fs.read_sys(folder, "cpu.cfs_quota_us").decode().strip())
            period = int(self.fs.read_sys(folder, "cpu.cfs_period_us").decode().strip())
            return None if q < 0 else q / period
        except (OSError, ValueError, IndexError, ZeroDivisionError):
            return None

    def close(self) -> None:
        pass

    def manifest(self) -> dict[str, Any]:
        return {"collector": {"name": self.name, "interval_ns": self.interval_ns,
                              "source": f"/sys/{self.where[1]}" if self.where else "none",
                              "cgroup_version": self.where[0] if self.where else None},
                "unsupported": self.state.unsupported_list(), "events": self.state.events}
