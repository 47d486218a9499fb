"""Host sampler: what the host can see of the target, from /proc and /sys (docs/COLLECTORS.md, Host).

Host functions (activity rows of kind "host", device "Host", one row per interval and function,
busy_ns = time summed over every thread of the target and its children):

* ``oncpu``: the delta of the process CPU clock (`process_cpu_clock`: every thread, the
  exited ones included, exact to the ns), or where that clock cannot be read the sum of the
  per-thread ``/proc/PID/task/TID/schedstat`` on-CPU deltas; ``runq``: the schedstat
  run-queue wait deltas.  A new thread's first reading is its baseline.
* ``blocked``, ``iowait``, ``read``, ``write``: sampled thread states.  At each tick every
  thread asleep counts the whole interval to its sleep: ``read``/``write`` when it sits in a
  read-like/write-like syscall (``/proc/.../syscall``), else ``iowait`` for state D and
  ``blocked`` for state S.  This is the sampling profiler's estimate (count × interval):
  unbiased over many ticks, while within one interval it may overlap the thread's on-CPU
  time (a thread that did not run at all is exact); splitting only the off-CPU rest of the
  interval by the state at its end would under-count short sleeps that follow CPU work.
  A stopped process (SIGSTOP) counts in no sleep.  ``read``/``write`` rows carry the bytes
  moved (``/proc/PID/io`` rchar/wchar deltas).

Cost (every /proc read is a syscall, and Python on a CPU that slept a whole interval runs
several times slower than warm, so reads and work per tick are saved):
* a thread whose schedstat bytes did not move did not run: it is still in the sleep it was
  seen in, one pread on a kept descriptor.  After a second asleep it is *parked*: not even
  iterated over, its sleep counted with the others' in one step, and read only (a) when the
  process CPU clock moved more than the active threads' schedstat explain (beyond what the
  spread of the reads can blur: a parked thread ran), then all parked threads are read, and
  (b) every IDLE_POLL_CLOCK_NS as a safety net (IDLE_POLL_NS without the clock, when (b) is
  how a woken thread is found; its on-CPU time then counts whole, at most that late);
* a thread that ran has its syscall file read at every tick (a state held over several
  ticks would make the sleeps of a short loop lumpy from one interval to the next); only when
  that does not settle its sleep (a call that may sleep in S or D) or its CPU number is older
  than CPU_REFRESH_NS, its stat;
* group-wide and host-wide files (/proc/PID/io walks every thread in the kernel, and so does
  the group's stat, read only without the CPU clock; /proc/stat, meminfo, diskstats) are read
  at most every HOST_MIN_NS;
* a tick only reads the host-wide files and keeps their bytes; `take` (the collector's flush,
  every ~0.75 s) parses them into rows, a batch of ticks at once on warmer caches.

Samples (registry names): host_cpu_usage, cpu_frequency_mhz and cpu_frequency (% of max),
per CPU (device "CPU n") and on device "Host" (host CPU usage: the whole machine; frequency:
the mean over the CPUs the target's threads ran on).  The Host rows come at every host tick;
the per-CPU rows every max(HOST_MIN_NS, CPUs × PER_CPU_NS) (every tick up to 10 CPUs, every
1.28 s on 128), each over the time since the last.  Also host_mem_used, process_rss,
process_cpu_usage, context_switches, and per disk (device "Disk NAME") disk_usage (busy %),
disk_read and disk_write (B/s).

The per-thread reading is `target.TargetReader`, the host-wide one `hostwide.HostWideReader`;
everything is read through `ProcFS` (settable /proc and /sys roots) so tests feed files.
Whatever the kernel or permissions do not allow is recorded as unsupported, never stored as 0.
"""
from __future__ import annotations

import os
import platform
from typing import Any, Callable

from perfdiff.collectors.base import MISSING, TABLE_COLUMNS, RowBuffer, SamplerState
from perfdiff.collectors.procfs import FdCache, ProcFS
from perfdiff.collectors.procfs import fd_limit as _fd_limit

from .hostwide import _PER_CPU_ONLY, HOST_MIN_NS, PER_CPU_NS, HostWideReader
from .target import IDLE_AFTER_NS, IDLE_POLL_CLOCK_NS, IDLE_POLL_EVERY, IDLE_POLL_NS, TargetReader
from .taskstate import (
    _BLOCKED,
    _READ,
    _WRITE,
    HOST,
    HOST_FUNCTIONS,
    READ_SYSCALLS,
    RUNNING,
    SLEEP_SYSCALLS,
    WRITE_SYSCALLS,
    _Gone,
    _Process,
    process_cpu_clock,
)


