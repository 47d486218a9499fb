"""Host sampler: what the host can see of the target, from /proc and /sys (COLLECTORS.md, Host).

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
  time (a thread that did not run at all is exact).  Splitting only the off-CPU rest of the
  interval by the state at its end was tried and under-counts short sleeps that follow CPU
  work (an fsync after a computation: 2.7 % measured against 6.6 % seen by 2 kHz sampling).
  A stopped process (SIGSTOP) counts in no sleep.  ``read``/``write`` rows carry the bytes
  moved (``/proc/PID/io`` rchar/wchar deltas).

Cost (every /proc read is a syscall of 2-70 µs on a small VM, and every line of Python costs
several times its warm cost on a CPU that slept 100 ms, so reads and work per tick are saved):
* a thread whose schedstat bytes did not move did not run: it is still in the sleep it was
  seen in, one pread on a kept descriptor.  After a second asleep it is *parked*: not even
  iterated over, its sleep counted with the others' in one step, and read only (a) when the
  process CPU clock moved more than the active threads' schedstat explain (beyond what the
  spread of the reads can blur: a parked thread ran), then all parked threads are read, and
  (b) every IDLE_POLL_CLOCK_NS as a safety net (IDLE_POLL_NS without the clock, when (b) is
  how a woken thread is found; its on-CPU time then counts whole, at most that late);
* a thread that ran has its syscall file read at every tick (holding a sampled state over
  several ticks was tried: unbiased over a run, but per cycle it made the sleeps of a 20 ms
  loop at 100 Hz lumpy enough that two identical runs disagreed); only when
  that does not settle its sleep (a call that may sleep in S or D) or its CPU number is older
  than CPU_REFRESH_NS, its stat;
* group-wide and host-wide files (/proc/PID/io walks every thread in the kernel, and so does
  the group's stat, read only without the CPU clock; /proc/stat, meminfo, diskstats) are read
  at most every HOST_MIN_NS;
* a tick only reads the host-wide files and keeps their bytes; `take` (the collector's flush,
  every ~0.75 s) parses them into rows, a batch of ticks at once on warmer caches: user CPU
  cycles per second fell ~10 % at 10 Hz (perf stat, alternated runs).

Samples (registry names): host_cpu_usage, cpu_frequency_mhz and cpu_frequency (% of max),
per CPU (device "CPU n") and on device "Host" (host CPU usage: the whole machine; frequency:
the mean over the CPUs the target's threads ran on).  The Host rows come at every host tick;
the per-CPU rows every max(HOST_MIN_NS, CPUs × PER_CPU_NS) (every tick up to 10 CPUs, every
1.28 s on 128), each over the time since the last.  Also host_mem_used, process_rss,
process_cpu_usage, context_switches, and per disk (device "Disk NAME") disk_usage (busy %),
disk_read and disk_write (B/s).

Everything is read through `ProcFS` (settable /proc and /sys roots) so tests feed files.
Whatever the kernel or permissions do not allow is recorded as unsupported, never stored as 0.
"""
from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from perfdiff.collectors.base import MISSING, TABLE_COLUMNS, RowBuffer, SamplerState

HOST = "Host"
HOST_FUNCTIONS = ("oncpu", "runq", "blocked", "iowait", "read", "write")
_ONCPU, _RUNQ, _BLOCKED, _IOWAIT, _READ, _WRITE = range(6)

# Syscall numbers of read-like and write-like calls (COLLECTORS.md; aarch64 from the generic
# table: read 63, write 64, readv 65, writev 66, pread64 67, pwrite64 68, preadv 69,
# pwritev 70, preadv2 286, pwritev2 287).
READ_SYSCALLS = {"x86_64": frozenset({0, 17, 19, 295, 327}), "aarch64": frozenset({63, 65, 67, 69, 286})}
WRITE_SYSCALLS = {"x86_64": frozenset({1, 18, 20, 296, 328}), "aarch64": frozenset({64, 66, 68, 70, 287})}
# Waits that always sleep interruptibly (state S): a thread seen in one needs no stat read to
# tell S from D.  futex, nanosleep, clock_nanosleep, epoll_wait/pwait/pwait2, poll, ppoll,
# select, pselect6, wait4, waitid, pause, rt_sigsuspend, rt_sigtimedwait, accept, accept4.
SLEEP_SYSCALLS = {
    "x86_64": frozenset({202, 35, 230, 232, 281, 441, 7, 271, 23, 270, 61, 247, 34, 130, 128, 43, 288}),
    "aarch64": frozenset({98, 101, 115, 22, 441, 73, 72, 260, 95, 133, 137, 202, 242}),
}
CPU_REFRESH_NS = 1_000_000_000  # a running thread's CPU (for the frequency mean) is re-read this often

