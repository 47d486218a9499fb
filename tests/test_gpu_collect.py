"""The NVML sampler end to end: scenario bundle pairs for compare, `perfdiff collect` with the
fake driver, and the GPU bench script."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fakes import make_scenario_bundle
from fakes.fake_nvml import OTHER_PID, make_scenario
from perfdiff.bundle import load_bundle
from perfdiff.collectors import gpu as gpu_mod
from perfdiff.collectors.gpu import NO_DRIVER_LINE

MS = 1_000_000
TICK = 100 * MS
REPO = Path(gpu_mod.__file__).resolve().parents[2]


def test_bench_script_prints_its_table():
    sys.path.insert(0, str(REPO / "bench"))
    import bench_gpu

    result = bench_gpu.run(2, 20.0, 0.3)
    text = bench_gpu.render(result, 2, 20.0, 0.3)
    assert result["n"] == 6 and "| tick jitter (ms late) |" in text and "nvmlDeviceGetFieldValues" in text


# ---------------------------------------------------------------------------- bundles for compare


def test_scenario_bundle_pair_power_cap(tmp_path):
    normal, abnormal = make_scenario_bundle("power_cap", tmp_path, seed=3, duration_s=6)
    n, a = load_bundle(normal), load_bundle(abnormal)
    assert n.manifest["status"] == "complete" and a.manifest["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert len(n.markers) > 100 and set(n.activity["device"]) == {"GPU 0"}

    def mean(run, metric):
        return run.samples.loc[run.samples["metric"] == metric, "value"].mean()

    assert mean(n, "gpu_throttle_power") == 0 and mean(a, "gpu_throttle_power") == pytest.approx(50, abs=3)
    assert mean(n, "gpu_sm_frequency") > 1950 and mean(a, "gpu_sm_frequency") < 1700
    gemm = "ampere_bf16_s16816gemm_relu_256x128_32x3_nn"
    dur = {k: r.activity.loc[r.activity["function"] == gemm, "busy_ns"].mean() for k, r in (("n", n), ("a", a))}
    assert dur["a"] > 1.15 * dur["n"]
    again, _ = make_scenario_bundle("power_cap", tmp_path / "again", seed=3, duration_s=6)
    pd.testing.assert_frame_equal(load_bundle(again).samples, n.samples)  # same seed, same bundle


def test_scenario_bundle_pair_competing_process(tmp_path):
    normal, abnormal = make_scenario_bundle("competing_process", tmp_path, seed=1, duration_s=6)
    a = load_bundle(abnormal)
    (ev,) = [e for e in a.manifest["events"] if e["event"] == "other-process"]
    assert (ev["pid"], ev["name"]) == (OTHER_PID, "gpu_burn")
    other = a.samples[a.samples["metric"] == "other_process_gpu_usage"]
    assert other["value"].max() > 40 and load_bundle(normal).samples.query(
        "metric == 'other_process_gpu_usage'")["value"].max() == 0


# ---------------------------------------------------------------------------- perfdiff collect end to end

E2E = {  # scenario → what the bundle must show
    "a100_nvlink": {"metrics": {"gpu_link_transmit", "gpu_usage", "process_gpu_usage", "gpu_throttle_power"},
                    "unsupported": ("GPU 0", "gpu_sm_util", "isSupportedDevice = 0")},
    "h100_gpm": {"metrics": {"gpu_sm_util", "gpu_sm_occupancy", "gpu_power"}},
    "pcie_no_nvlink": {"metrics": {"gpu_pcie_transmit"},
                       "unsupported": ("GPU 0", "gpu_link_receive", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")},
    "one_not_supported": {"metrics": {"gpu_power"}, "unsupported": ("GPU 1", "gpu_power", "Not Supported")},
    "gpu_lost": {"metrics": {"gpu_sm_frequency"}, "event": ("GPU 1", "gpu-lost")},
    "old_driver": {"metrics": {"gpu_mem_used", "gpu_throttle_thermal"},
                   "unsupported": ("GPU 0", "gpu_sm_util", "Function Not Found")},
    "power_cap": {"metrics": {"gpu_throttle_power", "gpu_power_limit"}},
    "competing_process": {"metrics": {"other_process_gpu_usage"}, "event": ("GPU 0", "other-process")},
    "xid_and_ecc": {"metrics": {"gpu_temperature"}, "event": ("GPU 0", "xid")},
    "no_driver": {"metrics": set()},
}


@pytest.mark.parametrize("name", sorted(E2E))
def test_collect_end_to_end_with_the_fake_driver(name, tmp_path, monkeypatch, capsys):
    """`perfdiff collect --pid` on a live process, `import pynvml` answered by the fake."""
    import subprocess

    from perfdiff.cli import main

    child = subprocess.Popen(["sleep", "30"])
    try:
        sc = make_scenario(name, duration_ns=800 * MS, t0_ns=time.time_ns(), target_pid=child.pid)
        sc.fake.set_time(time.time_ns())  # the fake's clock now runs with the wall clock
        monkeypatch.setitem(sys.modules, "pynvml", sc.nvml)
        out = tmp_path / "run"
        code = main(["collect", "--pid", str(child.pid), "--duration", "800ms", "--interval", "100ms",
                     "-o", str(out)])
    finally:
        child.kill()
        child.wait()
    err = capsys.readouterr().err
    assert code == 0, err
    run = load_bundle(out)
    m = run.manifest
    assert m["status"] == "complete"
    gpu_rows = run.samples[run.samples["device"].astype(str).str.startswith("GPU")]
    want = E2E[name]
    if name == "no_driver":
        assert gpu_rows.empty and NO_DRIVER_LINE in err and NO_DRIVER_LINE in m["warnings"]
        return
    assert want["metrics"] <= set(gpu_rows["metric"].astype(str)), sorted(set(gpu_rows["metric"].astype(str)))
    assert (gpu_rows["t_start_ns"] <= gpu_rows["t_end_ns"]).all()
    assert gpu_rows["t_end_ns"].between(m["collection"]["start_ns"] - TICK, m["collection"]["stop_ns"] + TICK).all()
    nvml = next(c for c in m["collectors"] if c["name"] == "nvml")
    assert nvml["interval_ns"] == TICK and nvml["call_latency_us"]
    assert any(g["sampled"] and g["name"] == sc.fake.gpus[0].name for g in m["gpus"])
    if "unsupported" in want:
        dev, metric, text = want["unsupported"]
        reasons = [u["reason"] for u in m["unsupported"] if u["device"] == dev and u["metric"] == metric]
        assert reasons and text in reasons[0], m["unsupported"]
    if "event" in want:
        dev, what = want["event"]
        assert any(e["device"] == dev and e["event"] == what for e in m["events"]), m["events"]
    assert sc.fake.state_changing_calls == [] and sc.fake.blocking_waits == 0
