"""Host sampler with the process CPU clock: exact on-CPU time, and parked threads read only
when the clock says one of them ran."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes.fake_host import DT, MS, T0, FakeClock, FakeHost, by_function, pool, record_preads

from perfdiff.collectors import host as H
from perfdiff.collectors.host import HostSampler


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def test_clock_gives_exact_oncpu_and_spares_reading_parked_threads(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    s, _ = pool(fake, clock)
    assert s.idle_poll_every == 20  # the 2 s safety poll at 10 Hz
    busy = 0
    t = T0
    for _ in range(15):  # 1.5 s: the idle ones get parked
        t += DT
        busy += 5 * MS
        fake.thread(100, 100, exec_ns=busy, delay_ns=0, pcount=1 + busy // MS, syscall="202")
        clock.ns[100] += 5 * MS
        f = by_function(s.sample(t))
        assert f["oncpu"] == 5 * MS and f["blocked"] == 21 * DT
    assert len(s.procs[100].active) == 1 and sum(s.procs[100].idle_counts) == 20
    fds = {th.fd_sched: tid for tid, th in s.procs[100].threads.items()}
    fd_reads = record_preads(monkeypatch)
    for _ in range(5):  # the busy thread explains the whole clock: no parked thread is read
        t += DT
        busy += 5 * MS
        fake.thread(100, 100, exec_ns=busy, delay_ns=0, pcount=1 + busy // MS, syscall="202")
        clock.ns[100] += 5 * MS
        assert by_function(s.sample(t))["oncpu"] == 5 * MS
    reads = [fds.get(fd) for fd in fd_reads]  # thread ids (None: not a schedstat read)
    parked_reads = [r for r in reads if r not in (None, 100)]
    assert len(parked_reads) == 5  # only the safety poll: one bucket (here one thread) a tick
    # Thread 107 wakes for 3 ms and goes back to sleep in read(): the clock says someone ran.
    fd_reads.clear()
    t += DT
    fake.thread(100, 107, exec_ns=4 * MS, delay_ns=1 * MS, pcount=2, syscall="0")
    clock.ns[100] += 3 * MS
    f = by_function(s.sample(t))
    assert f["oncpu"] == 3 * MS and f["runq"] == 1 * MS
    assert f["read"] == DT and f["blocked"] == 20 * DT  # found the same tick, its new sleep read
    assert set(range(101, 121)) <= {fds[fd] for fd in fd_reads if fd in fds}  # every parked thread polled
    assert 107 in s.procs[100].active


def test_leader_stat_is_read_at_the_host_cadence_or_when_the_clock_says_so(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 100 Hz with the CPU clock, the leader's stat (state, thread count, RSS) is read on
    the host-cadence ticks only while the clock moves; a new thread that runs in between is
    listed at once (CPU no thread explains), and a stopped process (clock still) is seen at once."""
    dt = 10 * MS
    clock = FakeClock()
    fake.process(100, threads=3)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=1, syscall="202")
    for tid in (101, 102):
        fake.thread(100, tid, exec_ns=1 * MS, delay_ns=0, pcount=1, syscall="202")
    clock.ns[100] = 2 * MS
    s = HostSampler(lambda: {100}, interval_ns=dt, procfs=fake.fs(), arch="x86_64", cpu_clock=clock)
    s.start(T0)
    stat_fd = s.procs[100].fd_stat
    reads = record_preads(monkeypatch)
    t, busy = T0, 0
    slow_ticks = 0
    for _ in range(20):
        t += dt
        busy += 2 * MS
        slow_ticks += t - s.host_prev >= H.HOST_MIN_NS - dt // 2
        fake.thread(100, 100, exec_ns=busy, delay_ns=0, pcount=1 + busy // MS, syscall="202")
        clock.ns[100] += 2 * MS
        assert by_function(s.sample(t))["oncpu"] == 2 * MS
    assert 0 < reads.count(stat_fd) == slow_ticks < 20
    # A new thread runs 3 ms between host-cadence ticks: listed at this tick, counted from the next.
    t += dt
    assert t - s.host_prev < H.HOST_MIN_NS - dt // 2
    fake.process(100, threads=4)
    fake.thread(100, 103, exec_ns=3 * MS, delay_ns=0, pcount=2, syscall="0")
    clock.ns[100] += 3 * MS
    assert by_function(s.sample(t))["oncpu"] == 3 * MS
    assert 103 in s.procs[100].threads
    # SIGSTOP: nothing runs, so the stat is read and the stopped threads sleep in no state.
    t += dt
    fake.process(100, threads=4, state="T")
    f = by_function(s.sample(t))
    assert f["oncpu"] == 0 and f["blocked"] == 0 and f["read"] == 0


def test_clock_counts_a_thread_that_exited_unseen(fake: FakeHost) -> None:
    """CPU time of a thread that came and went between two ticks: in oncpu all the same."""
    clock = FakeClock()
    s, _ = pool(fake, clock, idle=2)
    clock.ns[100] += 7 * MS  # nothing in any schedstat moved: a short-lived thread did it
    f = by_function(s.sample(T0 + DT))
    assert f["oncpu"] == 7 * MS
    assert s.idle_poll_every == 20


def test_without_clock_parked_threads_are_polled_every_400_ms(fake: FakeHost) -> None:
    s = HostSampler(lambda: set(), interval_ns=DT, procfs=fake.fs(), arch="x86_64", cpu_clock=None)
    assert s.cpu_clock is None and s.idle_poll_every == 4
    assert HostSampler(lambda: set(), interval_ns=DT).cpu_clock is H.process_cpu_clock  # real /proc


@pytest.mark.live
def test_process_cpu_clock_matches_the_threads_schedstat_of_a_live_process() -> None:
    import subprocess
    import sys

    code = ("import threading, time\n"
            "def spin():\n    while time.thread_time() < 0.1: pass\n"
            "ts = [threading.Thread(target=spin) for _ in range(3)]\n[x.start() for x in ts]\n[x.join() for x in ts]\n"
            "print('done', flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        total = H.process_cpu_clock(child.pid)
        live = sum(int(Path(f"/proc/{child.pid}/task/{t}/schedstat").read_text().split()[0])
                   for t in os.listdir(f"/proc/{child.pid}/task"))
        # The exited spinners' time is in it: each ran until its own CPU clock passed 0.1 s
        # (0.3 s in all; at least half of it is asserted, so a loaded machine cannot fail it).
        assert total - live >= 0.15e9
    finally:
        child.kill()
        child.wait()
    with pytest.raises(OSError):
        H.process_cpu_clock(child.pid)


def test_a_process_gone_between_its_two_clock_reads_costs_no_tick(fake: FakeHost) -> None:
    clock = FakeClock()
    s, _ = pool(fake, clock, idle=2)
    real = s._read_threads

    def reaped_meanwhile(*a, **k):
        out = real(*a, **k)
        clock.ns.pop(100, None)  # reaped after the first clock read, before the second
        return out

    s._read_threads = reaped_meanwhile
    assert by_function(s.sample(T0 + DT))["blocked"] == 3 * DT  # the tick's rows, no exception
    assert s.procs[100].window == 0
