"""The NVML sampler (collectors/gpu/) against the fake NVML's named scenarios.

(The fake itself and the NVML door: test_gpu_nvml.py; bundles and `perfdiff collect` with the
fake driver: test_gpu_collect.py.)

Each test drives the sampler over simulated ticks (the fake's clock is set to each tick's
t_ns and runs on with the monotonic clock while the sampler works) and checks values, units,
timestamps and the unsupported reasons in the rows and the manifest.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pynvml
import pytest

from fakes.fake_nvml import (CONTAINER_PID, GIB, HOST_PID, OTHER_PID, RESERVED_BYTES, T0_NS, TARGET_PID,
                             Change, FakeNvml, FakeProc, ProcEntry, Scenario, a100, busy_a100, make_scenario)
from perfdiff.bundle import SCHEMAS
from perfdiff.collectors.gpu import NO_DRIVER_LINE, open_gpu_sampler
from perfdiff.collectors.gpu import context as gpu_context
from perfdiff.collectors.gpu import nvml_query
from perfdiff.collectors.gpu.metrics import NEW_METRICS
from perfdiff.errors import InputError
from perfdiff.registry import METRICS

MS = 1_000_000
TICK = 100 * MS


@dataclass
class Run:
    """The outcome of driving a sampler over a scenario."""

    df: pd.DataFrame
    manifest: dict[str, Any]
    sc: Scenario
    warnings: list[str]

    def rows(self, metric: str, device: str = "GPU 0") -> pd.DataFrame:
        d = self.df[(self.df["metric"] == metric) & (self.df["device"] == device)]
        return d.sort_values("t_end_ns").reset_index(drop=True)

    def unsupported(self, device: str, metric: str) -> str | None:
        for u in self.manifest["unsupported"]:
            if u["device"] == device and u["metric"] == metric:
                return u["reason"]
        return None

    def events(self, what: str) -> list[dict[str, Any]]:
        return [e for e in self.manifest["events"] if e["event"] == what]

    def gpu(self, index: int) -> dict[str, Any]:
        return next(g for g in self.manifest["gpus"] if g["index"] == index)

    def not_sampled(self) -> list[int]:
        return [g["index"] for g in self.manifest["collector"]["other_gpus"]]


@contextlib.contextmanager
def frozen_clock(sc: Scenario):
    """Simulated time only: the fake stands still within a tick and so does the sampler's
    monotonic clock, so every call is stamped at the tick's t_ns and values are exact whatever
    the load on this machine."""
    sc.fake.follow_real_time = False
    frozen = types.SimpleNamespace(perf_counter_ns=lambda: 0, time_ns=time.time_ns)
    with mock.patch.object(gpu_context, "time", frozen), mock.patch.object(nvml_query, "time", frozen):
        yield


def drive(sc: Scenario, tmp_path: Path, *, ticks: int | None = None, gpus: list[int] | None = None,
          targets: set[int] | None = None, proc: dict[int, ProcEntry] | None = None,
          realtime: bool = False) -> Run:
    """Open the sampler on `sc`, tick it every 100 ms over the scenario, return rows + manifest.

    `realtime`: the fake's clock runs on with the monotonic clock between ticks, as a driver's
    does, and the sampler stamps calls at their measured midpoints.
    """
    root = str(tmp_path / "proc")
    Path(root).mkdir(exist_ok=True)
    from fakes.fake_nvml import write_proc_tree

    write_proc_tree(root, sc.proc if proc is None else proc)
    warnings: list[str] = []
    pids = sc.target_pids if targets is None else targets
    with contextlib.nullcontext() if realtime else frozen_clock(sc):
        s = open_gpu_sampler(lambda: pids, gpus=gpus, interval_ns=TICK, nvml=sc.nvml, warn=warnings.append,
                             proc_root=root)
        assert s is not None, warnings
        sc.fake.set_time(T0_NS)
        s.start(T0_NS)
        n = ticks if ticks is not None else sc.duration_ns // TICK
        frames = []
        for k in range(1, n + 1):
            t = T0_NS + k * TICK
            sc.fake.set_time(t)
            out = s.sample(t)
            assert set(out) == {"samples"}
            frames.append(out["samples"])
        manifest = s.manifest()
        s.close()
    json.dumps(manifest)  # the fragment goes into manifest.json as it is
    return Run(pd.concat(frames, ignore_index=True), manifest, sc, warnings)


def values(run: Run, metric: str, device: str = "GPU 0") -> np.ndarray:
    return run.rows(metric, device)["value"].to_numpy()


def assert_contiguous(d: pd.DataFrame) -> None:
    """Interval rows: each starts where the previous ended, and covers a window."""
    assert (d["t_start_ns"] < d["t_end_ns"]).all()
    assert (d["t_start_ns"].to_numpy()[1:] == d["t_end_ns"].to_numpy()[:-1]).all()

# ---------------------------------------------------------------------------- scenarios


def test_a100_nvlink_values_units_timestamps(tmp_path):
    run = drive(make_scenario("a100_nvlink"), tmp_path)
    df = run.df
    assert set(df["device"]) == {"GPU 0"}  # GPU 1 is not the target's: not sampled
    assert run.not_sampled() == [1] and [g["index"] for g in run.manifest["gpus"]] == [0]
    assert run.gpu(0)["sampled"] and run.gpu(0)["selected_by"] == f"NVML process list: pids [{TARGET_PID}]"
    assert list(df.columns) == list(SCHEMAS["samples"])
    assert ((df["t_start_ns"] >= T0_NS) & (df["t_end_ns"] <= T0_NS + 3_000 * MS + 10 * MS)).all()
    for metric in set(df["metric"]):
        assert metric in METRICS or metric in NEW_METRICS, metric
    # Point readings (t_start == t_end), in MHz, bytes, °C, W.
    for metric, expected in (("gpu_sm_frequency", 1410), ("gpu_frequency", 1410), ("gpu_mem_frequency", 1593),
                             ("gpu_mem_used", 60 * GIB), ("gpu_temperature", 62), ("gpu_power_limit", 400.0),
                             ("process_gpu_mem_used", 60 * GIB), ("other_process_gpu_mem_used", 0)):
        d = run.rows(metric)
        assert len(d) == 30 and (d["t_start_ns"] == d["t_end_ns"]).all(), metric
        assert (d["value"] == expected).all(), metric
    # Rates from cumulative counters (B/s) and the energy counter (W): contiguous windows.
    for metric, expected in (("gpu_link_transmit", 40e9), ("gpu_link_receive", 38e9),
                             ("gpu_pcie_transmit", 2e9), ("gpu_pcie_receive", 6e9), ("gpu_power", 310.0)):
        d = run.rows(metric)
        assert len(d) == 30, metric
        assert_contiguous(d)
        assert d["value"].to_numpy() == pytest.approx(expected, rel=2e-3), metric
    # Buffered samples keep the driver's own µs timestamps (every 1/6 s) and cover the gap since the last.
    d = run.rows("gpu_usage")
    assert len(d) == 18 and (d["value"] == 95).all()
    assert_contiguous(d)
    period = 1_000_000_000 // 6
    assert list(d["t_end_ns"]) == [(T0_NS + k * period) // 1000 * 1000 for k in range(1, 19)]
    assert (values(run, "gpu_mem_bw_util") == 40).all()
    assert (values(run, "process_gpu_usage") == 90).all() and (values(run, "other_process_gpu_usage") == 0).all()
    # Throttle reasons: exact shares from the ns counters; point readings from the bitmask.
    d = run.rows("gpu_throttle_power")
    assert_contiguous(d)
    assert (d["value"] == 0).all()
    assert (run.rows("gpu_throttle_hw_slowdown")["t_start_ns"] == run.rows("gpu_throttle_hw_slowdown")["t_end_ns"]).all()
    # GPM is Hopper+: unsupported with the reason, no rows (never 0).
    assert "isSupportedDevice = 0" in run.unsupported("GPU 0", "gpu_sm_util")
    assert "Hopper" in run.unsupported("GPU 0", "gpu_sm_occupancy")
    assert run.rows("gpu_sm_util").empty
    col = run.manifest["collector"]
    assert col["name"] == "nvml" and col["interval_ns"] == TICK and col["driver"] == "570.124.06"
    assert "nvmlDeviceGetFieldValues" in col["call_latency_us"]
    assert col["call_stats"]["nvmlDeviceGetClockInfo"]["calls"] > 90
    assert col["sources"]["GPU 0"]["gpu_mem_used"] == "nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)"
    g0 = run.gpu(0)
    assert (g0["name"], g0["max_sm_clock_mhz"], g0["max_mem_clock_mhz"], g0["power_limit_w"]) == \
        ("NVIDIA A100-SXM4-80GB", 1410, 1593, 400.0)
    assert g0["uuid"].startswith("GPU-") and g0["driver"] == "570.124.06" and g0["mem_total_bytes"] == 80 * GIB
    assert run.sc.fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # blocks ~20 ms: never in the loop
    assert run.sc.fake.blocking_waits == 0 and run.sc.fake.state_changing_calls == []


def test_realtime_midpoint_stamps_and_call_latency(tmp_path):
    """With the clocks running, calls are stamped at their midpoints and their cost measured."""
    run = drive(make_scenario("h100_gpm"), tmp_path, realtime=True)
    p = run.rows("gpu_power")
    assert_contiguous(p)
    assert p["value"].median() == pytest.approx(640, rel=0.02)
    f = run.rows("gpu_sm_frequency")
    assert (f["t_start_ns"] > T0_NS + np.arange(1, 31) * TICK).all()  # after the tick began
    assert (f["t_start_ns"] < T0_NS + np.arange(1, 31) * TICK + 50 * MS).all()
    lat = run.manifest["collector"]["call_latency_us"]
    assert lat["nvmlDeviceGetFieldValues"] > 0 and lat["nvmlGpmSampleGet"] > 0
    stats = run.manifest["collector"]["call_stats"]["nvmlDeviceGetClockInfo"]
    assert stats["calls"] == 3 * 31 and 0 < stats["mean_us"] <= stats["max_us"]


def test_h100_gpm_metrics_from_consecutive_ticks(tmp_path):
    run = drive(make_scenario("h100_gpm"), tmp_path)
    for metric, expected in (("gpu_sm_util", 72.5), ("gpu_sm_occupancy", 38.0), ("gpu_tensor_util", 55.0),
                             ("gpu_dram_bw_util", 47.5)):
        d = run.rows(metric)
        assert len(d) >= 14, metric
        assert_contiguous(d)
        assert ((d["t_end_ns"] - d["t_start_ns"]) >= 100 * MS).all()  # GPM windows ≥ 100 ms
        assert d["value"].to_numpy() == pytest.approx(expected, rel=1e-3), metric
    assert run.unsupported("GPU 0", "gpu_sm_util") is None
    assert run.sc.fake.calls["nvmlGpmSampleAlloc"] == 2  # two buffers reused as a ring
    assert run.sc.fake.calls["nvmlGpmSampleFree"] == 2  # and given back at close


def test_pcie_card_without_nvlink(tmp_path):
    run = drive(make_scenario("pcie_no_nvlink"), tmp_path)
    assert run.rows("gpu_link_transmit").empty and run.rows("gpu_link_receive").empty
    reason = run.unsupported("GPU 0", "gpu_link_transmit")
    assert "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX" in reason and "Not Supported" in reason
    assert values(run, "gpu_pcie_receive") == pytest.approx(4e9, rel=2e-3)
    assert (values(run, "gpu_sm_frequency") == 2040).all()
    assert run.gpu(0)["name"] == "NVIDIA L4"


def test_one_metric_not_supported_on_one_gpu(tmp_path):
    run = drive(make_scenario("one_not_supported"), tmp_path)
    assert sorted(set(run.df["device"])) == ["GPU 0", "GPU 1", "GPU 2"]
    assert values(run, "gpu_power", "GPU 0") == pytest.approx(310, rel=2e-3)
    assert values(run, "gpu_power", "GPU 2") == pytest.approx(310, rel=2e-3)
    assert run.rows("gpu_power", "GPU 1").empty  # unknown: no row, never 0
    reason = run.unsupported("GPU 1", "gpu_power")
    assert "nvmlDeviceGetTotalEnergyConsumption: Not Supported" in reason
    assert "nvmlDeviceGetPowerUsage: Not Supported" in reason
    assert run.unsupported("GPU 0", "gpu_power") is None
    assert len(run.rows("gpu_temperature", "GPU 1")) == 30  # the rest of GPU 1 goes on


def test_no_permission_on_process_lists_falls_back_to_dev_nvidia(tmp_path):
    run = drive(make_scenario("no_permission_process_lists"), tmp_path)
    assert set(run.df["device"]) == {"GPU 1"}  # the target holds /dev/nvidia1 open
    assert run.gpu(1)["selected_by"] == "/proc/PID/fd holds /dev/nvidia1" and run.not_sampled() == [0]
    reason = run.unsupported("GPU 1", "process_gpu_mem_used")
    assert "Insufficient Permissions" in reason and "NVMLError_NoPermission" in reason
    assert run.rows("process_gpu_mem_used", "GPU 1").empty
    assert (values(run, "process_gpu_usage", "GPU 1") == 90).all()  # the sample API still names pids
    assert (values(run, "gpu_usage", "GPU 1") == 95).all()


def test_gpu_lost_mid_run(tmp_path):
    run = drive(make_scenario("gpu_lost"), tmp_path)
    lost_at = T0_NS + 1_500 * MS
    (ev,) = run.events("gpu-lost")
    assert ev["device"] == "GPU 1" and lost_at <= ev["t_ns"] <= lost_at + TICK + 20 * MS
    assert "GPU is lost" in ev["error"] and ev["call"].startswith("nvml")
    xid = run.events("xid")
    assert [(e["device"], e["xid"], e["meaning"]) for e in xid] == [("GPU 1", 79, "GPU has fallen off the bus")]
    g1 = run.df[run.df["device"] == "GPU 1"]
    assert len(g1) > 0 and g1["t_end_ns"].max() <= lost_at
    g0 = run.rows("gpu_sm_frequency", "GPU 0")
    assert len(g0) == 30 and g0["t_end_ns"].max() >= T0_NS + 2_900 * MS  # the other GPU goes on
    assert run.gpu(1)["lost"] is True and run.gpu(0)["lost"] is False


def test_pid_namespace_mapping_through_nspid(tmp_path):
    run = drive(make_scenario("pid_namespace"), tmp_path)  # target pid 42; NVML says 31337
    assert run.gpu(0)["sampled"] and run.gpu(0)["target_pids"] == [CONTAINER_PID]
    assert (values(run, "process_gpu_usage") == 90).all()
    assert (values(run, "process_gpu_mem_used") == 60 * GIB).all()
    assert run.events("other-process") == []


def test_pid_namespace_unresolvable_is_unsupported_not_zero(tmp_path):
    """NVML's pid is not in this /proc and no NSpid links it: GPU found by fd, no process rows."""
    sc = make_scenario("pid_namespace")
    proc = {CONTAINER_PID: ProcEntry((CONTAINER_PID,), "python3", ("/dev/nvidia0",))}
    run = drive(sc, tmp_path, proc=proc)
    assert run.gpu(0)["selected_by"] == "/proc/PID/fd holds /dev/nvidia0"
    assert run.rows("process_gpu_usage").empty and run.rows("other_process_gpu_usage").empty
    assert run.rows("process_gpu_mem_used").empty
    reason = run.unsupported("GPU 0", "process_gpu_usage")
    assert f"[{HOST_PID}]" in reason and "pid namespace" in reason
    assert (values(run, "gpu_usage") == 95).all()


