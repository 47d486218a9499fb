"""The target's processes and threads at each tick: what each thread did over the interval.

`TargetReader` (a part of `HostSampler`, which holds its state) adds and drops the target's
processes, lists their threads, and at every tick reads each thread's schedstat (on-CPU and
run-queue ns), and, for a thread that ran, its syscall file and where needed its stat, to
add the interval (ns) to the host function its sleep counts as (see the sampler's docstring).
"""
from __future__ import annotations

import os

from perfdiff.collectors.base import MISSING
from perfdiff.collectors.procfs import pread_file

from .taskstate import (
    _BLOCKED,
    _IOWAIT,
    _ONCPU,
    _READ,
    _RUNQ,
    _WRITE,
    CPU_REFRESH_NS,
    HOST,
    RUNNING,
    _add_thread,
    _Gone,
    _leader_stat,
    _park,
    _Process,
    _remove_thread,
    _Thread,
    _unpark,
    parse_io,
    parse_schedstat,
    parse_syscall,
    parse_task_stat,
)

LIST_THREADS_NS = 2_000_000_000  # re-list a process's threads at least this often (a count change lists at once)
IDLE_AFTER_NS = 1_000_000_000  # a thread asleep this long is looked at less often ...
IDLE_POLL_NS = 400_000_000  # ... about this often (every 4th tick at 10 Hz, 40th at 100 Hz) ...
IDLE_POLL_CLOCK_NS = 2_000_000_000  # ... or this often where the process CPU clock tells who ran ...
IDLE_POLL_EVERY = 4  # ... and never more often than every this many ticks
CLOCK_SLACK_NS = 20_000  # CPU-clock time no thread explains that may be rounding, not a wake-up


class TargetReader:
    """Reads the target's processes and threads (the per-tick part of HostSampler)."""

    def _add_process(self, pid: int, t_ns: int) -> None:
        base = os.path.join(self.fs.proc, str(pid)) + "/"
        p = _Process(pid, base, self.idle_poll_every)
        try:
            p.fd_stat = self.fds.open(f"{base}task/{pid}/stat")
            p.fd_gstat = self.fds.open(base + "stat")
            st = parse_task_stat(pread_file(p.fd_gstat, base + "stat"))
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
                io = parse_io(pread_file(p.fd_io, base + "io"))
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
            raw = pread_file(th.fd_sched, th.base + "schedstat")
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
            st = parse_task_stat(pread_file(th.fd_stat, th.base + "stat"))
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
            return parse_syscall(pread_file(th.fd_sys, th.base + "syscall"))
        except PermissionError:
            self.use_syscall = False
            for fn in ("read", "write"):
                self.state.mark_unsupported(HOST, fn, f"no permission to read {th.base}syscall (ptrace read access)", t_ns)
        except OSError:
            pass  # exited: the stat read says so
        return -3

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
                    st = parse_task_stat(pread_file(p.fd_gstat, p.base + "stat"))
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

    def _read_io(self, p: _Process) -> tuple[int, int]:
        """p's (rchar, wchar) deltas since the last call (0, 0 when unreadable)."""
        if not self.use_io or p.fd_io == -2:
            return 0, 0
        try:
            io = parse_io(pread_file(p.fd_io, p.base + "io"))
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
                raw = pread(fd, 128, 0) if fd >= 0 else pread_file(fd, th.base + "schedstat")
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
