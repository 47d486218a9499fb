"""A fake /proc and /sys for the host sampler's tests: files the test rewrites between ticks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(fd) or real(fd, n, off))
    return reads


def by_function(rows: dict) -> dict[str, int]:
    a = rows["activity"]
    assert set(a["kind"]) == {"host"} and set(a["device"]) == {"Host"}
    return dict(zip(a["function"], a["busy_ns"], strict=True))


def samples(rows: dict) -> dict[tuple[str, str], float]:
    s = rows["samples"]
    return {(m, d): v for m, d, v in zip(s["metric"], s["device"], s["value"], strict=True)}


def start_scenario(fake: FakeHost, **kw) -> HostSampler:
    """Pid 100 with threads 100 (asleep in read), 101 (D in fsync), 102 (asleep in write)."""
    fake.process(100, ticks=50, threads=3, rchar=1000, wchar=2000)
    fake.thread(100, 100, exec_ns=10 * MS, delay_ns=1 * MS, pcount=5, syscall="0")
    fake.thread(100, 101, exec_ns=20 * MS, delay_ns=2 * MS, pcount=7, state="D", syscall="74")
    fake.thread(100, 102, exec_ns=30 * MS, delay_ns=0, pcount=9, syscall="1", cpu=1)
    s = HostSampler(lambda: {100}, interval_ns=DT, procfs=fake.fs(), arch="x86_64", **kw)
    s.start(T0)
    return s


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