LIST_THREADS_NS = 2_000_000_000  # re-list a process's threads at least this often (a count change lists at once)
IDLE_AFTER_NS = 1_000_000_000  # a thread asleep this long is looked at less often ...
IDLE_POLL_NS = 400_000_000  # ... about this often (every 4th tick at 10 Hz, 40th at 100 Hz) ...
IDLE_POLL_CLOCK_NS = 2_000_000_000  # ... or this often where the process CPU clock tells who ran ...
IDLE_POLL_EVERY = 4  # ... and never more often than every this many ticks
CLOCK_SLACK_NS = 20_000  # CPU-clock time no thread explains that may be rounding, not a wake-up
# Host-wide counters (/proc/stat CPU time, a process's utime+stime) move in clock ticks
# (USER_HZ, 10 ms): over 100 ms a CPU's busy share already moves in steps of 10 %, and read
# faster they are mostly quantisation noise (and a tenth of a 100 Hz collector's CPU), so the
# host metrics are read at most this often whatever --interval is (the target's threads
# follow --interval).
HOST_MIN_NS = 100_000_000
FD_RESERVE = 256  # descriptors left for everything else when caching /proc descriptors
CPUINFO_EVERY_NS = 1_000_000_000  # /proc/cpuinfo clock readings (no cpufreq) at most this often
# Per-CPU readings (each CPU's cpufreq file read, its /proc/stat line parsed, and their rows)
# cost in proportion to the CPUs: on a 128-CPU server at 10 Hz they alone took 1.8 % of a core.
# So they are taken every max(HOST_MIN_NS, CPUs × PER_CPU_NS): every host tick up to 10 CPUs,
# every 1.28 s on 128, at the first host tick (a short run has them too) and at the end
# (`stop`: the rows cover the run to its end).  /proc/stat is read whole at every host tick all
# the same (the total is its first line); the host totals and the clocks of the CPUs the
# target ran on (its frequency mean) stay at every host tick.
PER_CPU_NS = 10_000_000
_PER_CPU_ONLY = 2  # a host_ticks entry's per-CPU field: the last per-CPU reading, no host rows
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size


@dataclass(frozen=True)
class ProcFS:
    """Where /proc and /sys are (tests point these at a folder of fake files)."""

    proc: str = "/proc"
    sys: str = "/sys"

    def read(self, *parts: object) -> bytes:
        """Whole file under /proc (raises OSError)."""
        with open(os.path.join(self.proc, *map(str, parts)), "rb") as fh:
            return fh.read()

    def read_sys(self, *parts: object) -> bytes:
        with open(os.path.join(self.sys, *map(str, parts)), "rb") as fh:
            return fh.read()


# ----------------------------------------------------------------------------- parsers


def parse_schedstat(raw: bytes) -> tuple[int, int, int]:
    """/proc/.../schedstat → (on-CPU ns, run-queue wait ns, times switched in)."""
    a, b, c = raw.split()[:3]
    return int(a), int(b), int(c)


class TaskStat(NamedTuple):
    """The fields of /proc/PID[/task/TID]/stat that perfdiff uses (see proc(5)).

    A NamedTuple: one is built at every stat read, for a fraction of a frozen dataclass's cost."""

    state: str  # R running, S sleeping, D disk sleep, T stopped, Z zombie ...
    ppid: int
    utime: int  # clock ticks
    stime: int
    num_threads: int
    starttime: int  # clock ticks after boot
    rss_pages: int
    processor: int  # CPU last run on


def parse_task_stat(raw: bytes) -> TaskStat:
    """Parse a stat line; the command name may hold spaces and parentheses, so split after the last ')'."""
    rest = raw[raw.rindex(b")") + 2:].split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    return TaskStat(
        state=rest[0].decode(), ppid=int(rest[1]), utime=int(rest[11]), stime=int(rest[12]),
        num_threads=int(rest[17]), starttime=int(rest[19]), rss_pages=int(rest[21]),
        processor=int(rest[36]) if len(rest) > 36 else -1,
    )


RUNNING = -2  # parse_syscall: the thread is on a CPU


def parse_syscall(raw: bytes) -> int:
    """/proc/.../syscall → the syscall number the thread is blocked in; RUNNING when on a CPU;
    -1 when blocked outside a syscall (a page fault) or unreadable."""
    head = raw.split(b" ", 1)[0].strip()
    if head == b"running":
        return RUNNING
    try:
        return int(head)
    except ValueError:
        return -1


def parse_cpu_times(raw: bytes) -> dict[str, tuple[int, int]]:
    """/proc/stat cpu lines → {"cpu": (busy, total), "cpu0": ...} in USER_HZ ticks.

    busy excludes idle and iowait; guest time is already inside user and nice.
    """
    out: dict[str, tuple[int, int]] = {}
    for line in raw.split(b"\n"):
        if not line.startswith(b"cpu"):
            if out:
                break  # the cpu lines come first
            continue
        f = line.split()
        v = [int(x) for x in f[1:9]]  # user nice system idle iowait irq softirq steal
        total = sum(v)
        out[f[0].decode()] = (total - v[3] - v[4], total)
    return out


def _field(raw: bytes, key: bytes) -> bytes | None:
    """The text after "key:" on the line that starts with `key` in a "key: value" file, or None."""
    i = raw.find(b"\n" + key + b":")
    if i < 0:
        if not raw.startswith(key + b":"):
            return None
        i = -1
    start = i + len(key) + 2
    end = raw.find(b"\n", start)
    return raw[start:] if end < 0 else raw[start:end]


def parse_meminfo(raw: bytes, keys: tuple[str, ...] = ("MemTotal", "MemAvailable")) -> dict[str, int]:
    """/proc/meminfo → {key: bytes} for `keys` (kB values scaled); absent keys are left out."""
    out: dict[str, int] = {}
    for name in keys:
        text = _field(raw, name.encode())
        if text is not None:
            f = text.split()
            out[name] = int(f[0]) * (1024 if len(f) > 1 and f[1] == b"kB" else 1)
    return out