class HostSampler(TargetReader, HostWideReader):
    """Samples the target's threads and the host at every tick (see the module docstring).

    `target_pids` returns the live target processes (the root and its children); `interval_ns`
    is the tick period; `procfs` and `arch` (``platform.machine()``) are the seams tests set.
    """

    name = "host"

    def __init__(self, target_pids: Callable[[], set[int]], *, interval_ns: int,
                 procfs: ProcFS | None = None, arch: str | None = None, fd_limit: int | None = None,
                 cpu_clock: Callable[[int], int] | None | bool = True):
        self.target_pids = target_pids
        self.interval_ns = interval_ns
        self.fs = procfs or ProcFS()
        self.arch = arch or platform.machine()
        self.state = SamplerState()
        self.fds = FdCache(_fd_limit() if fd_limit is None else fd_limit)
        self.procs: dict[int, _Process] = {}
        self.t_prev = 0
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.use_schedstat = True
        self.use_syscall = self.arch in READ_SYSCALLS
        self.use_io = True
        self.read_nr = READ_SYSCALLS.get(self.arch, frozenset())
        self.write_nr = WRITE_SYSCALLS.get(self.arch, frozenset())
        self.sleep_nr = SLEEP_SYSCALLS.get(self.arch, frozenset())
        # A syscall file's first word → (state, host function, sysno), for the calls that
        # settle a thread's sleep by themselves (see _sleep_of), and for "running".
        self.sleep_heads: dict[bytes, tuple[str, int, int]] = {b"running": ("R", -1, RUNNING)}
        for nrs, cat in ((self.sleep_nr, _BLOCKED), (self.write_nr, _WRITE), (self.read_nr, _READ)):
            self.sleep_heads.update({str(n).encode(): ("S", cat, n) for n in nrs})
        self.cpu_prev: dict[str, tuple[int, int]] = {}
        self.freq_source = ""
        self.freq_fds: dict[int, tuple[int, str]] = {}  # cpu → (descriptor, path)
        self.max_mhz: dict[int, float] = {}
        self.disks: frozenset[str] | None = None
        self.disk_keys: frozenset[bytes] | None = None  # self.disks encoded, for parse_diskstats
        self.disk_prev: dict[str, tuple[int, int, int]] = {}
        self.target_cpus: set[int] = set()
        self.max_threads = 0
        self.seen_pids: set[int] = set()
        self.buf = RowBuffer()
        # Host-function readings, a tuple per tick: (t0, t1, ns of each HOST_FUNCTIONS,
        # read bytes, write bytes, context switches or -1, entries in state.unsupported then),
        # expanded into rows by `take`.
        self.ticks: list[tuple[int, ...]] = []
        # Host-wide readings, a tuple per host-cadence tick: (t0, t1, /proc/stat, meminfo,
        # diskstats bytes (None: unreadable), frequency readings, the CPUs the target ran on,
        # the target's CPU seconds (-1: no live target), its RSS pages), parsed by `take`.
        self.host_ticks: list[tuple[Any, ...]] = []
        self.cpu_prev_ns = self.disk_prev_ns = 0  # when cpu_prev["cpu"] / disk_prev were read
        self.per_cpu_ns = HOST_MIN_NS  # per-CPU readings this often (set by start from the CPU count)
        self.per_cpu_prev = 0  # when they were last read
        self.per_cpu_stat_ns = 0  # when cpu_prev's per-CPU entries were read
        self.host_row_errors = 0  # host-cadence ticks whose readings could not be made into rows
        self.devices: dict[str, str] = {}  # /proc/stat or diskstats name → device label (_device)
        self.tick_no = 0
        self.host_prev = 0
        self.proc_ticks = 0  # utime+stime ticks of the target since the last host sample
        self.proc_rss = -1  # pages, -1: no live target since the last host sample
        # `cpu_clock(pid)` → the process CPU clock in ns (process_cpu_clock on the real /proc;
        # tests pass their own or None): the exact on-CPU time of all threads, and the signal
        # that a parked (long-idle) thread ran, so those are read only when one did.
        if cpu_clock is True:
            cpu_clock = process_cpu_clock if self.fs.real else None
        self.cpu_clock: Callable[[int], int] | None = cpu_clock or None
        self.idle_after_ticks = max(IDLE_POLL_EVERY, -(-IDLE_AFTER_NS // interval_ns))
        poll_ns = IDLE_POLL_CLOCK_NS if self.cpu_clock else IDLE_POLL_NS
        self.idle_poll_every = max(IDLE_POLL_EVERY, round(poll_ns / interval_ns))
        self.proc_cpu_ns = 0  # process CPU clock ns of the target since the last host sample
        self.host_fds: dict[str, tuple[int, str]] = {}  # /proc file → (kept descriptor or -1, path)
        self.cpuinfo_next_ns = 0

    # ------------------------------------------------------------------ life cycle

    def start(self, t_ns: int) -> None:
        """Take every baseline and decide what this kernel and these permissions allow."""
        self.t_prev = self.host_prev = t_ns
        if not self.use_syscall:
            for fn in ("read", "write"):
                self.state.mark_unsupported(HOST, fn, f"syscall numbers unknown for architecture {self.arch}", t_ns)
        self._read_cpu_times()  # the baseline, and the CPUs there are
        cpus = sorted(int(k[3:]) for k in self.cpu_prev if k != "cpu")
        self._start_cpu_frequency(t_ns, cpus)
        self.per_cpu_ns = max(HOST_MIN_NS, len(cpus) * PER_CPU_NS)
        self.per_cpu_stat_ns = self.cpu_prev_ns = self.disk_prev_ns = t_ns  # the baselines' time
        self.per_cpu_prev = t_ns - self.per_cpu_ns  # the first host tick reads every CPU
        self._start_disks(t_ns)
        for pid in self.target_pids():
            self._add_process(pid, t_ns)
        self._check_schedstat(t_ns)

    def _check_schedstat(self, t_ns: int) -> None:
        """All-zero schedstat on threads that have run means the kernel does not keep it."""
        threads = [th for p in self.procs.values() for th in p.threads.values()]
        if threads and all(th.exec_ns == 0 and th.pcount == 0 for th in threads):
            self._drop_schedstat("schedstat is all zero (kernel without CONFIG_SCHED_INFO/SCHEDSTATS)", t_ns)

    def _drop_schedstat(self, reason: str, t_ns: int) -> None:
        self.use_schedstat = False
        self.state.mark_unsupported(HOST, "runq", reason, t_ns)
        self.state.mark_unsupported(HOST, "context_switches", reason, t_ns)
        self.state.event(t_ns, HOST, "oncpu-from-stat", detail="oncpu from utime+stime clock ticks: " + reason)
        for p in self.procs.values():
            for th in p.threads.values():
                try:
                    self._baseline_thread(th)
                except _Gone:
                    pass  # dropped at the next tick

    def close(self) -> None:
        for p in list(self.procs.values()):
            self._drop_process(p)
        for fd, _ in self.freq_fds.values():
            self.fds.close(fd)
        self.freq_fds.clear()
        for fd, _ in self.host_fds.values():
            self.fds.close(fd)
        self.host_fds.clear()

    def manifest(self) -> dict[str, Any]:
        """Manifest fragment (see perfdiff.collectors.base.Sampler.manifest)."""
        return {
            "collector": {
                "name": self.name,
                "interval_ns": self.interval_ns,
                "source": "/proc, /sys",
                "functions": {
                    "oncpu": "schedstat on-CPU ns" if self.use_schedstat else "stat utime+stime (clock ticks)",
                    "runq": "schedstat run-queue wait ns",
                    "blocked": "threads seen in state S at a tick (not in read/write) × interval",
                    "iowait": "threads seen in state D at a tick (not in read/write) × interval",
                    "read": f"threads seen asleep in read-like syscalls {sorted(self.read_nr)} × interval",
                    "write": f"threads seen asleep in write-like syscalls {sorted(self.write_nr)} × interval",
                },
                "cpu_frequency_source": self.freq_source,
                "arch": self.arch,
                "max_threads": self.max_threads,
                "per_cpu_interval_ns": self.per_cpu_ns,
                "host_row_errors": self.host_row_errors,  # ticks whose host-wide rows were lost
                "processes": sorted(self.seen_pids),
                "disks": sorted(self.disks or self.disk_prev),
            },
            "unsupported": self.state.unsupported_list(),
            "events": list(self.state.events),
        }

    # ------------------------------------------------------------------ the tick

    def sample(self, t_ns: int) -> dict[str, Any]:
        """Read everything once; returns the rows, which cover [previous tick, t_ns]."""
        self.tick(t_ns)
        return self.take()

    def take(self) -> dict[str, Any]:
        """The rows of every tick since the last take, as column lists per table."""
        self._expand_ticks()
        self._expand_host()
        return self.buf.take()

    def stop(self, t_ns: int) -> dict[str, Any]:
        """The collection's end (after its last tick): where per-CPU readings are spaced out
        (more than 10 CPUs), one last one, so that per-CPU rows cover the run to its end; returns
        every row not taken yet."""
        # Not within HOST_MIN_NS of the last per-CPU reading: /proc/stat counts 10 ms ticks, and
        # a few ms would give each CPU 0 or 100 %, one sample as heavy as a second-long one.
        if (self.per_cpu_ns > HOST_MIN_NS and t_ns - self.per_cpu_prev >= HOST_MIN_NS
                and t_ns > self.t_prev and self.cpu_prev):
            self.per_cpu_prev = t_ns
            self.host_ticks.append((self.host_prev, t_ns, self._read_host_raw("stat"), None, None,
                                    self._read_frequencies_raw(t_ns, True), set(), -1.0, 0, _PER_CPU_ONLY))
        return self.take()

    def tick(self, t_ns: int) -> None:
        """Read everything once and keep the rows, which cover [previous tick, t_ns], for
        `take`: the collect loop takes them at its flush, not at every tick."""
        dt = t_ns - self.t_prev
        if dt <= 0:
            return
        t0 = self.t_prev
        self.t_prev = t_ns
        self.tick_no += 1
        slow = t_ns - self.host_prev >= HOST_MIN_NS - dt // 2
        self._sample_target(t0, t_ns, dt, slow)
        if slow:
            # Only the reads happen now; `take` parses them into rows at the flush, where a
            # batch of ticks runs on warm caches (a tick's Python runs cold, at several times
            # the cost).
            cpu_s = self.proc_ticks / self.clk_tck + self.proc_cpu_ns / 1e9 if self.proc_rss >= 0 else -1.0
            per_cpu = t_ns - self.per_cpu_prev >= self.per_cpu_ns - dt // 2
            if per_cpu:
                self.per_cpu_prev = t_ns
            self.host_ticks.append((self.host_prev, t_ns, self._read_host_raw("stat"),
                                    self._read_host_raw("meminfo"), self._read_host_raw("diskstats"),
                                    self._read_frequencies_raw(t_ns, per_cpu), self.target_cpus, cpu_s,
                                    self.proc_rss, per_cpu))
            self.host_prev, self.proc_ticks, self.proc_cpu_ns, self.proc_rss = t_ns, 0, 0, -1

    def _expand_ticks(self) -> None:
        """Move the buffered per-tick tuples into `buf` as activity and sample rows, each tick
        with the host functions that were supported at that tick."""
        ticks, self.ticks = self.ticks, []
        if not ticks:
            return
        t0s, t1s, *cols = map(list, zip(*ticks, strict=True))
        marked = list(self.state.unsupported)  # in the order they were marked
        acts: dict[str, list[Any]] = {c: [] for c in TABLE_COLUMNS["activity"]}
        lo, counts = 0, cols[9]
        while lo < len(t0s):  # runs of ticks with the same functions (one run but for a change)
            hi = lo + 1
            while hi < len(t0s) and counts[hi] == counts[lo]:
                hi += 1
            unsupported = set(marked[:counts[lo]])
            n = hi - lo
            for i, fn in enumerate(HOST_FUNCTIONS):
                if (HOST, fn) in unsupported:
                    continue
                acts["function"] += [fn] * n
                acts["kind"] += ["host"] * n
                acts["device"] += [HOST] * n
                acts["start_ns"] += t0s[lo:hi]
                acts["end_ns"] += t1s[lo:hi]
                acts["busy_ns"] += cols[i][lo:hi]
                acts["bytes"] += cols[6][lo:hi] if i == _READ else cols[7][lo:hi] if i == _WRITE else [MISSING] * n
            lo = hi
        if acts["function"]:
            self.buf.add_columns("activity", acts)
        keep = [k for k, c in enumerate(cols[8]) if c >= 0]
        if keep:
            self.buf.add_columns("samples", {
                "metric": ["context_switches"] * len(keep),
                "device": [HOST] * len(keep),
                "t_start_ns": [t0s[k] for k in keep],
                "t_end_ns": [t1s[k] for k in keep],
                "value": [cols[8][k] / ((t1s[k] - t0s[k]) / 1e9) for k in keep],
            })
