"""Memory pressure and stalls read from fake /proc and /sys trees: PSI (host and cgroup v2),
the memory cgroup (v2, v1 on a hybrid host, none), swap and major faults; what is absent is
unsupported with the reason, never 0."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdiff.collectors.host.pressure import PressureSampler, parse_majflt, parse_psi
from perfdiff.collectors.procfs import ProcFS

PID = 4242
S = 1_000_000_000


def psi(some_us: int, full_us: int | None = None) -> str:
    text = f"some avg10=12.00 avg60=3.00 avg300=1.00 total={some_us}\n"
    return text + (f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full_us}\n" if full_us is not None else "")


def stat(pid: int, majflt: int) -> str:
    rest = ["0"] * 50  # rest[i] is field i + 3 of proc(5)
    rest[0], rest[9] = "S", str(majflt)
    return f"{pid} (a (b) c) " + " ".join(rest) + "\n"


class Tree:
    """/proc and /sys under tmp_path; `put` rewrites a file in place (a kept descriptor sees it)."""

    def __init__(self, root: Path, cgroup: str):
        self.root = root
        self.put("proc/pressure/cpu", psi(1_000, 0))
        self.put("proc/pressure/io", psi(2_000, 1_000))
        self.put("proc/pressure/memory", psi(0, 0))
        self.put("proc/vmstat", "nr_free_pages 10\npswpin 100\npswpout 200\npgmajfault 7\n")
        self.put(f"proc/{PID}/cgroup", cgroup)
        self.put(f"proc/{PID}/stat", stat(PID, 50))

    def put(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)

    def fs(self) -> ProcFS:
        return ProcFS(proc=str(self.root / "proc"), sys=str(self.root / "sys"))


def values(rows: dict) -> dict[str, float]:
    s = rows["samples"]
    assert set(s["device"]) == {"Host"}
    return dict(zip(s["metric"], s["value"], strict=True))


def reasons(s: PressureSampler) -> dict[str, str]:
    return {u["metric"]: u["reason"] for u in s.manifest()["unsupported"]}


def test_parsers() -> None:
    assert parse_psi(psi(5, 7).encode()) == {"some": 5, "full": 7}
    assert parse_majflt(stat(1, 99).encode()) == 99  # a name with spaces and parentheses


def test_cgroup_v2_pressure_events_and_limits(tmp_path: Path) -> None:
    t = Tree(tmp_path, "0::/kubepods/pod1\n")
    cg = "sys/fs/cgroup/kubepods/pod1/"
    t.put(cg + "cgroup.procs", f"{PID}\n")
    for r in ("cpu", "io", "memory"):
        t.put(cg + f"{r}.pressure", psi(0, 0))
    t.put(cg + "memory.events", "low 0\nhigh 10\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n")
    t.put(cg + "memory.current", "1000\n")
    t.put(cg + "memory.swap.current", "0\n")
    t.put(cg + "memory.max", "max\n")
    t.put(cg + "memory.high", "4096\n")
    s = PressureSampler(lambda: {PID}, PID, procfs=t.fs(), page_size=4096)
    s.start(0)
    t.put("proc/pressure/memory", psi(300_000, 100_000))  # 0.3 s of 2 s stalled: 15 %
    t.put("proc/pressure/cpu", psi(41_000, 0))
    t.put(cg + "memory.pressure", psi(500_000, 200_000))
    t.put(cg + "cpu.pressure", psi(20_000, 2_000))
    t.put(cg + "memory.events", "low 0\nhigh 16\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n")
    t.put(cg + "memory.current", "2000\n")
    t.put(cg + "memory.swap.current", "8192\n")
    t.put("proc/vmstat", "nr_free_pages 10\npswpin 110\npswpout 204\npgmajfault 7\n")
    t.put(f"proc/{PID}/stat", stat(PID, 150))
    got = values(s.sample(2 * S))
    assert got == pytest.approx({
        "host_pressure_cpu_some": 2.0, "host_pressure_io_some": 0.0, "host_pressure_io_full": 0.0,
        "host_pressure_memory_some": 15.0, "host_pressure_memory_full": 5.0,
        "cgroup_pressure_cpu_some": 1.0, "cgroup_pressure_cpu_full": 0.1, "cgroup_pressure_io_some": 0.0,
        "cgroup_pressure_io_full": 0.0, "cgroup_pressure_memory_some": 25.0, "cgroup_pressure_memory_full": 10.0,
        "cgroup_mem_events_high": 3.0, "cgroup_mem_events_max": 2.0, "cgroup_mem_events_oom": 1.0,
        "cgroup_mem_events_oom_kill": 0.5, "cgroup_mem_current": 2000.0, "cgroup_swap_current": 8192.0,
        "cgroup_mem_high": 4096.0,  # memory.max "max": no limit, no row
        "host_swap_in": 10 * 4096 / 2, "host_swap_out": 4 * 4096 / 2, "process_major_faults": 50.0})
    assert reasons(s) == {"cgroup_mem_under_oom": "cgroup v2 has no under_oom (see cgroup_mem_events_oom)"}
    assert s.manifest()["collector"]["memory_cgroup"] == ["v2", "fs/cgroup/kubepods/pod1"]


def test_cgroup_v1_on_a_hybrid_host(tmp_path: Path) -> None:
    t = Tree(tmp_path, "4:memory:/docker/abc\n1:cpu:/\n0::/\n")
    t.put("sys/fs/cgroup/unified/cgroup.procs", "1\n")  # the v2 hierarchy, where the target is the root
    cg = "sys/fs/cgroup/memory/docker/abc/"
    t.put(cg + "memory.usage_in_bytes", "5000\n")
    t.put(cg + "memory.limit_in_bytes", "9223372036854771712\n")  # no limit
    t.put(cg + "memory.failcnt", "3\n")
    t.put(cg + "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    t.put(cg + "memory.memsw.usage_in_bytes", "5000\n")
    s = PressureSampler(lambda: {PID}, lambda: PID, procfs=t.fs(), page_size=4096)
    s.start(0)
    t.put(cg + "memory.failcnt", "7\n")
    t.put(cg + "memory.oom_control", "oom_kill_disable 1\nunder_oom 1\noom_kill 1\n")
    t.put(cg + "memory.memsw.usage_in_bytes", "9000\n")
    got = values(s.sample(S))
    assert {k: v for k, v in got.items() if k.startswith("cgroup")} == {
        "cgroup_mem_current": 5000.0, "cgroup_mem_events_max": 4.0, "cgroup_mem_under_oom": 100.0,
        "cgroup_mem_events_oom_kill": 1.0, "cgroup_swap_current": 4000.0}
    why = reasons(s)
    assert why["cgroup_mem_high"] == "cgroup v1 has no memory.high"
    assert why["cgroup_mem_events_oom"] == "cgroup v1 has no memory.events oom"
    assert why["cgroup_pressure_memory_some"].startswith("the target is in the root cgroup")
    assert "cgroup_mem_max" not in why  # no limit is not unsupported: it has no row


def test_absent_files_are_unsupported_with_the_reason_never_zero(tmp_path: Path) -> None:
    t = Tree(tmp_path, "2:cpu:/x\n")  # cgroup v1 without a memory controller, no v2 hierarchy
    for f in ("cpu", "io", "memory"):
        (tmp_path / "proc/pressure" / f).unlink()
    (tmp_path / "proc/pressure").rmdir()
    t.put("proc/vmstat", "nr_free_pages 10\n")  # a kernel without swap counters
    s = PressureSampler(lambda: {PID}, PID, procfs=t.fs())
    s.start(0)
    got = values(s.sample(S))
    assert got == {"process_major_faults": 0.0}
    why = reasons(s)
    assert why["host_pressure_memory_some"].startswith("no /proc/pressure: a kernel without PSI")
    assert why["host_swap_in"].endswith("vmstat does not give it")
    assert why["cgroup_pressure_io_full"] == "the target has no cgroup v2 folder (cgroup v1 only)"
    assert why["cgroup_mem_events_oom_kill"].startswith("the target has no memory cgroup")
    assert "host_pressure_cpu_full" not in why  # never collected: the kernel reports host-wide cpu full as 0


def test_no_target_process(tmp_path: Path) -> None:
    Tree(tmp_path, "0::/\n")
    s = PressureSampler(set, lambda: None, procfs=ProcFS(proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys")))
    s.start(0)
    assert "process_major_faults" not in values(s.sample(S))
    why = reasons(s)
    assert why["cgroup_pressure_cpu_some"] == why["cgroup_mem_current"] == "no target process"


def test_major_faults_follow_the_target_processes(tmp_path: Path) -> None:
    """A child seen later counts from its first reading; one that exits drops out."""
    t = Tree(tmp_path, "0::/\n")
    pids = {PID}
    s = PressureSampler(lambda: set(pids), PID, procfs=t.fs())
    s.start(0)
    t.put(f"proc/{PID}/stat", stat(PID, 60))
    t.put("proc/5000/stat", stat(5000, 1000))
    pids.add(5000)
    assert values(s.sample(S))["process_major_faults"] == 10.0  # the child's first reading is its baseline
    t.put(f"proc/{PID}/stat", stat(PID, 61))
    t.put("proc/5000/stat", stat(5000, 1004))
    assert values(s.sample(2 * S))["process_major_faults"] == 5.0
    pids.discard(5000)
    os.unlink(tmp_path / "proc/5000/stat")
    t.put(f"proc/{PID}/stat", stat(PID, 63))
    assert values(s.sample(3 * S))["process_major_faults"] == 2.0
    s.close()


def test_files_stay_open_between_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Tree(tmp_path, "0::/\n")
    s = PressureSampler(lambda: {PID}, PID, procfs=t.fs())
    s.start(0)
    s.sample(S)
    opened: list[str] = []
    real = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(p) or real(p, *a, **k))
    s.sample(2 * S)
    assert opened == []