def parse_diskstats(raw: bytes, want: frozenset[bytes] | None = None) -> dict[str, tuple[int, int, int]]:
    """/proc/diskstats → {disk: (sectors read, sectors written, ms busy)} for the disk names in
    `want` (encoded, as the lines hold them; all when None).  A wanted disk's line is found by
    its name (the file also lists every partition and loop device)."""
    if want is None:
        lines = raw.split(b"\n")
    else:
        lines = []
        for name in want:
            k = raw.find(b" " + name + b" ")  # "major minor name fields": the name between spaces
            if k >= 0:
                lines.append(raw[raw.rfind(b"\n", 0, k) + 1:raw.find(b"\n", k) % (len(raw) + 1)])
    out = {}
    for line in lines:
        head = line.split(None, 3)  # major minor name rest
        if len(head) < 4 or (want is not None and head[2] not in want):
            continue
        f = head[3].split()
        if len(f) >= 10:
            out[head[2].decode()] = (int(f[2]), int(f[6]), int(f[9]))
    return out


def parse_cpuinfo_mhz(raw: bytes) -> dict[int, float]:
    """/proc/cpuinfo → {cpu: MHz} from each block's "processor" and "cpu MHz" lines.

    Block by block with `find`, not line by line: a 96-CPU VM's cpuinfo has ~2,600 lines
    (0.28 ms against 0.97 ms warm, read once a second where there is no cpufreq)."""
    out: dict[int, float] = {}
    for block in (b"\n" + raw).split(b"\nprocessor")[1:]:
        k = block.find(b"\ncpu MHz")
        if k < 0:
            continue
        end = block.find(b"\n", k + 1)
        try:
            cpu = int(block[block.find(b":") + 1:block.find(b"\n")])
            out[cpu] = float(block[block.find(b":", k) + 1:end if end >= 0 else None])
        except ValueError:
            continue  # a torn block
    return out


def parse_io(raw: bytes, keys: tuple[str, ...] = ("rchar", "wchar")) -> dict[str, int]:
    """/proc/PID/io → {key: bytes} for `keys` ("rchar", "wchar", "read_bytes" ...); absent
    keys are left out."""
    out = {}
    for name in keys:
        text = _field(raw, name.encode())
        if text is not None:
            out[name] = int(text)
    return out


# ----------------------------------------------------------------------------- descriptors


class _FdCache:
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


def _read(fd: int, path: str) -> bytes:
    """pread a kept /proc descriptor from 0 (seq files regenerate), or open-read-close."""
    if fd >= 0:
        return os.pread(fd, 4096, 0)
    with open(path, "rb", buffering=0) as fh:
        return fh.read(4096)


def _read_all(fd: int, path: str) -> bytes:
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


def _fd_limit() -> int:
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


class _Thread:
    __slots__ = ("tid", "base", "fd_sched", "fd_stat", "fd_sys", "raw", "exec_ns", "delay_ns",
                 "pcount", "ticks", "state", "sysno", "cpu", "cpu_until", "cat", "idle", "bucket")

    def __init__(self, tid: int, base: str):
        self.tid = tid
        self.base = base  # /proc/PID/task/TID/
        self.fd_sched = self.fd_stat = self.fd_sys = -2  # -2: not opened yet, -1: not cached
        self.raw = b""  # last schedstat bytes: unchanged bytes = the thread did not run
        self.exec_ns = self.delay_ns = self.pcount = self.ticks = 0
        self.state = "?"
        self.sysno = -1
        self.cpu = -1
        self.cpu_until = 0  # CLOCK_REALTIME ns until which `cpu` is trusted without a stat read
        self.cat = -1  # host function its sleep counts as (_BLOCKED ...), -1 when not asleep
        self.idle = 0  # consecutive ticks its schedstat did not move
        self.bucket = -1  # -1: looked at every tick; k: a long-idle thread, polled on phase k


class _Process:
    __slots__ = ("pid", "base", "fd_stat", "fd_gstat", "fd_io", "threads", "ticks", "rchar", "wchar",
                 "num_threads", "listed_ns", "rss_pages", "active", "buckets", "idle_counts",
                 "clock", "window", "unexplained")

    def __init__(self, pid: int, base: str, poll_every: int = 1):
        self.pid = pid
        self.base = base  # /proc/PID/
        # fd_stat: the leader's own task/PID/stat (state, thread count, RSS), read on most ticks;
        # fd_gstat: the group's stat, which adds utime+stime of every thread (the dead ones
        # included), and fd_io: both walk all threads in the kernel, so they are read only on
        # the host-cadence ticks (HOST_MIN_NS), fd_gstat then in place of fd_stat.
        self.fd_stat = self.fd_gstat = self.fd_io = -2
        self.threads: dict[int, _Thread] = {}  # every thread; each is in `active` or one bucket
        # Long-idle threads sit in `buckets[k]`, looked at on every poll_every-th tick only; a
        # tick does not even iterate the others: `idle_counts[c]` (threads per sleep c among
        # the bucketed) adds their whole interval in one step.
        self.active: dict[int, _Thread] = {}
        self.buckets: list[dict[int, _Thread]] = [{} for _ in range(poll_every)]
        self.idle_counts = [0] * 6
        self.clock = -1  # the process CPU clock (ns) at the last tick's start; -1: unreadable
        self.window = 0  # CPU the process used while the last tick read its threads (ns)
        self.unexplained = False  # the last tick's CPU clock delta held time no thread explains
        self.ticks = -1  # utime + stime of all threads, dead ones included
        self.rchar = self.wchar = -1
        self.num_threads = 0
        self.listed_ns = 0
        self.rss_pages = 0


def process_cpu_clock(pid: int) -> int:
    """CPU time (ns) of every thread of process `pid`, the exited ones included: the kernel's
    process CPU clock (clock_getcpuclockid(3); its id is ``~pid << 3 | CPUCLOCK_SCHED``), the
    same counter as the sum of the threads' schedstat on-CPU ns, for one ~2 µs call instead of
    a /proc read per thread.  Raises OSError when the process is gone."""
    return time.clock_gettime_ns((~pid << 3) | 2)


