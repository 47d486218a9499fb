"""The fake NVML and the one door to NVML: signatures, state-changing calls, failure kinds, rows."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pynvml
import pytest

from fakes.fake_nvml import GIB, T0_NS, TARGET_PID, make_scenario
from perfdiff.collectors import gpu as gpu_mod
from perfdiff.collectors.gpu.nvml_query import STATE_CHANGING, NvmlQuery
from perfdiff.collectors.gpu.rows import Names, Rows

MS = 1_000_000
GPU_DIR = Path(gpu_mod.__file__).resolve().parent


# ---------------------------------------------------------------------------- the fake itself


def test_fake_has_pynvml_signatures_structures_and_errors():
    sc = make_scenario("h100_gpm")
    mod = sc.nvml
    implemented = sc.fake.implemented()
    assert len(implemented) > 40
    for name in implemented:
        assert inspect.signature(getattr(mod, name)) == inspect.signature(getattr(pynvml, name)), name
    # Errors, structures and constants are the real module's objects.
    assert mod.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    assert mod.c_nvmlFieldValue_t is pynvml.c_nvmlFieldValue_t
    assert mod.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        mod.nvmlDeviceGetCount()
    mod.nvmlInit()
    h = mod.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    util = mod.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(util, pynvml.c_nvmlUtilization_t) and (util.gpu, util.memory) == (98, 52)
    mem = mod.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert isinstance(mem, pynvml.c_nvmlMemory_v2_t) and mem.used == 70 * GIB and mem.total == 80 * GIB
    assert mod.nvmlDeviceGetPowerUsage(h) == 640_000  # mW
    assert mod.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980  # MHz
    procs = mod.nvmlDeviceGetComputeRunningProcesses(h)
    assert isinstance(procs[0], pynvml.nvmlFriendlyObject)
    assert (procs[0].pid, procs[0].usedGpuMemory) == (TARGET_PID, 70 * GIB)
    with pytest.raises(pynvml.NVMLError_NotFound):  # no sample newer than "now" yet
        mod.nvmlDeviceGetProcessUtilization(h, 0)
    sc.fake.set_time(T0_NS + 500 * MS)
    samples = mod.nvmlDeviceGetProcessUtilization(h, 0)
    assert isinstance(samples[0], pynvml.c_nvmlProcessUtilizationSample_t)
    assert samples[0].timeStamp == (T0_NS + 1_000_000_000 // 6) // 1000  # µs since the epoch
    vtype, util_samples = mod.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert vtype == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT and util_samples[0].sampleValue.uiVal == 98
    energy = mod.nvmlDeviceGetTotalEnergyConsumption(h)
    assert energy == pytest.approx(640 * 500, rel=0.05)  # mJ after 0.5 s at 640 W
    fv = mod.nvmlDeviceGetFieldValues(h, [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF)])
    assert fv[0].nvmlReturn == pynvml.NVML_SUCCESS
    assert fv[0].value.ullVal == pytest.approx(120e9 * 0.5 / 1024, rel=0.05)  # KiB
    with pytest.raises(pynvml.NVMLError_Timeout):
        mod.nvmlEventSetWait_v2(mod.nvmlEventSetCreate(), 0)
    with pytest.raises(NotImplementedError):
        mod.nvmlDeviceGetBoardId(h)


def test_fake_refuses_every_state_changing_function():
    sc = make_scenario("a100_nvlink")
    mod = sc.nvml
    mod.nvmlInit()
    h = mod.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(AssertionError, match="never change GPU state"):
        mod.nvmlDeviceSetPowerManagementLimit(h, 250_000)
    with pytest.raises(AssertionError):
        mod.nvmlDeviceResetGpuLockedClocks(h)
    assert sc.fake.state_changing_calls == ["nvmlDeviceSetPowerManagementLimit", "nvmlDeviceResetGpuLockedClocks"]
    setters = [n for n, v in vars(pynvml).items() if inspect.isfunction(v) and STATE_CHANGING.match(n)]
    assert "nvmlDeviceSetPersistenceMode" in setters and "nvmlGpmSetStreamingEnabled" in setters
    assert "nvmlEventSetCreate" not in setters and "nvmlSystemGetTopologyGpuSet" not in setters
    for name in setters:
        with pytest.raises(AssertionError):
            getattr(mod, name)()


def test_the_sampler_code_names_no_state_changing_function():
    """No NVML name in collectors/gpu/ is a setter, reset or clear."""
    used = set()
    for path in GPU_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.update(re.findall(r"\bnvml[A-Z]\w+", node.value))
            elif isinstance(node, ast.Attribute) and node.attr.startswith("nvml"):
                used.add(node.attr)
    assert "nvmlDeviceGetFieldValues" in used
    assert sorted(n for n in used if STATE_CHANGING.match(n)) == []
    with pytest.raises(RuntimeError, match="never changes GPU state"):
        NvmlQuery(make_scenario("a100_nvlink").nvml).call("nvmlDeviceSetApplicationsClocks", None, 1, 1)


def test_failures_are_classified_once():
    q = NvmlQuery(make_scenario("a100_nvlink").nvml, driver="470.82.01", binding="13.615.71")
    cases = {pynvml.NVML_ERROR_NOT_SUPPORTED: "unsupported", pynvml.NVML_ERROR_NO_PERMISSION: "unsupported",
             pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "unsupported", pynvml.NVML_ERROR_GPU_IS_LOST: "lost",
             pynvml.NVML_ERROR_UNKNOWN: "lost", pynvml.NVML_ERROR_NOT_FOUND: "empty",
             pynvml.NVML_ERROR_TIMEOUT: "empty", pynvml.NVML_SUCCESS: "empty",
             pynvml.NVML_ERROR_INSUFFICIENT_SIZE: "transient"}
    for code, kind in cases.items():
        f = q._classify("nvmlDeviceGetX", pynvml.NVMLError(code))
        assert f.kind == kind and f.func == "nvmlDeviceGetX", (code, f.kind)
    f = q._classify("nvmlGpmSampleGet", pynvml.NVMLError_FunctionNotFound())
    assert f.reason == ("nvmlGpmSampleGet: Function Not Found: driver 470.82.01 is older than "
                        "nvidia-ml-py 13.615.71 (NVMLError_FunctionNotFound)")
    f = q._classify("nvmlDeviceGetComputeRunningProcesses", pynvml.NVMLLibraryMismatchError("x"))
    assert f.kind == "unsupported" and "older than" in f.reason
    bug = ValueError("not an NVML error")
    assert q._classify("nvmlDeviceGetX", bug) is bug  # a bug surfaces, it is not swallowed


def test_rows_frame_drops_unknown_and_keeps_schema():
    rows = Rows(Names(), Names())
    rows.add("gpu_power", "GPU 0", 10, 20, 300.0)
    rows.add("process_gpu_mem_used", "GPU 0", 15, 15, float("nan"))  # usedGpuMemory not available
    rows.add("gpu_power", "GPU 1", 30, 20, 1.0)  # never an interval with end < start
    df = rows.frame()
    assert list(df["metric"]) == ["gpu_power", "gpu_power"] and list(df["t_start_ns"]) == [10, 20]
    assert str(df["metric"].dtype) == "category" and df["t_end_ns"].dtype == np.int64
    assert list(df["metric"].cat.categories) == ["gpu_power", "process_gpu_mem_used"]
