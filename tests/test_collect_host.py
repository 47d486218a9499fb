"""Host sampler on a fake /proc and /sys (named scenarios), plus its parsers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdiff.collectors import host as H
from perfdiff.collectors.host import HostSampler, ProcFS

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
DT = 100 * MS


def stat_line(pid: int, state: str, *, comm: str = "python3", ppid: int = 1, utime: int = 0,
              stime: int = 0, threads: int = 1, start: int = 0, rss: int = 0, cpu: int = 0) -> str:
    """A /proc/PID/stat line with the fields perfdiff reads at their proc(5) positions."""
    rest = ["0"] * 50  # rest[i] is field i + 3
    rest[0], rest[1], rest[11], rest[12] = state, str(ppid), str(utime), str(stime)
    rest[17], rest[19], rest[21], rest[36] = str(threads), str(start), str(rss), str(cpu)
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


class FakeHost:
    """A folder shaped like /proc and /sys whose files the test rewrites between ticks."""

    def __init__(self, root: Path, *, cpus: int = 2, cpufreq: bool = True):
        self.proc = root / "proc"
        self.sys = root / "sys"
        self.proc.mkdir()
        (self.sys / "block" / "vda").mkdir(parents=True)
        (self.sys / "block" / "loop0").mkdir(parents=True)
        self.cpus = cpus
        self.procs: dict[int, dict] = {}
        self.tasks: dict[tuple[int, int], dict] = {}
        self.cpu_times([(0, 0)] * (cpus + 1))
        self.write("meminfo", "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n")
        self.disk(0, 0, 0)
        self.write("cpuinfo", "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\ncpu MHz\t\t: 2000.000\n\n"
                                      for i in range(cpus)))
        if cpufreq:
            for i in range(cpus):
                d = self.sys / f"devices/system/cpu/cpu{i}/cpufreq"
                d.mkdir(parents=True)
                (d / "cpuinfo_max_freq").write_text("3000000\n")
                (d / "scaling_cur_freq").write_text("1500000\n")

    def fs(self) -> ProcFS:
        return ProcFS(proc=str(self.proc), sys=str(self.sys))

    def write(self, rel: str, text: str) -> None:
        path = self.proc / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rewrite in place (same inode), as /proc regenerates a file the sampler keeps open.
        with open(path, "w") as fh:
            fh.write(text)

    def cpu_times(self, busy_total: list[tuple[int, int]], forks: int = 1) -> None:
        lines = []
        for i, (busy, total) in enumerate(busy_total):
            name = "cpu" if i == 0 else f"cpu{i - 1}"
            idle = total - busy
            lines.append(f"{name} {busy} 0 0 {idle} 0 0 0 0 0 0")
        self.write("stat", "\n".join(lines) + f"\nintr 1 2 3\nctxt 5\nprocesses {forks}\n")

    def disk(self, sectors_read: int, sectors_written: int, busy_ms: int) -> None:
        line = "{:4d} {:7d} {} 1 0 {} 0 1 0 {} 0 0 {} 0\n"
        self.write("diskstats", line.format(254, 0, "vda", sectors_read, sectors_written, busy_ms)
                   + line.format(7, 0, "loop0", 5, 5, 5))

    def process(self, pid: int, *, ticks: int = 0, threads: int = 1, rss: int = 10,
                rchar: int = 0, wchar: int = 0, state: str = "S", ppid: int = 1) -> None:
        """The group's stat and io; the leader's own task stat shares its state, count and RSS."""
        self.procs[pid] = {"threads": threads, "rss": rss, "state": state}
        self.write(f"{pid}/stat", stat_line(pid, state, utime=ticks, threads=threads, rss=rss, ppid=ppid))
        self.write(f"{pid}/io", f"rchar: {rchar}\nwchar: {wchar}\nsyscr: 0\nsyscw: 0\n")
        if (pid, pid) in self.tasks:
            self._task_stat(pid, pid)

    def thread(self, pid: int, tid: int, *, exec_ns: int, delay_ns: int, pcount: int,
               state: str = "S", syscall: str = "202 0x0 0x0", cpu: int = 0, ticks: int = 0) -> None:
        self.tasks[(pid, tid)] = {"state": state, "cpu": cpu, "ticks": ticks}
        self.write(f"{pid}/task/{tid}/schedstat", f"{exec_ns} {delay_ns} {pcount}\n")
        self._task_stat(pid, tid)
        self.write(f"{pid}/task/{tid}/syscall", syscall + " 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n")

    def _task_stat(self, pid: int, tid: int) -> None:
        t, pr = self.tasks[(pid, tid)], self.procs.get(pid, {"threads": 1, "rss": 10, "state": "S"})
        state = pr["state"] if tid == pid and pr["state"] in ("Z", "T") else t["state"]
        self.write(f"{pid}/task/{tid}/stat", stat_line(tid, state, utime=t["ticks"], cpu=t["cpu"],
                                                       threads=pr["threads"], rss=pr["rss"]))

    def remove_thread(self, pid: int, tid: int) -> None:
        d = self.proc / str(pid) / "task" / str(tid)
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def record_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the descriptor of every pread the host sampler makes, in order."""
    reads: list[int] = []
    real = H.os.pread
    monkeypatch.setattr(H.os, "pread", lambda fd, n, off: reads.append(fd) or real(fd, n, off))
    return reads