def _leader_stat(p: _Process) -> TaskStat:
    """The leader thread's own stat (state, thread count, RSS); raises OSError, ValueError or
    IndexError when it is gone or torn."""
    return parse_task_stat(_read(p.fd_stat, f"{p.base}task/{p.pid}/stat"))


def _add_thread(p: _Process, th: _Thread) -> None:
    p.threads[th.tid] = th
    p.active[th.tid] = th


def _park(p: _Process, th: _Thread) -> None:
    """Move an active thread asleep for long to its bucket (tid modulo the buckets)."""
    del p.active[th.tid]
    th.bucket = th.tid % len(p.buckets)
    p.buckets[th.bucket][th.tid] = th
    if th.cat >= 0:
        p.idle_counts[th.cat] += 1


def _unpark(p: _Process, th: _Thread) -> None:
    del p.buckets[th.bucket][th.tid]
    th.bucket = -1
    p.active[th.tid] = th
    if th.cat >= 0:
        p.idle_counts[th.cat] -= 1


def _remove_thread(p: _Process, tid: int) -> _Thread:
    th = p.threads.pop(tid)
    if th.bucket >= 0:
        _unpark(p, th)
    del p.active[tid]
    return th


class _Gone(Exception):
    """The thread or process exited between two reads."""


# ----------------------------------------------------------------------------- sampler


