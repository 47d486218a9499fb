"""The target cgroup's CPU throttling, read from fake /proc and /sys trees (v2, v1, hybrid,
absent), and the verdict that names a CPU quota."""
from __future__ import annotations

from pathlib import Path


from perfdiff.collectors.host.cgroup import CgroupCpuSampler, cgroup_paths
from perfdiff.collectors.procfs import ProcFS

PID = 4242


def tree(tmp_path: Path, cgroup: str, files: dict[str, str]) -> ProcFS:
    (tmp_path / "proc" / str(PID)).mkdir(parents=True)
    (tmp_path / "proc" / str(PID) / "cgroup").write_text(cgroup)
    for rel, text in files.items():
        p = tmp_path / "sys" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return ProcFS(proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))


def stat_v2(periods: int, throttled: int, usec: int) -> str:
    return f"usage_usec 1\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {usec}\n"


def test_v2_throttling_and_quota(tmp_path: Path) -> None:
    fs = tree(tmp_path, "0::/kubepods/pod1\n", {"fs/cgroup/kubepods/pod1/cpu.stat": stat_v2(100, 0, 0),
                                                "fs/cgroup/kubepods/pod1/cpu.max": "15000 100000\n"})
    s = CgroupCpuSampler(PID, procfs=fs)
    s.start(0)
    (tmp_path / "sys/fs/cgroup/kubepods/pod1/cpu.stat").write_text(stat_v2(110, 8, 680_000))
    rows = s.sample(1_000_000_000)["samples"]
    got = dict(zip(rows["metric"], rows["value"], strict=True))
    assert got == {"cgroup_cpu_throttled": 80.0, "cgroup_cpu_throttled_time": 680.0, "cgroup_cpu_quota": 0.15}
    assert s.manifest()["collector"]["cgroup_version"] == "v2"


def test_v1_on_a_hybrid_host_and_no_limit(tmp_path: Path) -> None:
    fs = tree(tmp_path, "2:cpu,cpuacct:/docker/abc\n0::/\n",
              {"fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat": "nr_periods 10\nnr_throttled 1\nthrottled_time 5000000\n",
               "fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
               "fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cgroup_paths(fs, PID) == ("v1", "fs/cgroup/cpu,cpuacct/docker/abc")
    s = CgroupCpuSampler(PID, procfs=fs)
    s.start(0)
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat").write_text(
        "nr_periods 20\nnr_throttled 6\nthrottled_time 55000000\n")
    rows = s.sample(2_000_000_000)["samples"]
    got = dict(zip(rows["metric"], rows["value"], strict=True))
    assert got == {"cgroup_cpu_throttled": 50.0, "cgroup_cpu_throttled_time": 25.0}  # no quota: no row


def test_no_limit_and_no_periods_is_zero_throttling(tmp_path: Path) -> None:
    """An unlimited cgroup counts no CFS periods: its throttling is 0 %, a row like any other,
    so a normal run without a limit compares with an abnormal run under one."""
    fs = tree(tmp_path, "0::/user.slice\n", {"fs/cgroup/user.slice/cpu.stat": stat_v2(0, 0, 0),
                                             "fs/cgroup/user.slice/cpu.max": "max 100000\n"})
    s = CgroupCpuSampler(PID, procfs=fs)
    s.start(0)
    rows = s.sample(1_000_000_000)["samples"]
    got = dict(zip(rows["metric"], rows["value"], strict=True))
    assert got == {"cgroup_cpu_throttled": 0.0, "cgroup_cpu_throttled_time": 0.0}


def test_no_cgroup_is_unsupported_with_the_reason(tmp_path: Path) -> None:
    fs = tree(tmp_path, "0::/gone\n", {})
    s = CgroupCpuSampler(PID, procfs=fs)
    s.start(0)
    assert s.sample(1_000_000_000) == {}
    reasons = {u["metric"]: u["reason"] for u in s.manifest()["unsupported"]}
    assert set(reasons) == {"cgroup_cpu_throttled", "cgroup_cpu_throttled_time", "cgroup_cpu_quota"}
    assert "cpu.stat unreadable" in reasons["cgroup_cpu_throttled"]


def test_the_verdict_names_a_cpu_quota(tmp_path: Path) -> None:
    """A loop whose threads wait more for a CPU while its cgroup's throttled time grew: the
    verdict is CPU quota throttling, with the throttled time, not plain contention."""
    import numpy as np
    from test_segment_attribute import run_of

    import perfdiff
    from perfdiff.analyze.verdict import VerdictCode
    from perfdiff.bundle import write_bundle

    def run(seed: int, wait_ms: float, throttled: float):
        rng = np.random.default_rng(seed)
        rows, marks, samples, t = [], [], [], 0
        for _ in range(200):
            d = int(10e6 + wait_ms * 1e6 * (1 + 0.05 * rng.standard_normal()))
            marks.append({"name": "step", "start_ns": t, "end_ns": t + d, "source": "perfdiff"})
            rows.append({"function": "oncpu", "kind": "host", "device": "Host", "start_ns": t, "end_ns": t + d,
                         "busy_ns": int(9e6), "tid": 1})
            rows.append({"function": "runq", "kind": "host", "device": "Host", "start_ns": t, "end_ns": t + d,
                         "busy_ns": int(wait_ms * 1e6 * (1 + 0.05 * rng.standard_normal())), "tid": 1})
            t += d
        for i in range(int(t // 2e8)):  # a reading every 200 ms
            samples.append({"metric": "cgroup_cpu_throttled_time", "device": "Host", "t_start_ns": int(i * 2e8),
                            "t_end_ns": int((i + 1) * 2e8), "value": throttled + rng.standard_normal()})
        r = run_of(rows, marks, samples)
        return r
    write_bundle(tmp_path / "n", run(1, 0.5, 2.0))
    write_bundle(tmp_path / "a", run(2, 8.0, 400.0))
    c = perfdiff.compare(tmp_path / "n", tmp_path / "a")
    v = c.verdict[0]
    assert v.code == VerdictCode.CPU_QUOTA and v.detail.throttled_ms_per_s_a > 300
    assert "**CPU quota throttling**: the target's cgroup was throttled" in c.to_markdown()