def by_function(rows: dict) -> dict[str, int]:
    a = rows["activity"]
    assert set(a["kind"]) == {"host"} and set(a["device"]) == {"Host"}
    return dict(zip(a["function"], a["busy_ns"], strict=True))


def samples(rows: dict) -> dict[tuple[str, str], float]:
    s = rows["samples"]
    return {(m, d): v for m, d, v in zip(s["metric"], s["device"], s["value"], strict=True)}


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def start_scenario(fake: FakeHost, **kw) -> HostSampler:
    """Pid 100 with threads 100 (asleep in read), 101 (D in fsync), 102 (asleep in write)."""
    fake.process(100, ticks=50, threads=3, rchar=1000, wchar=2000)
    fake.thread(100, 100, exec_ns=10 * MS, delay_ns=1 * MS, pcount=5, syscall="0")
    fake.thread(100, 101, exec_ns=20 * MS, delay_ns=2 * MS, pcount=7, state="D", syscall="74")
    fake.thread(100, 102, exec_ns=30 * MS, delay_ns=0, pcount=9, syscall="1", cpu=1)
    s = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="x86_64", **kw)
    s.start(T0)
    return s


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

    monkeypatch.setattr(H.os, "open", deny)
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

    monkeypatch.setattr(H.os, "open", deny)
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


def host_rows(rows: dict, *metrics: str) -> list[tuple[str, str, int, int, float]]:
    """(metric, device, t_start_ns, t_end_ns, value) of the sample rows of `metrics`."""
    sm = rows["samples"]
    return [r for r in zip(sm["metric"], sm["device"], sm["t_start_ns"], sm["t_end_ns"], sm["value"], strict=True)
            if r[0] in metrics]


def lose(fake: FakeHost, s: HostSampler, name: str) -> None:
    """Make /proc/NAME unreadable for the sampler until `regain` (its kept descriptor dropped)."""
    (fake.proc / name).rename(fake.proc / f"{name}.away")
    os.close(s.host_fds.pop(name)[0])


def regain(fake: FakeHost, name: str) -> None:
    (fake.proc / f"{name}.away").rename(fake.proc / name)


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

    monkeypatch.setattr(H, "parse_meminfo", flaky)
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