class HostSampler:
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
        self.fds = _FdCache(_fd_limit() if fd_limit is None else fd_limit)
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
            cpu_clock = process_cpu_clock if self.fs.proc == "/proc" else None
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

    # ------------------------------------------------------------------ processes and threads

    def _add_process(self, pid: int, t_ns: int) -> None:
        base = os.path.join(self.fs.proc, str(pid)) + "/"
        p = _Process(pid, base, self.idle_poll_every)
        try:
            p.fd_stat = self.fds.open(f"{base}task/{pid}/stat")
            p.fd_gstat = self.fds.open(base + "stat")
            st = parse_task_stat(_read(p.fd_gstat, base + "stat"))
        except (OSError, ValueError, IndexError):
            self.fds.close(p.fd_stat)
            self.fds.close(p.fd_gstat)
            return  # gone already
        p.ticks, p.num_threads, p.rss_pages = st.utime + st.stime, st.num_threads, st.rss_pages
        if self.cpu_clock is not None:
            try:
                p.clock = self.cpu_clock(pid)
            except OSError:
                p.clock = -1  # gone already, or a kernel without process CPU clocks: schedstat sums
        if self.use_io:
            try:
                p.fd_io = self.fds.open(base + "io")
                io = parse_io(_read(p.fd_io, base + "io"))
                p.rchar, p.wchar = io["rchar"], io["wchar"]
            except PermissionError:
                self.use_io = False
                self.state.mark_unsupported(HOST, "io_bytes", f"no permission to read {base}io (ptrace read access)", t_ns)
            except (OSError, KeyError, ValueError):
                p.fd_io = -2
        self.procs[pid] = p
        self.seen_pids.add(pid)
        self._list_threads(p, t_ns)

    def _drop_process(self, p: _Process) -> None:
        for tid in list(p.threads):
            self._close_thread(_remove_thread(p, tid))
        for fd in (p.fd_stat, p.fd_gstat, p.fd_io):
            self.fds.close(fd)
        p.fd_stat = p.fd_gstat = p.fd_io = -2
        self.procs.pop(p.pid, None)

    def _list_threads(self, p: _Process, t_ns: int) -> None:
        try:
            tids = set(map(int, os.listdir(p.base + "task")))
        except OSError:
            return
        p.listed_ns = t_ns
        if tids == p.threads.keys():
            return  # the periodic re-list's usual answer: the same threads (compared in C)
        for tid in list(p.threads):
            if tid not in tids:
                self._close_thread(_remove_thread(p, tid))
        for tid in tids - p.threads.keys():
            th = _Thread(tid, f"{p.base}task/{tid}/")
            try:
                self._baseline_thread(th)
            except _Gone:
                self._close_thread(th)
                continue
            _add_thread(p, th)
        self.max_threads = max(self.max_threads, sum(len(q.threads) for q in self.procs.values()))

    def _close_thread(self, th: _Thread) -> None:
        for fd in (th.fd_sched, th.fd_stat, th.fd_sys):
            self.fds.close(fd)
        th.fd_sched = th.fd_stat = th.fd_sys = -2

    def _baseline_thread(self, th: _Thread) -> None:
        """First reading of a thread: counters and state, no interval yet (raises _Gone)."""
        if self.use_schedstat:
            th.exec_ns, th.delay_ns, th.pcount = self._schedstat(th)
        self._read_state(th, self.t_prev)
        if not self.use_schedstat:
            th.exec_ns = th.ticks  # the fallback keeps the last utime+stime ticks here

    def _schedstat(self, th: _Thread) -> tuple[int, int, int]:
        try:
            if th.fd_sched == -2:
                th.fd_sched = self.fds.open(th.base + "schedstat")
            raw = _read(th.fd_sched, th.base + "schedstat")
            th.raw = raw
            return parse_schedstat(raw)
        except (OSError, ValueError) as exc:
            raise _Gone from exc

    def _read_state(self, th: _Thread, t_ns: int) -> None:
        """Find what a thread that ran is doing now: its sleep (th.cat) and its CPU.

        The syscall file first (the cheaper read): on a CPU, in a read/write-like call, or in
        an always-interruptible wait settles it; only another sleep (S or D?) or a CPU number
        older than CPU_REFRESH_NS costs the stat read too.  Without syscall access: stat alone.
        """
        sysno = self._read_syscall(th, t_ns) if self.use_syscall else -3
        th.sysno = max(sysno, -1) if sysno != RUNNING else RUNNING
        known = self._sleep_of(sysno)
        if known is not None and t_ns < th.cpu_until and self.use_schedstat:
            th.state, th.cat = known
            return
        try:
            if th.fd_stat == -2:
                th.fd_stat = self.fds.open(th.base + "stat")
            st = parse_task_stat(_read(th.fd_stat, th.base + "stat"))
        except (OSError, ValueError, IndexError) as exc:
            raise _Gone from exc
        th.cpu, th.ticks, th.cpu_until = st.processor, st.utime + st.stime, t_ns + CPU_REFRESH_NS
        if known is not None:
            th.state, th.cat = known
        else:
            th.state = st.state
            th.cat = _BLOCKED if st.state == "S" else _IOWAIT if st.state == "D" else -1

    def _sleep_of(self, sysno: int) -> tuple[str, int] | None:
        """(state, host function) that a syscall number alone tells, or None."""
        if sysno == RUNNING:
            return "R", -1
        if sysno < 0:
            return None
        if sysno in self.read_nr:
            return "S", _READ
        if sysno in self.write_nr:
            return "S", _WRITE
        if sysno in self.sleep_nr:
            return "S", _BLOCKED
        return None

    def _read_syscall(self, th: _Thread, t_ns: int) -> int:
        """The thread's syscall number (RUNNING, -1 outside one); -3 when it cannot be read."""
        try:
            if th.fd_sys == -2:
                th.fd_sys = self.fds.open(th.base + "syscall")
            return parse_syscall(_read(th.fd_sys, th.base + "syscall"))
        except PermissionError:
            self.use_syscall = False
            for fn in ("read", "write"):
                self.state.mark_unsupported(HOST, fn, f"no permission to read {th.base}syscall (ptrace read access)", t_ns)
        except OSError:
            pass  # exited: the stat read says so
        return -3

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

    def _sample_target(self, t0: int, t1: int, dt: int, slow: bool) -> None:
        """The target's threads over [t0, t1]; `slow`: also its group-wide counters (CPU ticks
        and I/O bytes, each a walk over all its threads in the kernel), at the host cadence."""
        pids = self.target_pids()
        for pid in list(self.procs):
            if pid not in pids:
                self._drop_process(self.procs[pid])
        acc = [0, 0, 0, 0, 0, 0]
        switches = rss = 0
        rchar = wchar = 0
        ran_on: set[int] = set()
        had_target = False
        for pid in pids:
            p = self.procs.get(pid)
            if p is None:
                self._add_process(pid, t1)  # baseline only: it counts from the next tick
                continue
            try:
                clock = self.cpu_clock(pid) if p.clock >= 0 else -1  # type: ignore[misc]
                # The leader's stat (its state, the thread count, RSS) costs the most of a
                # tick's reads on a cold CPU; with the process CPU clock it is read only at the
                # host cadence and when the clock did not move (stopped, exited, or idle).
                # In between, a new thread that runs shows as CPU no thread explains, which
                # reads it too (below); one that only sleeps is found at the host cadence.
                # Without schedstat there is no such check: read at every tick.
                st = None
                if slow and p.clock < 0:
                    # The group's stat adds every thread's CPU ticks (a walk over them in the
                    # kernel): read only for process_cpu_usage without the process CPU clock.
                    st = parse_task_stat(_read(p.fd_gstat, p.base + "stat"))
                    self.proc_ticks += st.utime + st.stime - p.ticks
                    p.ticks = st.utime + st.stime
                elif slow or clock < 0 or clock == p.clock or not self.use_schedstat:
                    st = _leader_stat(p)
            except (OSError, ValueError, IndexError):
                self._drop_process(p)
                continue
            if st is not None:
                if st.state in ("Z", "X"):
                    self._drop_process(p)
                    continue
                p.rss_pages = st.rss_pages
                if st.num_threads != len(p.threads) or t1 - p.listed_ns >= LIST_THREADS_NS:
                    self._list_threads(p, t1)
            had_target = True
            rss += p.rss_pages  # read at this tick, or the last one read
            if slow:
                r, w = self._read_io(p)
                rchar += r
                wchar += w
            # A stopped process (SIGSTOP, group stop: every thread in T) sleeps in no host state,
            # though its threads' syscall files still name the call they were stopped in.
            sleeps = acc if st is None or st.state not in ("T", "t") else [0, 0, 0, 0, 0, 0]
            switches += self._sample_threads(p, dt, sleeps, ran_on, t1, clock)
            if clock >= 0:
                try:  # the CPU the process used while its threads were read (see _sample_threads)
                    p.window = self.cpu_clock(pid) - clock if self.cpu_clock else 0
                except OSError:  # it exited meanwhile: dropped at the next tick
                    p.window = 0
                self.proc_cpu_ns += clock - p.clock
                p.clock = clock
            if st is None and p.unexplained:  # a thread came (or went) meanwhile?
                try:
                    if _leader_stat(p).num_threads != len(p.threads):
                        self._list_threads(p, t1)  # new threads count from the next tick
                except (OSError, ValueError, IndexError):
                    pass  # exited: dropped at the next tick
            if sleeps is not acc:
                acc[_ONCPU] += sleeps[_ONCPU]
                acc[_RUNQ] += sleeps[_RUNQ]
        if not had_target:
            return
        if ran_on:
            self.target_cpus = ran_on
        if slow and self.use_io:  # bytes since the previous host-cadence tick
            rbytes, wbytes = max(rchar, 0), max(wchar, 0)
        else:
            rbytes = wbytes = MISSING
        # One tuple per tick; `take` turns them into rows (6 functions + context switches),
        # of the functions supported at this tick (the last field: how many entries `unsupported`
        # had then; it only grows, in order).
        self.ticks.append((t0, t1, *acc, rbytes, wbytes, switches if self.use_schedstat else -1,
                           len(self.state.unsupported)))
        self.proc_rss = rss

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

    def _read_io(self, p: _Process) -> tuple[int, int]:
        """p's (rchar, wchar) deltas since the last call (0, 0 when unreadable)."""
        if not self.use_io or p.fd_io == -2:
            return 0, 0
        try:
            io = parse_io(_read(p.fd_io, p.base + "io"))
        except (OSError, KeyError, ValueError):
            return 0, 0
        r, w = io["rchar"] - p.rchar, io["wchar"] - p.wchar
        p.rchar, p.wchar = io["rchar"], io["wchar"]
        return r, w

    def _sample_threads(self, p: _Process, dt: int, acc: list[int], ran_on: set[int], t1: int,
                        clock: int = -1) -> int:
        """Add p's threads' interval to `acc` (ns per host function); returns context switches.

        `clock`: the process CPU clock read at this tick's start (-1 without one); then on-CPU
        is its delta (exact, every thread, the exited ones included), and a parked thread is
        read only when the delta holds time no active thread explains, or on its bucket's
        safety tick.  The hot path is a thread that did not run: one pread of its schedstat,
        bytes equal to the last ones, its whole interval to the sleep it was seen in.
        """
        if not self.use_schedstat:
            return self._sample_threads_ticks(p, dt, acc, ran_on, t1)
        gone: list[int] = []
        # Parked threads (asleep for a second or more) count their whole interval to their
        # sleep at once, without a look; one that is found to have run is undone from its
        # sleep and read as an active thread.
        for cat, n in enumerate(p.idle_counts):
            if n:
                acc[cat] += n * dt
        switches, ran = self._read_threads(p, list(p.active.values()), dt, acc, ran_on, t1, gone)
        # CPU-clock time no active thread explains, beyond what the last tick's reading window
        # can blur (the active threads' reads are spread over it): a parked thread ran (or a
        # thread came or went).  Every bucket is polled then; else the due one only.
        p.unexplained = clock >= 0 and clock - p.clock - ran > p.window + CLOCK_SLACK_NS
        if p.unexplained:
            polled = [th for bucket in p.buckets for th in bucket.values()]
        else:
            polled = list(p.buckets[self.tick_no % len(p.buckets)].values())
        if polled:
            more, more_ran = self._read_threads(p, polled, dt, acc, ran_on, t1, gone)
            switches += more
            ran += more_ran
        acc[_ONCPU] += clock - p.clock if clock >= 0 else ran
        for tid in gone:
            self._close_thread(_remove_thread(p, tid))
        idle_after = self.idle_after_ticks
        for th in [th for th in p.active.values() if th.idle >= idle_after]:
            _park(p, th)  # asleep for long: polled on its bucket's ticks from now on
        return switches

    def _read_threads(self, p: _Process, threads: list[_Thread], dt: int, acc: list[int],
                      ran_on: set[int], t1: int, gone: list[int]) -> tuple[int, int]:
        """Read `threads`' schedstat: run-queue wait and sleeps into `acc`; returns (context
        switches, on-CPU ns) of the interval.  A thread whose counters moved has its sleep
        state read.  A parked thread (its sleep already counted through p.idle_counts) that
        did not run is left as it is; one that ran is unparked, its sleep's count undone, and
        read like the others."""
        switches = ran = 0
        pread = os.pread
        sleeps = self.sleep_heads
        for th in threads:
            fd = th.fd_sched
            try:
                raw = pread(fd, 128, 0) if fd >= 0 else _read(fd, th.base + "schedstat")
            except OSError:
                gone.append(th.tid)
                continue
            if raw == th.raw:
                if th.bucket >= 0:
                    continue  # still asleep where it was parked
                th.idle += 1
                if th.cat >= 0:
                    acc[th.cat] += dt
                continue
            if th.bucket >= 0:
                _unpark(p, th)
                if th.cat >= 0:
                    acc[th.cat] -= dt  # counted through idle_counts in its old sleep
            th.raw = raw
            th.idle = 0
            try:
                e, d, c = raw.split()
                e, d, c = int(e), int(d), int(c)
                # _read_state's common case inline (a call costs more than the work on a cold
                # CPU): the syscall file names a known sleep, or "running", and the thread's
                # CPU number is recent.
                fs = th.fd_sys
                if fs >= 0 and t1 < th.cpu_until and self.use_syscall:
                    try:
                        head = pread(fs, 128, 0)
                    except OSError:
                        head = b""  # the slow path tells an exited thread from a denied read
                    i = head.find(b" ")
                    known = sleeps.get(head[:i] if i > 0 else head.strip())
                    if known is not None:
                        th.state, th.cat, th.sysno = known
                    else:
                        self._read_state(th, t1)
                else:
                    self._read_state(th, t1)
            except (ValueError, _Gone):
                gone.append(th.tid)
                continue
            de = e - th.exec_ns
            switches += c - th.pcount
            ran += de
            acc[_RUNQ] += d - th.delay_ns
            th.exec_ns, th.delay_ns, th.pcount = e, d, c
            if de:
                ran_on.add(th.cpu)
            if th.cat >= 0:
                acc[th.cat] += dt
        return switches, ran

    def _sample_threads_ticks(self, p: _Process, dt: int, acc: list[int], ran_on: set[int], t1: int) -> int:
        """Fallback without schedstat: on-CPU from utime+stime clock ticks, every stat read."""
        gone: list[int] = []
        for th in p.threads.values():
            try:
                self._read_state(th, t1)
            except _Gone:
                gone.append(th.tid)
                continue
            de = (th.ticks - th.exec_ns) * 1_000_000_000 // self.clk_tck  # exec_ns holds the last ticks
            th.exec_ns = th.ticks
            acc[_ONCPU] += de
            if de:
                ran_on.add(th.cpu)
            if th.cat >= 0:
                acc[th.cat] += dt
        for tid in gone:
            self._close_thread(_remove_thread(p, tid))
        return 0

    # ------------------------------------------------------------------ host-wide

    def _start_cpu_frequency(self, t_ns: int, cpus: list[int]) -> None:
        base = os.path.join(self.fs.sys, "devices/system/cpu")
        for cpu in cpus:
            d = f"{base}/cpu{cpu}/cpufreq/"
            try:
                mhz = int(self.fs.read_sys(f"devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq")) / 1000.0
                if mhz > 0:  # a 0 (a broken driver) would divide by zero: no % of max for that CPU
                    self.max_mhz[cpu] = mhz
            except (OSError, ValueError):
                pass
            try:
                fd = self.fds.open(d + "scaling_cur_freq")
            except OSError:
                continue
            self.freq_fds[cpu] = (fd, d + "scaling_cur_freq")
        if self.freq_fds:
            self.freq_source = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq"
        else:
            try:
                if parse_cpuinfo_mhz(self.fs.read("cpuinfo")):
                    self.freq_source = "/proc/cpuinfo 'cpu MHz' (no cpufreq driver: may be the nominal clock)"
            except OSError:
                pass
        if not self.freq_source:
            for m in ("cpu_frequency_mhz", "cpu_frequency"):
                self.state.mark_unsupported(HOST, m, "no cpufreq in /sys and no 'cpu MHz' in /proc/cpuinfo", t_ns)
        elif not self.max_mhz:
            self.state.mark_unsupported(
                HOST, "cpu_frequency", "no cpufreq/cpuinfo_max_freq in /sys: the maximum clock is unknown", t_ns)

    def _start_disks(self, t_ns: int) -> None:
        try:
            names = os.listdir(os.path.join(self.fs.sys, "block"))
            self.disks = frozenset(n for n in names if not n.startswith(("loop", "ram")))
            self.disk_keys = frozenset(n.encode() for n in self.disks)
        except OSError:
            self.disks = None  # no /sys/block: every line of diskstats
        try:  # the baseline
            self.disk_prev = parse_diskstats(self._read_proc("diskstats"), self.disk_keys)
        except OSError as exc:
            for m in ("disk_usage", "disk_read", "disk_write"):
                self.state.mark_unsupported(HOST, m, f"cannot read /proc/diskstats: {exc.strerror}", t_ns)

    def _read_proc(self, name: str) -> bytes:
        """A host-wide /proc file through a kept descriptor (raises OSError)."""
        entry = self.host_fds.get(name)
        if entry is None:
            path = os.path.join(self.fs.proc, name)
            entry = self.host_fds[name] = (self.fds.open(path), path)
        return _read_all(*entry)

    def _read_cpu_times(self) -> None:
        """The /proc/stat baseline (cpu_prev; empty when unreadable)."""
        try:
            self.cpu_prev = parse_cpu_times(self._read_proc("stat"))
        except OSError:
            self.cpu_prev = {}


    def _read_host_raw(self, name: str) -> bytes | None:
        try:
            return self._read_proc(name)
        except OSError:
            return None

    def _read_frequencies_raw(self, t_ns: int, every_cpu: bool) -> list[tuple[int, bytes]] | bytes | None:
        """The clock readings of this tick: (cpu, scaling_cur_freq bytes) per CPU (`every_cpu`:
        all, else those the target ran on), or /proc/cpuinfo's bytes (at most every
        CPUINFO_EVERY_NS), or None."""
        if self.freq_fds:
            out = []
            fds = self.freq_fds
            for cpu in fds if every_cpu else [c for c in self.target_cpus if c in fds]:
                fd, path = fds[cpu]
                try:
                    out.append((cpu, _read(fd, path)))
                except OSError:
                    pass
            return out
        if self.freq_source and t_ns >= self.cpuinfo_next_ns:
            # /proc/cpuinfo is slow (it may ask every CPU for its clock): at most once a second.
            self.cpuinfo_next_ns = t_ns + CPUINFO_EVERY_NS
            return self._read_host_raw("cpuinfo")
        return None

    def _expand_host(self) -> None:
        """Parse the buffered host-wide readings into sample rows, in tick order (each
        counter's delta against the reading before it)."""
        ticks, self.host_ticks = self.host_ticks, []
        rows: list[tuple[str, str, int, int, float]] = []
        for t0, t1, stat, mem, disks, freqs, cpus, cpu_s, rss, per_cpu in ticks:
            n = len(rows)
            try:
                self._host_rows(rows, t0, t1, stat, mem, disks, freqs, cpus, per_cpu)
            except Exception as exc:  # noqa: BLE001 - one odd reading must not lose the batch
                del rows[n:]
                self.host_row_errors += 1
                if self.host_row_errors <= 3:
                    self.state.event(t1, HOST, "host-rows-error", error=f"{type(exc).__name__}: {exc}")
            if cpu_s >= 0:  # a target was alive in the meantime
                rows.append(("process_cpu_usage", HOST, t0, t1, 100.0 * cpu_s / ((t1 - t0) / 1e9)))
                rows.append(("process_rss", HOST, t1, t1, float(rss * self.page_size)))
        self.buf.samples(rows)

    def _device(self, name: str) -> str:
        """Device label of a /proc/stat CPU name ("cpu" → "Host", "cpu3" → "CPU 3") or, prefixed
        with "/", of a disk ("/vda" → "Disk vda"); kept, as a flush names each many times."""
        dev = self.devices.get(name)
        if dev is None:
            dev = self.devices[name] = (f"Disk {name[1:]}" if name[0] == "/" else HOST if name == "cpu"
                                        else f"CPU {name[3:]}")
        return dev

    def _host_rows(self, rows: list[tuple[str, str, int, int, float]], t0: int, t1: int, stat: bytes | None,
                   mem: bytes | None, disks: bytes | None, freq_raw: list[tuple[int, bytes]] | bytes | None,
                   target_cpus: set[int], per_cpu: int = 1) -> None:
        """Append one host-cadence tick's sample rows over [t0, t1] to `rows`; `per_cpu`: 1 (or
        True) also the per-CPU rows (each over the time since the last per-CPU reading), 0 not,
        _PER_CPU_ONLY (the reading `stop` adds) only those."""
        device = self._device
        if stat is not None:
            try:
                now = parse_cpu_times(stat if per_cpu else stat[:stat.find(b"\n") % (len(stat) + 1)])
            except (ValueError, IndexError):
                now = {}
            total_now = now.get("cpu") if per_cpu != _PER_CPU_ONLY else None
            if total_now is not None:
                # Deltas span back to the last good reading (the tick before, unless its read failed).
                p = self.cpu_prev.get("cpu")
                self.cpu_prev["cpu"] = total_now
                c0, self.cpu_prev_ns = self.cpu_prev_ns, t1
                if p is not None and total_now[1] > p[1]:
                    rows.append(("host_cpu_usage", HOST, c0, t1, 100.0 * (total_now[0] - p[0]) / (total_now[1] - p[1])))
            if per_cpu and len(now) > 1:
                c0, prev = self.per_cpu_stat_ns, self.cpu_prev
                for name, (busy, total) in now.items():
                    p = prev.get(name)
                    if name != "cpu" and p is not None and total > p[1]:
                        rows.append(("host_cpu_usage", device(name), c0, t1, 100.0 * (busy - p[0]) / (total - p[1])))
                if "cpu" in self.cpu_prev:
                    now["cpu"] = self.cpu_prev["cpu"]
                self.cpu_prev, self.per_cpu_stat_ns = now, t1  # baseline and its time together
        if isinstance(freq_raw, bytes):
            try:
                freqs = parse_cpuinfo_mhz(freq_raw)
            except ValueError:
                freqs = {}
        else:
            freqs = {}
            for cpu, raw in freq_raw or ():
                try:
                    freqs[cpu] = int(raw) / 1000.0
                except ValueError:
                    pass
        max_mhz = self.max_mhz
        for cpu, mhz in freqs.items() if per_cpu or isinstance(freq_raw, bytes) else ():
            dev = device(f"cpu{cpu}")
            rows.append(("cpu_frequency_mhz", dev, t1, t1, mhz))
            if cpu in max_mhz:
                rows.append(("cpu_frequency", dev, t1, t1, 100.0 * mhz / max_mhz[cpu]))
        on = [c for c in target_cpus if c in freqs]  # none for `stop`'s reading: it passes no CPUs
        if on:
            rows.append(("cpu_frequency_mhz", HOST, t1, t1, sum(freqs[c] for c in on) / len(on)))
            pct = [100.0 * freqs[c] / max_mhz[c] for c in on if c in max_mhz]
            if pct:
                rows.append(("cpu_frequency", HOST, t1, t1, sum(pct) / len(pct)))
        if mem is not None:
            try:
                m = parse_meminfo(mem)
                rows.append(("host_mem_used", HOST, t1, t1, float(m["MemTotal"] - m["MemAvailable"])))
            except (KeyError, ValueError, IndexError):
                pass
        if disks is None:
            return
        try:
            dnow = parse_diskstats(disks, self.disk_keys)
        except (ValueError, IndexError):
            return
        dprev, self.disk_prev = self.disk_prev, dnow
        t0, self.disk_prev_ns = self.disk_prev_ns, t1
        dt = t1 - t0
        if dt <= 0:
            return
        per_s = SECTOR / (dt / 1e9)
        for name, (rd, wr, busy_ms) in dnow.items():
            p = dprev.get(name)
            if p is None:
                continue
            dev = device("/" + name)
            rows.append(("disk_usage", dev, t0, t1, min(100.0, 100.0 * (busy_ms - p[2]) * 1e6 / dt)))
            rows.append(("disk_read", dev, t0, t1, (rd - p[0]) * per_s))
            rows.append(("disk_write", dev, t0, t1, (wr - p[1]) * per_s))


def host_info(procfs: ProcFS | None = None) -> dict[str, Any]:
    """The manifest's host entry: name, CPU model, cores, kernel, max clocks (MHz)."""
    fs = procfs or ProcFS()
    model = ""
    try:
        for line in fs.read("cpuinfo").split(b"\n"):
            if line.startswith(b"model name"):
                model = line.partition(b":")[2].decode().strip()
                break
    except OSError:
        pass
    u = os.uname()
    return {
        "hostname": u.nodename,
        "kernel": u.release,
        "arch": u.machine,
        "cpu_model": model,
        "cores": os.cpu_count(),
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
    }
