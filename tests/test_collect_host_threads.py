"""Host sampler, per-thread states on a fake /proc: schedstat, sampled sleeps, threads coming
and going, and what the kernel or permissions do not allow."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes.fake_host import (
    DT,
    MS,
    T0,
    FakeClock,
    FakeHost,
    by_function,
    record_preads,
    samples,
    start_scenario,
)

from perfdiff.collectors import host as H
from perfdiff.collectors.host import HostSampler


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def test_host_functions_from_schedstat_and_sampled_states(fake: FakeHost) -> None:
    """oncpu/runq from schedstat deltas; each thread asleep at the tick counts the interval."""
    s = start_scenario(fake)
    # 100 ran 3 ms, waited 1 ms in the run queue, now asleep in read(0) again.
    fake.thread(100, 100, exec_ns=13 * MS, delay_ns=2 * MS, pcount=8, syscall="0", cpu=1)
    # 101 did not run at all: still in D (fsync, not a read/write call) → iowait, whole interval.
    # 102 ran 5 ms and is running now: on CPU at the tick, so no sleep counts for it.
    fake.thread(100, 102, exec_ns=35 * MS, delay_ns=0, pcount=10, state="R", syscall="running", cpu=0)
    fake.process(100, ticks=60, threads=3, rchar=1500, wchar=2600)
    rows = s.sample(T0 + DT)
    f = by_function(rows)
    assert f["oncpu"] == 8 * MS
    assert f["runq"] == 1 * MS
    assert f["read"] == DT
    assert f["iowait"] == DT
    assert f["write"] == 0
    assert f["blocked"] == 0
    a = rows["activity"]
    nbytes = dict(zip(a["function"], a["bytes"], strict=True))
    assert nbytes["read"] == 500 and nbytes["write"] == 600 and nbytes["oncpu"] == H.MISSING
    assert set(a["start_ns"]) == {T0} and set(a["end_ns"]) == {T0 + DT}
    v = samples(rows)
    assert v[("process_cpu_usage", "Host")] == pytest.approx(100.0 * 10 / os.sysconf("SC_CLK_TCK") / 0.1)
    assert v[("context_switches", "Host")] == pytest.approx(4 / 0.1)  # 3 + 1 switches in 0.1 s
    assert v[("process_rss", "Host")] == 10 * os.sysconf("SC_PAGE_SIZE")


def test_thread_that_did_not_run_keeps_its_sleep_without_reading_stat(fake: FakeHost) -> None:
    s = start_scenario(fake)
    # A changed stat file that the sampler must not need: the schedstat bytes did not move.
    fake.write("100/task/101/stat", "garbage that would not parse\n")
    f = by_function(s.sample(T0 + DT))
    assert f["iowait"] == DT and f["read"] == DT and f["write"] == DT and f["oncpu"] == 0


def test_new_thread_is_a_baseline_and_gone_thread_is_dropped(fake: FakeHost) -> None:
    s = start_scenario(fake)
    fake.remove_thread(100, 102)
    fake.thread(100, 103, exec_ns=500 * MS, delay_ns=50 * MS, pcount=99, syscall="0")
    fake.process(100, ticks=50, threads=3)  # same count: found by the two-second re-listing
    s.sample(T0 + DT)
    f = by_function(s.sample(T0 + 21 * DT))  # > 2 s later: threads re-listed
    assert sorted(s.procs[100].threads) == [100, 101, 103]
    # 103's counters are its baseline: nothing of its 500 ms counts.
    assert f["oncpu"] == 0 and f["runq"] == 0
    f = by_function(s.sample(T0 + 22 * DT))
    assert f["read"] == 2 * DT  # 100 and the new 103, both asleep in read


def test_process_that_exits_drops_out(fake: FakeHost) -> None:
    pids = {100}
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=1, delay_ns=1, pcount=1)
    s = HostSampler(lambda: pids, interval_ns=DT, procfs=fake.fs(), arch="x86_64")
    s.start(T0)
    fake.process(100, threads=1, state="Z")
    rows = s.sample(T0 + DT)
    assert "activity" not in rows  # no live target: the functions are unknown, not zero
    assert 100 not in s.procs


def test_scenario_schedstat_disabled(fake: FakeHost) -> None:
    """All-zero schedstat: runq and context switches unsupported, oncpu from clock ticks."""
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=0, ticks=10, state="R", syscall="running")
    s = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="x86_64")
    s.start(T0)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=0, ticks=15, syscall="0")
    rows = s.sample(T0 + DT)
    f = by_function(rows)
    assert "runq" not in f
    assert f["oncpu"] == 5 * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    assert f["read"] == DT
    unsupported = {u["metric"]: u["reason"] for u in s.manifest()["unsupported"]}
    assert "CONFIG_SCHED_INFO" in unsupported["runq"] and "context_switches" in unsupported
    assert ("context_switches", "Host") not in samples(rows)


def test_without_schedstat_a_new_thread_is_listed_at_the_next_tick_at_100_hz(fake: FakeHost) -> None:
    """No schedstat means no "CPU no thread explains" check: the leader's stat (its thread
    count) is read at every tick, not only at the host cadence."""
    clock = FakeClock()
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=0, ticks=10, state="R", syscall="running")
    clock.ns[100] = 0
    s = HostSampler(lambda: {100}, interval_ns=10 * MS, procfs=fake.fs(), arch="x86_64", cpu_clock=clock)
    s.start(T0)
    assert not s.use_schedstat
    clock.ns[100] += 1 * MS
    s.sample(T0 + 10 * MS)
    fake.process(100, threads=2)
    fake.thread(100, 101, exec_ns=0, delay_ns=0, pcount=0, ticks=1, syscall="0")
    clock.ns[100] += 1 * MS
    s.sample(T0 + 20 * MS)  # between host ticks
    assert 101 in s.procs[100].threads


def test_scenario_syscall_denied(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ptrace read access to /proc/.../syscall: read/write unsupported, sleeps by state only."""
    real_open = os.open

    def deny(path, *a, **k):  # root ignores mode bits, so deny the way the kernel would
        if str(path).endswith("/syscall"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    s = start_scenario(fake)
    f = by_function(s.sample(T0 + DT))
    assert "read" not in f and "write" not in f
    assert f["blocked"] == 2 * DT and f["iowait"] == DT
    reasons = {u["metric"]: u["reason"] for u in s.manifest()["unsupported"]}
    assert "ptrace" in reasons["read"] and "ptrace" in reasons["write"]


def test_ticks_taken_before_a_function_became_unsupported_keep_its_rows(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collect loop takes the host rows at its flush, several ticks at once: a function
    that becomes unsupported at the third tick (a new child whose syscall file is denied)
    keeps its rows of the first two."""
    s = start_scenario(fake)
    s.tick(T0 + DT)
    s.tick(T0 + 2 * DT)
    real_open = os.open

    def deny(path, *a, **k):
        if str(path).endswith("/syscall"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    pids = {100, 200}
    s.target_pids = lambda: pids
    fake.process(200, threads=1)
    fake.thread(200, 200, exec_ns=1 * MS, delay_ns=0, pcount=1, syscall="0")
    s.tick(T0 + 3 * DT)  # 200's baseline: its syscall file is denied
    a = s.take()["activity"]
    rows = list(zip(a["function"], a["start_ns"], strict=True))
    assert [t for f, t in rows if f == "read"] == [T0, T0 + DT]  # not at the third tick
    assert [t for f, t in rows if f == "oncpu"] == [T0, T0 + DT, T0 + 2 * DT]
    assert ("Host", "read") in s.state.unsupported


def test_process_rss_between_host_ticks_is_the_last_reading(fake: FakeHost) -> None:
    """At 100 Hz the leader's stat (RSS) is read at the host cadence only: a target that ends
    between two host ticks leaves its last RSS, not 0."""
    clock = FakeClock()
    fake.process(100, threads=1, rss=1000)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=1, syscall="202")
    clock.ns[100] = 0
    pids = {100}
    s = HostSampler(lambda: pids, interval_ns=10 * MS, procfs=fake.fs(), arch="x86_64", cpu_clock=clock)
    s.start(T0)
    rss = []
    for i in range(1, 22):
        clock.ns[100] += 1 * MS  # it runs: the stat is not read between host ticks
        fake.thread(100, 100, exec_ns=i * MS, delay_ns=0, pcount=1 + i, syscall="202")
        if i == 13:
            pids.clear()  # gone after the host tick at 100 ms
        sm = s.sample(T0 + i * 10 * MS).get("samples", {"metric": [], "value": []})
        rss += [v for m, v in zip(sm["metric"], sm["value"], strict=True) if m == "process_rss"]
    assert rss and all(v == 1000 * s.page_size for v in rss)


def test_scenario_unknown_architecture(fake: FakeHost) -> None:
    s = start_scenario(fake, fd_limit=0)  # and no cached descriptors: open-read-close path
    s2 = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="riscv64", fd_limit=0)
    s2.start(T0)
    f = by_function(s2.sample(T0 + DT))
    assert "read" not in f and "write" not in f and f["iowait"] == DT
    reasons = {u["metric"]: u["reason"] for u in s2.manifest()["unsupported"]}
    assert "riscv64" in reasons["read"]
    assert by_function(s.sample(T0 + DT))["read"] == DT  # x86-64 numbers still classify


def test_live_own_process_reads_real_proc() -> None:
    """The sampler on this very process: real schedstat, real thread states, sane numbers."""
    import threading
    import time

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        s = HostSampler(lambda: {os.getpid()}, interval_ns=20 * MS)
        t0 = time.time_ns()
        s.start(t0)
        c0 = time.thread_time()
        while time.thread_time() - c0 < 0.03:
            pass  # burn 30 ms of CPU on this thread (however long a loaded machine makes it take)
        rows = s.sample(time.time_ns())
        f = by_function(rows)
        dt = rows["activity"]["end_ns"][0] - rows["activity"]["start_ns"][0]
        assert f["oncpu"] >= 25 * MS
        assert f["blocked"] > dt // 2  # the helper thread waited the whole time
        assert s.manifest()["collector"]["max_threads"] >= 2
    finally:
        stop.set()
        t.join()
        s.close()


def test_thread_in_a_known_wait_needs_no_stat_read(fake: FakeHost) -> None:
    """The syscall file settles futex/read/write waits; only other sleeps need stat (S or D)."""
    s = start_scenario(fake)
    # 102 ran, now in futex: its stat is not read (garbage would drop the thread if it were).
    fake.thread(100, 102, exec_ns=32 * MS, delay_ns=0, pcount=10, syscall="202")
    fake.write("100/task/102/stat", "garbage\n")
    # 101 ran, now in fsync (74) and in D: only stat can tell S from D → iowait.
    fake.thread(100, 101, exec_ns=21 * MS, delay_ns=2 * MS, pcount=8, state="D", syscall="74")
    f = by_function(s.sample(T0 + DT))
    assert f["blocked"] == DT and f["iowait"] == DT and f["read"] == DT and f["oncpu"] == 3 * MS
    assert 102 in s.procs[100].threads


def test_stopped_process_sleeps_in_no_state(fake: FakeHost) -> None:
    """SIGSTOP: every thread in T, though each syscall file still names its call."""
    s = start_scenario(fake)
    fake.thread(100, 100, exec_ns=12 * MS, delay_ns=1 * MS, pcount=6, state="T", syscall="0")
    fake.process(100, ticks=50, threads=3, state="T")
    f = by_function(s.sample(T0 + DT))
    assert f["oncpu"] == 2 * MS  # what ran before the stop still counts
    assert f["read"] == f["iowait"] == f["write"] == f["blocked"] == 0


def test_long_idle_threads_are_read_every_fourth_tick(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=5 * MS, delay_ns=0, pcount=1, syscall="202")
    s = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="x86_64")
    s.start(T0)
    reads = record_preads(monkeypatch)
    sched_fd = s.procs[100].threads[100].fd_sched
    t = T0
    for _ in range(30):  # 3 s asleep: past the 1 s after which it is read less often
        t += DT
        assert by_function(s.sample(t))["blocked"] == DT  # its sleep counts every tick all the same
    # Read every tick for the first second (10 ticks), then every fourth (400 ms at 10 Hz).
    assert s.idle_poll_every == H.IDLE_POLL_EVERY == 4
    assert reads.count(sched_fd) <= 10 + 20 // H.IDLE_POLL_EVERY + 1
    fake.thread(100, 100, exec_ns=25 * MS, delay_ns=0, pcount=2, syscall="202")
    oncpu = 0
    for _ in range(H.IDLE_POLL_EVERY):
        t += DT
        oncpu += by_function(s.sample(t))["oncpu"]
    assert oncpu == 20 * MS  # seen within IDLE_POLL_EVERY ticks, counted whole


def test_long_idle_threads_are_read_every_400_ms_at_100_hz(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=5 * MS, delay_ns=0, pcount=1, syscall="202")
    dt = 10 * MS
    s = HostSampler(lambda: {100}, interval_ns=dt, procfs=fake.fs(), arch="x86_64")
    s.start(T0)
    reads = record_preads(monkeypatch)
    sched_fd = s.procs[100].threads[100].fd_sched
    t = T0
    for _ in range(300):  # 3 s asleep
        t += dt
        assert by_function(s.sample(t))["blocked"] == dt
    assert s.idle_poll_every == 40
    assert reads.count(sched_fd) <= 100 + 200 // 40 + 1  # every tick for 1 s, then every 400 ms
    fake.thread(100, 100, exec_ns=25 * MS, delay_ns=0, pcount=2, syscall="202")
    oncpu = sum(by_function(s.sample(t + (i + 1) * dt))["oncpu"] for i in range(40))
    assert oncpu == 20 * MS  # seen within 400 ms, counted whole


def test_a_thread_that_ran_then_blocked_counts_its_new_sleep_at_once(fake: FakeHost) -> None:
    """Running at tick 1, ran again at tick 2 and then blocked in read() for good: from tick 2
    on, at 100 Hz as at any rate, its interval counts as read (the state seen at tick 1 is
    not carried over)."""
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=1, syscall="202")
    dt = 10 * MS
    s = HostSampler(lambda: {100}, interval_ns=dt, procfs=fake.fs(), arch="x86_64", cpu_clock=None)
    s.start(T0)
    fake.thread(100, 100, exec_ns=1 * MS, delay_ns=0, pcount=2, state="R", syscall="running")
    s.sample(T0 + dt)
    fake.thread(100, 100, exec_ns=2 * MS, delay_ns=0, pcount=3, state="S", syscall="0")
    for i in range(2, 8):
        assert by_function(s.sample(T0 + i * dt))["read"] == dt
