"""Host sampler, host-wide readings on a fake /proc and /sys: CPU usage, clocks, memory and
disks, read at the tick and parsed at the flush."""
from __future__ import annotations

from pathlib import Path

import pytest
from fakes.fake_host import (
    DT,
    MS,
    T0,
    FakeHost,
    host_rows,
    lose,
    record_preads,
    regain,
    samples,
    start_scenario,
)

from perfdiff.collectors import host as H
from perfdiff.collectors.host import HostSampler, hostwide


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def test_host_metrics_cpu_memory_disk_frequency(fake: FakeHost) -> None:
    s = start_scenario(fake)
    fake.cpu_times([(100, 400), (30, 200), (70, 200)])
    fake.disk(2048, 4096, 50)
    # Only thread 102 (on CPU 1) ran in the interval.
    fake.thread(100, 102, exec_ns=33 * MS, delay_ns=0, pcount=10, syscall="1", cpu=1)
    (fake.sys / "devices/system/cpu/cpu1/cpufreq/scaling_cur_freq").write_text("2400000\n")
    v = samples(s.sample(T0 + DT))
    assert v[("host_cpu_usage", "Host")] == pytest.approx(25.0)
    assert v[("host_cpu_usage", "CPU 0")] == pytest.approx(15.0)
    assert v[("host_cpu_usage", "CPU 1")] == pytest.approx(35.0)
    assert v[("host_mem_used", "Host")] == 600 * 1024
    assert v[("disk_read", "Disk vda")] == pytest.approx(2048 * 512 / 0.1)
    assert v[("disk_write", "Disk vda")] == pytest.approx(4096 * 512 / 0.1)
    assert v[("disk_usage", "Disk vda")] == pytest.approx(50.0)
    assert not any(d == "Disk loop0" for _, d in v)  # loop devices are not disks
    assert v[("cpu_frequency_mhz", "CPU 0")] == 1500.0
    assert v[("cpu_frequency", "CPU 1")] == pytest.approx(80.0)
    # Host = mean over the CPUs the target ran on in the interval: only CPU 1.
    assert v[("cpu_frequency_mhz", "Host")] == 2400.0
    assert v[("cpu_frequency", "Host")] == pytest.approx(80.0)
    assert s.manifest()["unsupported"] == []


def test_host_readings_taken_at_the_tick_parsed_at_the_take(fake: FakeHost) -> None:
    """A tick only reads the host-wide files; `take` (the flush) parses every buffered tick in
    order: each interval gets its own delta, and a failed read at one tick makes the next row
    span back to the last good reading (its value from that reading, a rate over both intervals)."""
    s = start_scenario(fake)
    fake.cpu_times([(100, 400), (30, 200), (70, 200)])
    fake.disk(2048, 0, 50)
    s.tick(T0 + DT)
    fake.cpu_times([(300, 800), (130, 400), (170, 400)])  # 50 % busy in the second interval
    fake.disk(4096, 0, 60)
    s.tick(T0 + 2 * DT)
    lose(fake, s, "stat")
    s.tick(T0 + 3 * DT)
    regain(fake, "stat")
    # Against tick 2: (500-300)/(1300-800) = 40 % (against tick 1 it would read 44 %).
    fake.cpu_times([(500, 1300), (230, 650), (270, 650)])
    s.tick(T0 + 4 * DT)
    rows = s.take()
    usage = [(d, t0, t1, v) for _, d, t0, t1, v in host_rows(rows, "host_cpu_usage") if d in ("Host", "CPU 0")]
    assert usage == [("Host", T0, T0 + DT, pytest.approx(25.0)), ("CPU 0", T0, T0 + DT, pytest.approx(15.0)),
                     ("Host", T0 + DT, T0 + 2 * DT, pytest.approx(50.0)),
                     ("CPU 0", T0 + DT, T0 + 2 * DT, pytest.approx(50.0)),
                     ("Host", T0 + 2 * DT, T0 + 4 * DT, pytest.approx(40.0)),
                     ("CPU 0", T0 + 2 * DT, T0 + 4 * DT, pytest.approx(40.0))]
    reads = [(t1, v) for _, d, _, t1, v in host_rows(rows, "disk_read")]
    assert reads == [(T0 + DT, pytest.approx(2048 * 512 / 0.1)), (T0 + 2 * DT, pytest.approx(2048 * 512 / 0.1)),
                     (T0 + 3 * DT, 0.0), (T0 + 4 * DT, 0.0)]
    lose(fake, s, "diskstats")
    s.tick(T0 + 5 * DT)
    regain(fake, "diskstats")
    fake.disk(4096 + 2048, 0, 60)
    s.tick(T0 + 6 * DT)
    assert [r[2:] for r in host_rows(s.take(), "disk_read")] == [(T0 + 4 * DT, T0 + 6 * DT, pytest.approx(2048 * 512 / 0.2))]
    assert not s.host_ticks and s.take() == {}