def test_nspid_of_the_target_matches_an_inner_nvml_pid(tmp_path):
    """The other direction: the target is known by its host pid, NVML reports the inner one."""
    load = busy_a100(pid=CONTAINER_PID)
    sc = Scenario("inner", "", FakeNvml([a100(0, load)]), {HOST_PID},
                  {HOST_PID: ProcEntry((HOST_PID, CONTAINER_PID))}, 1_000 * MS)
    run = drive(sc, tmp_path)
    assert run.gpu(0)["sampled"] and run.gpu(0)["target_pids"] == [HOST_PID]
    assert (values(run, "process_gpu_usage") == 90).all()


def test_driver_older_than_the_binding(tmp_path):
    run = drive(make_scenario("old_driver"), tmp_path)
    src = run.manifest["collector"]["sources"]["GPU 0"]
    assert src["process_list_0"] == "nvmlDeviceGetComputeRunningProcesses_v2"
    assert src["gpu_mem_used"].startswith("nvmlDeviceGetMemoryInfo (v1")
    assert run.gpu(0)["mem_info_version"] == "v1"
    assert (values(run, "gpu_mem_used") == 60 * GIB + RESERVED_BYTES).all()  # v1 counts reserved memory
    assert (values(run, "process_gpu_mem_used") == 60 * GIB).all()
    reason = run.unsupported("GPU 0", "gpu_sm_util")
    assert reason.startswith("nvmlGpmQueryDeviceSupport: Function Not Found")
    assert "driver 470.82.01 is older than nvidia-ml-py" in reason
    reason = run.unsupported("GPU 0", "gpu_pcie_transmit")
    assert "NVML_FI_DEV_PCIE_COUNT_TX_BYTES" in reason and "nvmlDeviceGetPcieThroughput is not used" in reason
    # Throttle reasons from the pre-535 bitmask call, as point readings (0 or 100).
    assert src["gpu_throttle_thermal"].startswith("nvmlDeviceGetCurrentClocksThrottleReasons bit 0x20")
    d = run.rows("gpu_throttle_thermal")
    assert (d["t_start_ns"] == d["t_end_ns"]).all()
    half = T0_NS + 1_500 * MS
    assert (d.loc[d["t_end_ns"] < half, "value"] == 0).all() and (d.loc[d["t_end_ns"] > half, "value"] == 100).all()
    assert run.sc.fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 0  # unversioned: mismatch error