def test_parsers() -> None:
    st = H.parse_task_stat(stat_line(7, "D", comm="a (b) c", ppid=3, utime=4, stime=5, threads=6,
                                     start=8, rss=9, cpu=1).encode())
    assert (st.state, st.ppid, st.utime, st.stime, st.num_threads, st.starttime, st.rss_pages,
            st.processor) == ("D", 3, 4, 5, 6, 8, 9, 1)
    assert H.parse_schedstat(b"123 456 7\n") == (123, 456, 7)
    assert H.parse_syscall(b"running\n") == H.RUNNING
    assert H.parse_syscall(b"-1 0x7ffc 0x7f00\n") == -1
    assert H.parse_syscall(b"17 0x3 0x0 0x0\n") == 17
    assert H.parse_io(b"rchar: 5\nwchar: 6\n") == {"rchar": 5, "wchar": 6}
    # Only whole keys at a line start: /proc/PID/io has write_bytes and cancelled_write_bytes.
    io = b"rchar: 1\nwchar: 2\nsyscr: 3\ncancelled_write_bytes: 9\nwrite_bytes: 4\n"
    assert H.parse_io(io, ("wchar", "write_bytes", "read_bytes")) == {"wchar": 2, "write_bytes": 4}
    assert H.parse_io(b"wchar: 6") == {"wchar": 6}  # no final newline
    assert H.parse_diskstats(b"   8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n   8 1 sda1 9 9 9 9 9 9 9 9 9 9 9\n"
                             b"   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0", frozenset({b"sda", b"loop0"})) == {
        "sda": (3, 7, 10), "loop0": (0, 0, 0)}
    assert H.parse_diskstats(b"   8 1 sda1 9 9 9 9 9 9 9 9 9 9 9\n", frozenset({b"sda"})) == {}
    assert H.parse_cpu_times(b"cpu 1 2 3 4 5 6 7 8 9 10\ncpu0 1 0 0 1 0 0 0 0 0 0\nintr 5\n") == {
        "cpu": (1 + 2 + 3 + 6 + 7 + 8, 36), "cpu0": (1, 2)}
    assert H.parse_meminfo(b"MemTotal: 2 kB\nMemAvailable: 1 kB\n") == {"MemTotal": 2048, "MemAvailable": 1024}
    assert H.parse_cpuinfo_mhz(b"processor\t: 3\ncpu MHz\t\t: 1234.5\n") == {3: 1234.5}
    assert H.parse_cpuinfo_mhz(b"processor\t: 3\ncpu MHz\t\t: 1234.5") == {3: 1234.5}  # no final newline
    two = (b"processor\t: 0\nvendor_id\t: X\ncpu MHz\t\t: 1000.0\ncache size\t: 1 KB\n\n"
           b"processor\t: 1\nmodel name\t: processor Y\ncpu MHz\t\t: 2000.5\nflags\t\t: a b\n\n")
    assert H.parse_cpuinfo_mhz(two) == {0: 1000.0, 1: 2000.5}
    assert H.parse_cpuinfo_mhz(b"processor\t: 0\nBogoMIPS\t: 50.00\n\n") == {}  # aarch64: no clock


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


# ----------------------------------------------------------------------------- process CPU clock


class FakeClock:
    """The process CPU clock of fake pids: what the test says each process has used (ns)."""

    def __init__(self) -> None:
        self.ns: dict[int, int] = {}
        self.calls = 0

    def __call__(self, pid: int) -> int:
        self.calls += 1
        if pid not in self.ns:
            raise ProcessLookupError(pid)
        return self.ns[pid]


def pool(fake: FakeHost, clock: FakeClock, idle: int = 20) -> tuple[HostSampler, list]:
    """Pid 100: thread 100 busy, threads 101.. asleep in futex; sampled at 10 Hz past 1 s."""
    fake.process(100, threads=idle + 1)
    fake.thread(100, 100, exec_ns=0, delay_ns=0, pcount=1, syscall="202")
    for tid in range(101, 101 + idle):
        fake.thread(100, tid, exec_ns=1 * MS, delay_ns=0, pcount=1, syscall="202")
    clock.ns[100] = idle * MS
    s = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="x86_64", cpu_clock=clock)
    s.start(T0)
    return s, []


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