def test_host_reads_failing_at_the_first_tick_span_back_to_the_start(fake: FakeHost) -> None:
    """The baselines are start()'s readings: when the first tick cannot read /proc/stat and
    diskstats, the second tick's rows span both intervals, the disk rate is not doubled."""
    s = start_scenario(fake)
    lose(fake, s, "stat")
    lose(fake, s, "diskstats")
    s.tick(T0 + DT)
    regain(fake, "stat")
    regain(fake, "diskstats")
    fake.cpu_times([(100, 400), (30, 200), (70, 200)])
    fake.disk(2048, 0, 50)
    s.tick(T0 + 2 * DT)
    rows = s.take()
    assert [r[1:] for r in host_rows(rows, "host_cpu_usage") if r[1] == "Host"] == [("Host", T0, T0 + 2 * DT, pytest.approx(25.0))]
    assert [r[2:] for r in host_rows(rows, "disk_read")] == [(T0, T0 + 2 * DT, pytest.approx(2048 * 512 / 0.2))]
    assert [r[2:] for r in host_rows(rows, "disk_usage")] == [(T0, T0 + 2 * DT, pytest.approx(25.0))]


def test_one_unusable_host_reading_loses_its_tick_not_the_flush(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading that cannot be made into rows (a parser bug, a kernel's odd file) drops that
    tick's host-wide rows, with an event; the other ticks of the same flush keep theirs."""
    s = start_scenario(fake)
    real = H.parse_meminfo
    calls = []

    def flaky(raw: bytes, *a: object) -> dict[str, int]:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("odd meminfo")
        return real(raw, *a)

    monkeypatch.setattr(hostwide, "parse_meminfo", flaky)
    for i in (1, 2, 3):
        fake.cpu_times([(100 * i, 400 * i), (50 * i, 200 * i), (50 * i, 200 * i)])
        s.tick(T0 + i * DT)
    rows = s.take()
    assert [r[3] for r in host_rows(rows, "host_mem_used")] == [T0 + DT, T0 + 3 * DT]
    assert [r[3] for r in host_rows(rows, "host_cpu_usage") if r[1] == "Host"] == [T0 + DT, T0 + 3 * DT]
    assert [r[3] for r in host_rows(rows, "process_rss")] == [T0 + i * DT for i in (1, 2, 3)]  # not host-wide
    assert [e["event"] for e in s.state.events if e["event"] == "host-rows-error"] == ["host-rows-error"]
    assert s.manifest()["collector"]["host_row_errors"] == 1


def test_scenario_many_cpus_per_cpu_readings_stretched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """32 CPUs: per-CPU rows and clock reads at the first tick, then every 320 ms
    (32 × PER_CPU_NS), not at every 100 ms tick; the host total and the clock of the CPU the
    target ran on (its frequency mean) at every tick.  Each per-CPU row is the delta since the
    last per-CPU reading, over that span."""
    fake = FakeHost(tmp_path, cpus=32)
    s = start_scenario(fake)
    assert s.per_cpu_ns == 32 * H.PER_CPU_NS
    freq_fd = {fd: cpu for cpu, (fd, _) in s.freq_fds.items()}
    reads = record_preads(monkeypatch)
    clocks = []
    for i in range(1, 8):
        # Host busy 100·i² of 1000·i ticks; each CPU busy 3·i² of 100·i (non-linear: a delta
        # against the wrong earlier reading gives another value).
        fake.cpu_times([(100 * i * i, 1000 * i)] + [(3 * i * i, 100 * i)] * 32)
        (fake.sys / "devices/system/cpu/cpu1/cpufreq/scaling_cur_freq").write_text(f"{1000 + 100 * i}000\n")
        fake.thread(100, 102, exec_ns=(30 + i) * MS, delay_ns=0, pcount=9 + i, syscall="1", cpu=1)
        del reads[:]
        s.tick(T0 + i * DT)
        clocks.append(sorted(freq_fd[fd] for fd in reads if fd in freq_fd))
    # Ticks 1, 4 and 7 (≥ 320 ms - half a tick since the last) read every CPU's clock; the
    # others only CPU 1's, where thread 102 ran (its threads are read before the host's files).
    every = list(range(32))
    assert clocks == [every, [1], [1], every, [1], [1], every]
    rows = s.take()
    total = [(t0, t1, v) for _, d, t0, t1, v in host_rows(rows, "host_cpu_usage") if d == "Host"]
    assert total == [(T0 + (i - 1) * DT, T0 + i * DT, pytest.approx(10.0 * (2 * i - 1))) for i in range(1, 8)]
    cpu5 = [(t0, t1, v) for _, d, t0, t1, v in host_rows(rows, "host_cpu_usage") if d == "CPU 5"]
    assert cpu5 == [(T0, T0 + DT, pytest.approx(3.0)), (T0 + DT, T0 + 4 * DT, pytest.approx(100 * (48 - 3) / 300)),
                    (T0 + 4 * DT, T0 + 7 * DT, pytest.approx(100 * (147 - 48) / 300))]
    mhz = host_rows(rows, "cpu_frequency_mhz")
    assert [(d, t1, v) for _, d, _, t1, v in mhz if d == "CPU 1"] == [("CPU 1", T0 + i * DT, 1000 + 100 * i) for i in (1, 4, 7)]
    assert [(t1, v) for _, d, _, t1, v in mhz if d == "CPU 5"] == [(T0 + i * DT, 1500.0) for i in (1, 4, 7)]
    assert [(t1, v) for _, d, _, t1, v in mhz if d == "Host"] == [(T0 + i * DT, 1000 + 100 * i) for i in range(1, 8)]
    pct = [(t1, v) for _, d, _, t1, v in host_rows(rows, "cpu_frequency") if d == "Host"]
    assert pct == [(T0 + i * DT, pytest.approx(100 * (1000 + 100 * i) / 3000)) for i in range(1, 8)]


def test_a_failed_per_cpu_batch_keeps_baseline_and_span_together(tmp_path: Path) -> None:
    """A per-CPU reading whose rows cannot be made (here: one CPU's label raises) is dropped
    whole; the next per-CPU rows span back to the reading before it, with its values."""
    fake = FakeHost(tmp_path, cpus=32)
    s = start_scenario(fake)
    label = s._device
    broken = {"on": False}

    def device(name: str) -> str:
        if broken["on"] and name == "cpu5":
            raise RuntimeError("no label")
        return label(name)

    s._device = device  # type: ignore[method-assign]
    for i in range(1, 8):
        fake.cpu_times([(100 * i * i, 1000 * i)] + [(3 * i * i, 100 * i)] * 32)
        s.tick(T0 + i * DT)
        if i in (3, 4):
            broken["on"] = i == 4  # the per-CPU reading of tick 4 fails when the flush parses it
            s.take()
            broken["on"] = False
    cpu6 = [r[2:] for r in host_rows(s.take(), "host_cpu_usage") if r[1] == "CPU 6"]
    # Since tick 1's reading (3 of 100): (147 - 3) / (700 - 100), over [100, 700] ms.
    assert cpu6 == [(T0 + DT, T0 + 7 * DT, pytest.approx(100 * 144 / 600))]


def test_scenario_many_cpus_stop_reads_every_cpu_once_more(tmp_path: Path) -> None:
    """At the collection's end `stop` adds a last per-CPU reading (per-CPU rows then cover the
    run to its end), and no host-total, memory, disk or process row of its own; on a machine
    with per-CPU readings at every tick it adds nothing."""
    fake = FakeHost(tmp_path, cpus=32)
    s = start_scenario(fake)
    for i in (1, 2):
        fake.cpu_times([(100 * i, 1000 * i)] + [(3 * i, 100 * i)] * 32)
        s.tick(T0 + i * DT)
    s.take()
    fake.cpu_times([(900, 3000)] + [(20, 300)] * 32)
    (fake.sys / "devices/system/cpu/cpu7/cpufreq/scaling_cur_freq").write_text("2700000\n")
    rows = s.stop(T0 + 2 * DT + DT // 2)
    usage = host_rows(rows, "host_cpu_usage")
    assert len(usage) == 32 and {d for _, d, *_ in usage} == {f"CPU {i}" for i in range(32)}
    # CPU 5 since the first tick's per-CPU reading: (20 - 3) / (300 - 100).
    assert [r[2:] for r in usage if r[1] == "CPU 5"] == [(T0 + DT, T0 + 2 * DT + DT // 2, pytest.approx(8.5))]
    assert [r[4] for r in host_rows(rows, "cpu_frequency_mhz") if r[1] == "CPU 7"] == [2700.0]
    assert not host_rows(rows, "host_mem_used", "disk_read", "process_rss", "process_cpu_usage")
    assert not [r for r in host_rows(rows, "cpu_frequency_mhz", "cpu_frequency") if r[1] == "Host"]
    (tmp_path / "small").mkdir()
    small = start_scenario(FakeHost(tmp_path / "small"))
    small.tick(T0 + DT)
    small.take()
    assert small.stop(T0 + DT + 1) == {}
    # Within 100 ms of the last per-CPU reading (a few 10 ms ticks of /proc/stat), or with the
    # clock stepped back before the last tick: no reading.
    s.tick(T0 + 6 * DT)  # a per-CPU tick (350 ms after stop's reading)
    assert [r for r in host_rows(s.take(), "cpu_frequency_mhz") if r[1] == "CPU 5"]  # it was one
    assert s.stop(T0 + 6 * DT + 3 * MS) == {} and s.stop(T0 + 5 * DT) == {}
    assert s.manifest()["collector"]["host_row_errors"] == 0


def test_scenario_broken_max_clock(tmp_path: Path) -> None:
    """A cpufreq driver that reports a maximum of 0 for a CPU: its MHz rows stay, its % of
    max is left out (no division by zero losing the flush)."""
    fake = FakeHost(tmp_path)
    (fake.sys / "devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq").write_text("0\n")
    s = start_scenario(fake)
    rows = s.sample(T0 + DT)
    assert {d for _, d, *_ in host_rows(rows, "cpu_frequency_mhz")} >= {"CPU 0", "CPU 1"}
    pct = {d for _, d, *_ in host_rows(rows, "cpu_frequency")}
    assert "CPU 0" in pct and "CPU 1" not in pct
    assert not [e for e in s.state.events if e["event"] == "host-rows-error"]


def test_scenario_no_cpufreq_driver(tmp_path: Path) -> None:
    """A VM without cpufreq: MHz from /proc/cpuinfo (at most once a second), % of max unsupported."""
    fake = FakeHost(tmp_path, cpufreq=False)
    s = start_scenario(fake)
    v = samples(s.sample(T0 + DT))
    assert v[("cpu_frequency_mhz", "CPU 1")] == 2000.0
    assert not any(m == "cpu_frequency" for m, _ in v)
    assert not any(m == "cpu_frequency_mhz" for m, _ in samples(s.sample(T0 + 2 * DT)))
    m = s.manifest()
    assert "cpuinfo" in m["collector"]["cpu_frequency_source"]
    assert [u["metric"] for u in m["unsupported"]] == ["cpu_frequency"]


def test_host_metrics_follow_clock_ticks_not_a_fast_interval(fake: FakeHost) -> None:
    """At 100 Hz, tick-quantised host counters are read every 100 ms (HOST_MIN_NS)."""
    fake.process(100, threads=1)
    fake.thread(100, 100, exec_ns=5 * MS, delay_ns=0, pcount=1)
    s = HostSampler(lambda: {100}, interval_ns=10 * MS, procfs=fake.fs(), arch="x86_64")
    s.start(T0)
    spans = []
    for i in range(1, 21):
        rows = s.sample(T0 + i * 10 * MS)
        assert len(rows["activity"]["function"]) == 6  # the threads: every tick
        sm = rows.get("samples", {"metric": []})
        spans += [(a, b) for m, a, b in zip(sm["metric"], sm.get("t_start_ns", []), sm.get("t_end_ns", []), strict=True)
                  if m == "process_cpu_usage"]
    assert spans == [(T0, T0 + 100 * MS), (T0 + 100 * MS, T0 + 200 * MS)]