def test_power_cap_mid_run(tmp_path):
    run = drive(make_scenario("power_cap"), tmp_path)
    cap = T0_NS + 1_500 * MS
    d = run.rows("gpu_throttle_power")
    assert_contiguous(d)
    before, after = d[d["t_end_ns"] <= cap], d[d["t_start_ns"] >= cap]
    assert (before["value"] == 0).all() and after["value"].to_numpy() == pytest.approx(100, abs=0.5)
    straddle = d[(d["t_start_ns"] < cap) & (d["t_end_ns"] > cap)]
    for _, r in straddle.iterrows():  # the window holding the cap: the share after it
        assert r["value"] == pytest.approx(100 * (r["t_end_ns"] - cap) / (r["t_end_ns"] - r["t_start_ns"]), abs=1)
    f = run.rows("gpu_sm_frequency")
    assert set(f.loc[f["t_end_ns"] < cap, "value"]) == {1980} and set(f.loc[f["t_end_ns"] > cap + MS, "value"]) == {1350}
    lim = run.rows("gpu_power_limit")
    assert set(lim.loc[lim["t_end_ns"] < cap, "value"]) == {700.0} and lim["value"].iloc[-1] == 350.0
    p = run.rows("gpu_power")
    assert p["value"].iloc[0] == pytest.approx(640, rel=2e-3) and p["value"].iloc[-1] == pytest.approx(348, rel=2e-3)
    bits = run.manifest["collector"]["sources"]["GPU 0"]["gpu_throttle_power"]
    assert bits == "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (ns counter)"


