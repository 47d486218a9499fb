"""Per-thread states at the tick: the target's processes and threads as the sampler keeps them.

The parsers of the per-thread and per-process /proc files read at a tick (schedstat: ns;
stat: clock ticks and pages; syscall: the number the thread sleeps in; io: bytes), the
syscall tables that tell a read-like, write-like or always-interruptible sleep, the process
CPU clock (ns), and `_Thread` / `_Process`, with the moves of a thread between the active
set and the buckets of long-idle ("parked") threads.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from perfdiff.collectors.procfs import field, pread_file

HOST = "Host"
HOST_FUNCTIONS = ("oncpu", "runq", "blocked", "iowait", "read", "write")
_ONCPU, _RUNQ, _BLOCKED, _IOWAIT, _READ, _WRITE = range(6)

# Syscall numbers of read-like and write-like calls (docs/COLLECTORS.md; aarch64 from the generic
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


def parse_io(raw: bytes, keys: tuple[str, ...] = ("rchar", "wchar")) -> dict[str, int]:
    """/proc/PID/io → {key: bytes} for `keys` ("rchar", "wchar", "read_bytes" ...); absent
    keys are left out."""
    out = {}
    for name in keys:
        text = field(raw, name.encode())
        if text is not None:
            out[name] = int(text)
    return out


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
    return parse_task_stat(pread_file(p.fd_stat, f"{p.base}task/{p.pid}/stat"))


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