def test_competing_process_on_the_same_gpu(tmp_path):
    run = drive(make_scenario("competing_process"), tmp_path)
    start = T0_NS + 1_500 * MS
    (ev,) = run.events("other-process")
    assert (ev["pid"], ev["name"], ev["device"]) == (OTHER_PID, "gpu_burn", "GPU 0")
    assert start <= ev["t_ns"] <= start + TICK + 20 * MS
    other = run.rows("other_process_gpu_usage")
    assert set(other.loc[other["t_end_ns"] < start, "value"]) == {0}
    assert set(other.loc[other["t_start_ns"] > start, "value"]) == {45}
    mine = run.rows("process_gpu_usage")
    assert set(mine.loc[mine["t_end_ns"] < start, "value"]) == {90}
    assert set(mine.loc[mine["t_start_ns"] > start, "value"]) == {50}
    mem = run.rows("other_process_gpu_mem_used")
    assert mem["value"].iloc[0] == 0 and mem["value"].iloc[-1] == 10 * GIB


def test_xid_and_ecc_events_with_their_time(tmp_path):
    run = drive(make_scenario("xid_and_ecc"), tmp_path)
    ecc = run.events("ecc")
    assert [(e["kind"], e["count"], e["total"]) for e in ecc] == [("corrected", 3, 3), ("uncorrected", 1, 1)]
    assert T0_NS + 1_000 * MS <= ecc[0]["t_ns"] <= T0_NS + 1_100 * MS + 10 * MS
    assert ecc[0]["window_start_ns"] < ecc[0]["t_ns"]
    (xid,) = run.events("xid")
    assert (xid["xid"], xid["meaning"]) == (48, "double-bit ECC error")
    assert T0_NS + 2_000 * MS <= xid["t_ns"] <= T0_NS + 2_100 * MS + 20 * MS


@pytest.mark.parametrize("name", ["no_driver", "no_library"])
def test_no_driver_is_one_line_and_no_sampler(name, tmp_path):
    sc = make_scenario(name)
    warnings: list[str] = []
    assert open_gpu_sampler(lambda: {1}, gpus=None, interval_ns=TICK, nvml=sc.nvml, warn=warnings.append) is None
    assert warnings == [NO_DRIVER_LINE]


def test_no_binding_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    warnings: list[str] = []
    assert open_gpu_sampler(lambda: {1}, gpus=None, interval_ns=TICK, warn=warnings.append) is None
    assert len(warnings) == 1 and warnings[0].startswith(NO_DRIVER_LINE)


# ---------------------------------------------------------------------------- selection and edges


def test_gpus_override_samples_an_idle_gpu(tmp_path):
    run = drive(make_scenario("a100_nvlink"), tmp_path, gpus=[1])
    assert set(run.df["device"]) == {"GPU 1"} and run.gpu(1)["selected_by"] == "--gpus"
    # An idle GPU's sample buffer runs dry: the current rate is read instead, as a point.
    d = run.rows("gpu_usage", "GPU 1")
    assert len(d) >= 2 and (d["value"] == 0).all() and (d["t_start_ns"] == d["t_end_ns"]).all()
    assert (values(run, "process_gpu_mem_used", "GPU 1") == 0).all()  # the target holds none there
    idle = run.rows("process_gpu_usage", "GPU 1")  # no process sample, GPU idle: 0, known
    assert len(idle) >= 2 and (idle["value"] == 0).all() and (idle["t_start_ns"] == idle["t_end_ns"]).all()
    assert (values(run, "gpu_sm_frequency", "GPU 1") == 210).all()
    with pytest.raises(InputError, match="--gpus 7: no such GPU"):
        open_gpu_sampler(lambda: {1}, gpus=[7], interval_ns=TICK, nvml=make_scenario("a100_nvlink").nvml)


def test_gpu_outside_this_container_is_reported_not_sampled(tmp_path):
    """NVML counts a GPU whose handle this process may not open (a cgroup): it is named, not read."""
    sc = make_scenario("a100_nvlink")
    sc.fake.gpus[1].errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_NO_PERMISSION
    run = drive(sc, tmp_path, gpus=[0, 1], ticks=5)
    assert set(run.df["device"]) == {"GPU 0"}
    assert "Insufficient Permissions" in run.unsupported("GPU 1", "device")
    (other,) = run.manifest["collector"]["other_gpus"]
    assert other["index"] == 1 and "Insufficient Permissions" in other["open_error"]


def test_gpu_the_target_starts_using_later_is_attached(tmp_path):
    later = Change(1_200 * MS, 1, load={"procs": (FakeProc(TARGET_PID + 1, GIB, 30, 5),), "gpu_util": 30})
    sc = make_scenario("a100_nvlink", changes=[later])
    run = drive(sc, tmp_path, targets={TARGET_PID, TARGET_PID + 1})  # a child joins on GPU 1
    (ev,) = run.events("gpu-attached")
    assert ev["device"] == "GPU 1" and ev["t_ns"] >= T0_NS + 1_200 * MS
    assert run.gpu(1)["sampled"] and run.gpu(1)["target_pids"] == [TARGET_PID + 1]
    assert run.rows("gpu_sm_frequency", "GPU 1")["t_end_ns"].min() > T0_NS + 1_200 * MS
    assert (values(run, "process_gpu_mem_used", "GPU 1") == GIB).all()


def test_children_are_summed_and_others_kept_apart(tmp_path):
    procs = (FakeProc(TARGET_PID, 40 * GIB, 60, 20), FakeProc(TARGET_PID + 1, 5 * GIB, 20, 5),
             FakeProc(OTHER_PID, 3 * GIB, 10, 1))
    sc = make_scenario("a100_nvlink", changes=[Change(0, 0, load={"procs": procs})])
    run = drive(sc, tmp_path, targets={TARGET_PID, TARGET_PID + 1}, ticks=10)
    assert (values(run, "process_gpu_usage") == 80).all() and (values(run, "other_process_gpu_usage") == 10).all()
    assert (values(run, "process_gpu_mem_used") == 45 * GIB).all()
    assert (values(run, "other_process_gpu_mem_used") == 3 * GIB).all()


def test_32bit_counter_wraps_are_unwrapped(tmp_path):
    sc = make_scenario("a100_nvlink")
    sc.fake.gpus[0].pcie_counter_bits = 32  # 6 GB/s wraps a 32-bit byte counter every 0.7 s
    run = drive(sc, tmp_path)
    assert values(run, "gpu_pcie_receive") == pytest.approx(6e9, rel=2e-3)


def test_sample_timestamps_not_on_the_wall_clock_are_shifted(tmp_path):
    sc = make_scenario("a100_nvlink")
    sc.fake.sample_epoch_ns = T0_NS - 5 * 86_400 * 10**9  # µs since "boot"
    run = drive(sc, tmp_path)
    d = run.rows("gpu_usage")
    assert ((d["t_end_ns"] > T0_NS) & (d["t_end_ns"] < T0_NS + 3_100 * MS)).all()
    assert "samples" in run.gpu(0)["timestamp_offset_ns"]


def test_transient_errors_are_counted_and_unknown_means_lost(tmp_path):
    sc = make_scenario("one_not_supported")
    sc.fake.gpus[0].errors["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    sc.fake.gpus[2].errors["nvmlDeviceGetClockInfo"] = pynvml.NVML_ERROR_UNKNOWN
    run = drive(sc, tmp_path, ticks=5)
    assert run.manifest["collector"]["transient_errors"]["GPU 0/gpu_temperature"] >= 5
    assert run.unsupported("GPU 0", "gpu_temperature") is None and run.rows("gpu_temperature").empty
    (ev,) = run.events("gpu-lost")
    assert ev["device"] == "GPU 2" and "Unknown Error" in ev["error"]
    assert run.df[run.df["device"] == "GPU 2"].empty and len(run.rows("gpu_sm_frequency", "GPU 1")) == 5
