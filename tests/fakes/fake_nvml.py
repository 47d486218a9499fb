"""A fake of nvidia-ml-py's `pynvml` for tests without a GPU, driven by a simulated clock.

Everything that is not a call into libnvidia-ml is taken from the real, installed module:
the constants, the ctypes structures (`c_nvmlUtilization_t`, `c_nvmlMemory_v2_t`,
`c_nvmlProcessUtilizationSample_t`, `c_nvmlFieldValue_t`, `c_nvmlGpmMetricsGet_t`, …), the
`NVMLError_*` classes and `nvmlFriendlyObject`.  The functions perfdiff calls are
re-implemented with pynvml's exact names, signatures and return shapes and NVML's units:
utilisation in %, clocks in MHz, memory in bytes, power in mW, energy in mJ since driver load,
temperatures in °C, NVLink throughput counters in KiB, PCIe byte counters in bytes, clock-event
reason counters in ns, buffered-sample timestamps in µs since the epoch, ECC counts.

Behaviours copied from pynvml.py (nvidia-ml-py 13.615): a function whose symbol the driver
lacks raises NVMLError_FunctionNotFound; the unversioned process-list wrappers turn that into
NVMLLibraryMismatchError (`throwOnVersionMismatch`); process lists are nvmlFriendlyObjects with
`usedGpuMemory` None when NVML says "not available"; nvmlDeviceGetSamples returns
(valueType, [c_nvmlSample_t]) and, like nvmlDeviceGetProcessUtilization, raises NotFound when
no sample is newer than the timestamp passed; nvmlDeviceGetFieldValues fills each value's own
`nvmlReturn` and µs `timestamp`; nvmlEventSetWait_v2 raises NVMLError_Timeout when nothing is
pending.  Where NVML's behaviour is not documented the fake makes a choice and says so.

Any function that changes GPU state (nvmlDeviceSet*, *Reset*, *Clear*, …) raises
AssertionError and is recorded in `state_changing_calls`; any other function the fake does not
implement raises NotImplementedError, so a gap in the fake is loud.  `calls` counts every call,
`blocking_waits` counts event waits with a timeout above 0.
"""
from __future__ import annotations

import bisect
import ctypes
import dataclasses
import inspect
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pynvml as _real

T0_NS = 1_700_000_000_000_000_000  # the simulated clock's start (CLOCK_REALTIME ns)
SAMPLE_PERIOD_NS = 1_000_000_000 // 6  # the driver's utilisation sample period (1/6 s)
RESERVED_BYTES = 512 * 1024 * 1024  # device memory the driver reserves (nvmlMemory_v2.reserved)
NA_UINT = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId outside MIG

# State-changing functions (the fake's own rule, independent of perfdiff's).
_STATE_CHANGING = re.compile(
    r"^nvml(?!EventSet|SystemEventSet)(?!\w*Get)\w*?"
    r"(Set|Reset|Clear|Modify|Remove|Discover|Create|Destroy|Activate|Update|Force|Freeze|Write)(?=[A-Z_]|$)")
# Pure-Python helpers of pynvml that never reach the library: copied as they are.
_PURE = {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct", "_nvmlCheckReturn",
         "convertStrBytes", "throwOnVersionMismatch"}

# Field ids the fake answers (NVML_FI_*), by capability.
FI_PCIE = (_real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, _real.NVML_FI_DEV_PCIE_COUNT_RX_BYTES)
FI_NVLINK = (_real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
FI_REASON_BIT = {  # cumulative-ns counter → the bitmask bit it counts
    _real.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: _real.nvmlClocksEventReasonSwPowerCap,
    _real.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: _real.nvmlClocksEventReasonSyncBoost,
    _real.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: _real.nvmlClocksEventReasonSwThermalSlowdown,
    _real.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: _real.nvmlClocksEventReasonHwThermalSlowdown,
    _real.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: _real.nvmlClocksEventReasonHwPowerBrakeSlowdown,
}
FI_ECC = (_real.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, _real.NVML_FI_DEV_ECC_DBE_VOL_TOTAL)
GPM_IDS = {  # GPM metric id → attribute of GpuLoad it averages (% of the window)
    _real.NVML_GPM_METRIC_SM_UTIL: "sm_active_pct",
    _real.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy_pct",
    _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_pct",
    _real.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_pct",
}
XID_FALLEN_OFF_BUS = 79


@dataclass(frozen=True)
class FakeProc:
    """A process on a fake GPU as NVML reports it (pid in the driver's namespace)."""

    pid: int
    used_gpu_memory: int | None = 0  # bytes; None = NVML_VALUE_NOT_AVAILABLE
    sm_util: int = 0  # % of the driver's sample period with this process's kernels running
    mem_util: int = 0
    kind: str = "compute"  # compute | graphics | mps


@dataclass(frozen=True)
class GpuLoad:
    """What a fake GPU is doing; constant until a Change replaces some of it."""

    gpu_util: int = 0  # % (utilization.gpu); 0 = idle: the sample buffer runs dry
    mem_util: int = 0  # % (utilization.memory)
    sm_clock_mhz: int = 1410  # graphics = SM clock
    mem_clock_mhz: int = 1593
    power_w: float = 60.0
    power_limit_w: float = 400.0  # enforced
    temperature_c: int = 35
    mem_used_bytes: int = 0  # excluding the reserved memory
    pcie_tx_bps: float = 0.0
    pcie_rx_bps: float = 0.0
    nvlink_tx_bps: float = 0.0
    nvlink_rx_bps: float = 0.0
    clock_reasons: int = 0  # nvmlClocksEventReason* bits set now
    sm_active_pct: float = 0.0  # GPM SM_UTIL
    sm_occupancy_pct: float = 0.0  # GPM SM_OCCUPANCY
    tensor_pct: float = 0.0
    dram_bw_pct: float = 0.0
    procs: tuple[FakeProc, ...] = ()


@dataclass
class FakeGpu:
    """A fake GPU: what it is, what it supports, and its load at the start."""

    name: str
    uuid: str
    minor: int
    max_sm_clock_mhz: int
    max_mem_clock_mhz: int
    mem_total_bytes: int
    load: GpuLoad
    gpm: bool = False
    nvlink: bool = False
    pcie_counters: bool = True
    throttle_counters: bool = True
    ecc: bool = True
    pcie_counter_bits: int = 64  # 32: the byte counters are c_uint and wrap (a test knob)
    arch: int = _real.NVML_DEVICE_ARCH_AMPERE
    compute_capability: tuple[int, int] = (8, 0)
    errors: dict[str, int] = field(default_factory=dict)  # function → NVML_ERROR_* on this GPU
    unsupported_fields: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Change:
    """At `at_ns` after the start, GPU `gpu` changes: new load values, lost, an XID, ECC errors."""

    at_ns: int
    gpu: int
    load: dict[str, Any] = field(default_factory=dict)
    lost: bool = False
    xid: int | None = None
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0


@dataclass
class _Runtime:
    """Cumulative counters and sample buffers of one fake GPU."""

    energy_mj: float = 0.0
    pcie_tx: float = 0.0  # bytes
    pcie_rx: float = 0.0
    nvlink_tx_kib: float = 0.0
    nvlink_rx_kib: float = 0.0
    reason_ns: Counter = field(default_factory=Counter)  # bit → ns with that reason active
    gpm_integral: Counter = field(default_factory=Counter)  # GpuLoad attribute → %·ns
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    lost: bool = False
    now_ns: int = 0  # how far this GPU has been simulated
    next_sample_ns: int = 0
    changes: list = field(default_factory=list)  # its Changes, in time order
    ci: int = 0  # the next Change to apply
    util: list = field(default_factory=list)  # (ts_us, gpu %), oldest first
    memutil: list = field(default_factory=list)  # (ts_us, mem %)
    proc: list = field(default_factory=list)  # (ts_us, pid, sm, mem)

RING = 120  # samples the driver keeps per buffer (older ones are dropped)


def _push(ring: list, item: tuple) -> None:
    ring.append(item)
    if len(ring) > 2 * RING:
        del ring[:-RING]


def _newer(ring: list, ts_us: int) -> list:
    """The buffered samples newer than `ts_us` (at most the last RING)."""
    return ring[max(bisect.bisect_right(ring, (ts_us, float("inf"))), len(ring) - RING):]


def _nvml_error(code: int) -> Exception:
    return _real.NVMLError(code)


class FakeNvml:
    """The fake driver.  `module` is what perfdiff receives as `nvml`; `set_time` moves time."""

    def __init__(self, gpus: Iterable[FakeGpu], *, changes: Iterable[Change] = (), driver: str = "570.124.06",
                 nvml_version: str = "12.570.124.06", missing_symbols: Iterable[str] = (),
                 init_error: int | None = None, t0_ns: int = T0_NS, sample_period_ns: int = SAMPLE_PERIOD_NS,
                 sample_clock: str = "realtime", follow_real_time: bool = True):
        self.gpus = list(gpus)
        self.loads = [g.load for g in self.gpus]
        self.driver = driver
        self.nvml_version = nvml_version
        self.missing_symbols = set(missing_symbols)
        self.init_error = init_error
        self.t0_ns = t0_ns
        self.now_ns = t0_ns
        self.period_ns = sample_period_ns
        # "boot": buffered samples stamped in µs since boot, not since the epoch (a test knob).
        self.sample_epoch_ns = t0_ns - 5 * 86_400 * 10**9 if sample_clock == "boot" else 0
        # Between two set_time calls the fake's clock runs on with the monotonic clock, as a
        # driver's counters do while the sampler works through a tick; it stands still until
        # the first set_time.
        self.follow_real_time = follow_real_time
        self._anchor: tuple[int, int] | None = None
        self.calls: Counter = Counter()
        self.state_changing_calls: list[str] = []
        self.blocking_waits = 0
        self.initialized = 0
        ordered = sorted(changes, key=lambda c: c.at_ns)
        self._rt = [_Runtime(now_ns=t0_ns, next_sample_ns=t0_ns + sample_period_ns,
                             changes=[c for c in ordered if c.gpu == i]) for i in range(len(self.gpus))]
        self._handles = [ctypes.cast(ctypes.c_void_p(0x1000 * (i + 1)), _real.c_nvmlDevice_t)
                         for i in range(len(self.gpus))]
        self._by_id = {id(h): i for i, h in enumerate(self._handles)}
        self._by_addr = {0x1000 * (i + 1): i for i in range(len(self.gpus))}
        self._next_addr = 0x7000_0000
        self._events: list[tuple[int, int, int, int]] = []  # (t_ns, gpu, eventType, eventData)
        self._sets: dict[int, dict[int, int]] = {}  # event set address → {gpu: registered mask}
        self._gpm: dict[int, tuple[int, int, dict[str, float]] | None] = {}  # sample → (gpu, t, integrals)
        self._module: ModuleType | None = None

    # ------------------------------------------------------------------ simulated time

    def set_time(self, t_ns: int) -> None:
        """Advance the simulation to `t_ns` (CLOCK_REALTIME ns), applying Changes on the way.

        With `follow_real_time` the clock then keeps running with the monotonic clock until the
        next call; a `t_ns` the running clock has already passed leaves it where it is.  Each GPU
        is brought up to date lazily, when a call touches it.
        """
        now = self._clock()
        if t_ns < now:
            if not self.follow_real_time:
                raise ValueError(f"the fake clock cannot go back ({t_ns} < {now})")
            t_ns = now
        self.now_ns = t_ns
        self._anchor = (t_ns, time.perf_counter_ns())

    def advance(self, dt_ns: int) -> None:
        self.set_time((self.now_ns if self._anchor is None else self._anchor[0]) + dt_ns)

    def _clock(self) -> int:
        if not self.follow_real_time or self._anchor is None:
            return self.now_ns
        return max(self.now_ns, self._anchor[0] + (time.perf_counter_ns() - self._anchor[1]))

    def _sync(self, gpus: Iterable[int] | None = None) -> None:
        """Bring `gpus` (all when None) to the current simulated time."""
        self.now_ns = t = self._clock()
        for i in range(len(self.gpus)) if gpus is None else gpus:
            rt = self._rt[i]
            while rt.ci < len(rt.changes) and self.t0_ns + rt.changes[rt.ci].at_ns <= t:
                ch = rt.changes[rt.ci]
                self._integrate(i, max(rt.now_ns, self.t0_ns + ch.at_ns))
                self._apply(ch)
                rt.ci += 1
            self._integrate(i, t)

    def _integrate(self, i: int, end: int) -> None:
        load, rt = self.loads[i], self._rt[i]
        dt = end - rt.now_ns
        if dt <= 0 or rt.lost:
            return
        while rt.next_sample_ns <= end:
            self._emit_samples(i, rt.next_sample_ns)
            rt.next_sample_ns += self.period_ns
        rt.energy_mj += load.power_w * dt * 1e-6  # W·ns → mJ
        rt.pcie_tx += load.pcie_tx_bps * dt * 1e-9
        rt.pcie_rx += load.pcie_rx_bps * dt * 1e-9
        rt.nvlink_tx_kib += load.nvlink_tx_bps * dt * 1e-9 / 1024
        rt.nvlink_rx_kib += load.nvlink_rx_bps * dt * 1e-9 / 1024
        reasons = load.clock_reasons
        bit = 1
        while bit <= reasons:
            if reasons & bit:
                rt.reason_ns[bit] += dt
            bit <<= 1
        integral = rt.gpm_integral
        for attr in GPM_IDS.values():
            integral[attr] += getattr(load, attr) * dt
        rt.now_ns = end

    def _emit_samples(self, i: int, t_ns: int) -> None:
        load, rt = self.loads[i], self._rt[i]
        ts_us = (t_ns - self.sample_epoch_ns) // 1000
        # Only a busy GPU fills the buffers (an idle one runs dry: polarsignals/gpu-metrics-agent#37).
        if load.gpu_util > 0:
            _push(rt.util, (ts_us, load.gpu_util))
        if load.mem_util > 0:
            _push(rt.memutil, (ts_us, load.mem_util))
        for p in load.procs:
            if p.sm_util > 0 or p.mem_util > 0:
                _push(rt.proc, (ts_us, p.pid, p.sm_util, p.mem_util))

    def _apply(self, ch: Change) -> None:
        t = self.t0_ns + ch.at_ns
        rt = self._rt[ch.gpu]
        if ch.load:
            self.loads[ch.gpu] = dataclasses.replace(self.loads[ch.gpu], **ch.load)
        if ch.xid is not None:
            self._events.append((t, ch.gpu, _real.nvmlEventTypeXidCriticalError, ch.xid))
        rt.ecc_sbe += ch.ecc_corrected
        rt.ecc_dbe += ch.ecc_uncorrected
        if ch.lost:
            rt.lost = True
            self._events.append((t, ch.gpu, _real.nvmlEventTypeXidCriticalError, XID_FALLEN_OFF_BUS))

    # ------------------------------------------------------------------ the module

    @property
    def module(self) -> ModuleType:
        """A module with pynvml's names: real constants/classes/errors, fake functions."""
        if self._module is None:
            mod = ModuleType("pynvml", "fake of nvidia-ml-py's pynvml (tests/fakes/fake_nvml.py)")
            for name, value in vars(_real).items():
                if name.startswith("__"):
                    continue
                if inspect.isfunction(value) and value.__module__ == _real.__name__:
                    if name in _PURE:
                        setattr(mod, name, value)
                    elif hasattr(type(self), name) and name.startswith("nvml"):
                        setattr(mod, name, getattr(self, name))
                    elif _STATE_CHANGING.match(name):
                        setattr(mod, name, self._refuse(name))
                    else:
                        setattr(mod, name, self._missing(name))
                else:
                    setattr(mod, name, value)
            mod.fake = self  # type: ignore[attr-defined]
            self._module = mod
        return self._module

    def implemented(self) -> list[str]:
        """Names of the pynvml functions this fake implements."""
        return sorted(n for n, v in vars(_real).items() if inspect.isfunction(v) and v.__module__ == _real.__name__
                      and n.startswith("nvml") and hasattr(type(self), n))

    def _refuse(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            self.state_changing_calls.append(name)
            raise AssertionError(f"perfdiff must never change GPU state: {name} was called")
        refuse.__name__ = name
        return refuse

    def _missing(self, name: str) -> Any:
        def missing(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(f"fake_nvml does not implement {name}")
        missing.__name__ = name
        return missing

    # ------------------------------------------------------------------ call plumbing

    def _enter(self, name: str, handle: Any = None, symbol: str | None = None) -> int:
        """What every wrapper does first: count, library loaded, symbol present, device alive."""
        self.calls[name] += 1
        if not self.initialized:
            raise _nvml_error(_real.NVML_ERROR_UNINITIALIZED)
        if (symbol or name) in self.missing_symbols:
            raise _nvml_error(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if handle is None:
            return -1
        i = self._gpu_index(handle)
        self._sync((i,))
        if self._rt[i].lost:
            raise _nvml_error(_real.NVML_ERROR_GPU_IS_LOST)
        code = self.gpus[i].errors.get(name)
        if code is not None:
            raise _nvml_error(code)
        return i

    def _gpu_index(self, handle: Any) -> int:
        i = self._by_id.get(id(handle))
        if i is None:
            i = self._by_addr.get(ctypes.cast(handle, ctypes.c_void_p).value)
        if i is None:
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return i

    def _new_pointer(self, ptype: Any) -> Any:
        self._next_addr += 0x100
        return ctypes.cast(ctypes.c_void_p(self._next_addr), ptype)

    def _ts_us(self) -> int:
        return self.now_ns // 1000

    # ------------------------------------------------------------------ system

    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _nvml_error(self.init_error)
        self.initialized += 1
        return None

    def nvmlInitWithFlags(self, flags):
        return self.nvmlInit()

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")
        self.initialized -= 1
        return None

    def nvmlErrorString(self, result):
        return _real.NVMLError._errcode_to_string.get(result, "Unknown Error")

    def nvmlSystemGetDriverVersion(self):
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self):
        self._enter("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount", symbol="nvmlDeviceGetCount_v2")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("nvmlDeviceGetHandleByIndex", symbol="nvmlDeviceGetHandleByIndex_v2")
        if not 0 <= index < len(self.gpus):
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        code = self.gpus[index].errors.get("nvmlDeviceGetHandleByIndex")
        if code is not None:
            raise _nvml_error(code)
        return self._handles[index]

    # ------------------------------------------------------------------ static device facts

    def nvmlDeviceGetUUID(self, handle):
        return self.gpus[self._enter("nvmlDeviceGetUUID", handle)].uuid

    def nvmlDeviceGetName(self, handle):
        return self.gpus[self._enter("nvmlDeviceGetName", handle)].name

    def nvmlDeviceGetMinorNumber(self, handle):
        return self.gpus[self._enter("nvmlDeviceGetMinorNumber", handle)].minor

    def nvmlDeviceGetArchitecture(self, device):
        return self.gpus[self._enter("nvmlDeviceGetArchitecture", device)].arch

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.gpus[self._enter("nvmlDeviceGetCudaComputeCapability", handle)].compute_capability

    def nvmlDeviceGetMaxClockInfo(self, handle, type):  # noqa: A002 - pynvml's parameter name
        g = self.gpus[self._enter("nvmlDeviceGetMaxClockInfo", handle)]
        if type in (_real.NVML_CLOCK_GRAPHICS, _real.NVML_CLOCK_SM):
            return g.max_sm_clock_mhz
        if type == _real.NVML_CLOCK_MEM:
            return g.max_mem_clock_mhz
        raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)

    # ------------------------------------------------------------------ readings

    def nvmlDeviceGetClockInfo(self, handle, type):  # noqa: A002 - pynvml's parameter name
        load = self.loads[self._enter("nvmlDeviceGetClockInfo", handle)]
        if type in (_real.NVML_CLOCK_GRAPHICS, _real.NVML_CLOCK_SM):
            return load.sm_clock_mhz
        if type == _real.NVML_CLOCK_MEM:
            return load.mem_clock_mhz
        raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetUtilizationRates(self, handle):
        load = self.loads[self._enter("nvmlDeviceGetUtilizationRates", handle)]
        return _real.c_nvmlUtilization_t(gpu=load.gpu_util, memory=load.mem_util)

    def nvmlDeviceGetSamples(self, device, sampling_type, timeStamp):  # noqa: N803 - pynvml's name
        rt = self._rt[self._enter("nvmlDeviceGetSamples", device)]
        if sampling_type == _real.NVML_GPU_UTILIZATION_SAMPLES:
            ring = rt.util
        elif sampling_type == _real.NVML_MEMORY_UTILIZATION_SAMPLES:
            ring = rt.memutil
        else:
            raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        new = _newer(ring, timeStamp)
        if not new:
            raise _nvml_error(_real.NVML_ERROR_NOT_FOUND)
        arr = (_real.c_nvmlSample_t * len(new))()
        for k, (ts, v) in enumerate(new):
            arr[k].timeStamp = ts
            arr[k].sampleValue.uiVal = v
        return (_real.NVML_VALUE_TYPE_UNSIGNED_INT, arr[0:len(new)])

    def nvmlDeviceGetProcessUtilization(self, handle, timeStamp):  # noqa: N803 - pynvml's name
        rt = self._rt[self._enter("nvmlDeviceGetProcessUtilization", handle)]
        new = _newer(rt.proc, timeStamp)
        if not new:
            raise _nvml_error(_real.NVML_ERROR_NOT_FOUND)
        arr = (_real.c_nvmlProcessUtilizationSample_t * len(new))()
        for k, (ts, pid, sm, mem) in enumerate(new):
            arr[k].pid, arr[k].timeStamp, arr[k].smUtil, arr[k].memUtil = pid, ts, sm, mem
        return arr[0:len(new)]

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        i = self._enter("nvmlDeviceGetMemoryInfo", handle,
                        symbol="nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
        g, load = self.gpus[i], self.loads[i]
        if not version:
            used = load.mem_used_bytes + RESERVED_BYTES  # v1: used includes the reserved memory
            return _real.c_nvmlMemory_t(total=g.mem_total_bytes, free=g.mem_total_bytes - used, used=used)
        if version != _real.nvmlMemory_v2:
            raise _nvml_error(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem = _real.c_nvmlMemory_v2_t()
        mem.version = version
        mem.total, mem.reserved, mem.used = g.mem_total_bytes, RESERVED_BYTES, load.mem_used_bytes
        mem.free = g.mem_total_bytes - RESERVED_BYTES - load.mem_used_bytes
        return mem

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return int(self._rt[self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)].energy_mj)

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(round(self.loads[self._enter("nvmlDeviceGetPowerUsage", handle)].power_w * 1000))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return int(round(self.loads[self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)].power_limit_w * 1000))

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return int(round(self.loads[self._enter("nvmlDeviceGetPowerManagementLimit", handle)].power_limit_w * 1000))

    def nvmlDeviceGetTemperature(self, handle, sensor):
        load = self.loads[self._enter("nvmlDeviceGetTemperature", handle)]
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return load.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.loads[self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)].clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.loads[self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)].clock_reasons

    def nvmlDeviceGetPcieThroughput(self, device, counter):
        # NVML measures this over ~20 ms and may block that long; the fake only records the call.
        load = self.loads[self._enter("nvmlDeviceGetPcieThroughput", device)]
        bps = load.pcie_tx_bps if counter == _real.NVML_PCIE_UTIL_TX_BYTES else load.pcie_rx_bps
        return int(bps / 1024)  # KB/s

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):  # noqa: N803 - pynvml's names
        i = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        if not self.gpus[i].ecc:
            raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        rt = self._rt[i]
        return rt.ecc_sbe if errorType == _real.NVML_MEMORY_ERROR_TYPE_CORRECTED else rt.ecc_dbe

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):  # noqa: N803 - pynvml's name
        i = self._enter("nvmlDeviceGetFieldValues", handle)
        values = (_real.c_nvmlFieldValue_t * len(fieldIds))()
        for k, fid in enumerate(fieldIds):  # the same unpacking as pynvml
            try:
                (values[k].fieldId, values[k].scopeId) = fid
            except TypeError:
                values[k].fieldId = fid
        g, rt = self.gpus[i], self._rt[i]
        for k in range(len(fieldIds)):
            self._fill_field(g, rt, values[k])
        return values

    def _fill_field(self, g: FakeGpu, rt: _Runtime, fv: Any) -> None:
        fid = fv.fieldId
        fv.timestamp = self._ts_us()
        fv.latencyUsec = 0
        value: int | None = None
        if fid in g.unsupported_fields:
            value = None
        elif fid in FI_PCIE and g.pcie_counters:
            value = int(rt.pcie_tx if fid == FI_PCIE[0] else rt.pcie_rx)
        elif fid in FI_NVLINK and g.nvlink:
            value = int(rt.nvlink_tx_kib if fid == FI_NVLINK[0] else rt.nvlink_rx_kib)
        elif fid in FI_REASON_BIT and g.throttle_counters:
            value = int(rt.reason_ns[FI_REASON_BIT[fid]])
        elif fid in FI_ECC and g.ecc:
            value = rt.ecc_sbe if fid == FI_ECC[0] else rt.ecc_dbe
        if value is None:
            # What a driver returns for a field it does not know is not documented; NotSupported here.
            fv.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
            return
        fv.nvmlReturn = _real.NVML_SUCCESS
        if fid in FI_PCIE and g.pcie_counter_bits == 32:
            fv.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
            fv.value.uiVal = value % (1 << 32)
        else:
            fv.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            fv.value.ullVal = value

    # ------------------------------------------------------------------ processes

    def _procs(self, name: str, handle: Any, kind: str, symbol: str) -> list[Any]:
        load = self.loads[self._enter(name, handle, symbol=symbol)]
        out = []
        for p in load.procs:
            if p.kind != kind:
                continue
            used = _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if p.used_gpu_memory is None else p.used_gpu_memory
            obj = _real.nvmlStructToFriendlyObject(
                _real.c_nvmlProcessInfo_v2_t(p.pid, used, NA_UINT, NA_UINT))
            if obj.usedGpuMemory == _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # as pynvml does
            out.append(obj)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", handle, "compute",
                           "nvmlDeviceGetComputeRunningProcesses_v3")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", handle, "compute",
                           "nvmlDeviceGetComputeRunningProcesses_v2")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._versioned(self.nvmlDeviceGetComputeRunningProcesses_v3, handle,
                               "nvmlDeviceGetComputeRunningProcesses")

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle):
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, "graphics",
                           "nvmlDeviceGetGraphicsRunningProcesses_v3")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle):
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", handle, "graphics",
                           "nvmlDeviceGetGraphicsRunningProcesses_v2")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._versioned(self.nvmlDeviceGetGraphicsRunningProcesses_v3, handle,
                               "nvmlDeviceGetGraphicsRunningProcesses")

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle):
        return self._procs("nvmlDeviceGetMPSComputeRunningProcesses_v3", handle, "mps",
                           "nvmlDeviceGetMPSComputeRunningProcesses_v3")

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle):
        return self._procs("nvmlDeviceGetMPSComputeRunningProcesses_v2", handle, "mps",
                           "nvmlDeviceGetMPSComputeRunningProcesses_v2")

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle):
        return self._versioned(self.nvmlDeviceGetMPSComputeRunningProcesses_v3, handle,
                               "nvmlDeviceGetMPSComputeRunningProcesses")

    @staticmethod
    def _versioned(fn: Any, handle: Any, name: str) -> Any:
        try:  # pynvml's throwOnVersionMismatch
            return fn(handle)
        except _real.NVMLError_FunctionNotFound:
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version. "
                "Either use matching pyNVML and NVML lib versions or use a versioned function such as "
                + name + "_v2") from None

    # ------------------------------------------------------------------ GPM

    def nvmlGpmQueryDeviceSupport(self, device):
        i = self._enter("nvmlGpmQueryDeviceSupport", device)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self.gpus[i].gpm)
        return support

    def nvmlGpmSampleAlloc(self):
        self._enter("nvmlGpmSampleAlloc")
        sample = self._new_pointer(_real.c_nvmlGpmSample_t)
        self._gpm[ctypes.cast(sample, ctypes.c_void_p).value] = None
        return sample

    def nvmlGpmSampleFree(self, gpmSample):  # noqa: N803 - pynvml's name
        self._enter("nvmlGpmSampleFree")
        if self._gpm.pop(ctypes.cast(gpmSample, ctypes.c_void_p).value, "absent") == "absent":
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return

    def nvmlGpmSampleGet(self, device, gpmSample):  # noqa: N803 - pynvml's name
        i = self._enter("nvmlGpmSampleGet", device)
        if not self.gpus[i].gpm:
            raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        addr = ctypes.cast(gpmSample, ctypes.c_void_p).value
        if addr not in self._gpm:
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        self._gpm[addr] = (i, self.now_ns, dict(self._rt[i].gpm_integral))
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet):  # noqa: N803 - pynvml's name
        self._enter("nvmlGpmMetricsGet")
        if metricsGet.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _nvml_error(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        s1 = self._gpm.get(ctypes.cast(metricsGet.sample1, ctypes.c_void_p).value)
        s2 = self._gpm.get(ctypes.cast(metricsGet.sample2, ctypes.c_void_p).value)
        if s1 is None or s2 is None or s1[0] != s2[0] or s2[1] <= s1[1]:
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        if self._rt[s1[0]].lost:
            raise _nvml_error(_real.NVML_ERROR_GPU_IS_LOST)
        dt = s2[1] - s1[1]
        for k in range(metricsGet.numMetrics):
            m = metricsGet.metrics[k]
            attr = GPM_IDS.get(m.metricId)
            if attr is None:
                m.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                continue
            m.nvmlReturn = _real.NVML_SUCCESS
            m.value = (s2[2].get(attr, 0.0) - s1[2].get(attr, 0.0)) / dt
        return metricsGet

    # ------------------------------------------------------------------ events

    def nvmlEventSetCreate(self):
        self._enter("nvmlEventSetCreate")
        event_set = self._new_pointer(_real.c_nvmlEventSet_t)
        self._sets[ctypes.cast(event_set, ctypes.c_void_p).value] = {}
        return event_set

    def nvmlEventSetFree(self, eventSet):  # noqa: N803 - pynvml's name
        self._enter("nvmlEventSetFree")
        self._sets.pop(ctypes.cast(eventSet, ctypes.c_void_p).value, None)
        return None

    def _supported_events(self, i: int) -> int:
        mask = _real.nvmlEventTypeXidCriticalError | _real.nvmlEventTypePState | _real.nvmlEventTypeClock
        if self.gpus[i].ecc:
            mask |= _real.nvmlEventTypeSingleBitEccError | _real.nvmlEventTypeDoubleBitEccError
        return mask

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return self._supported_events(self._enter("nvmlDeviceGetSupportedEventTypes", handle))

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):  # noqa: N803 - pynvml's names
        i = self._enter("nvmlDeviceRegisterEvents", handle)
        if eventTypes & ~self._supported_events(i):
            raise _nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        regs = self._sets.get(ctypes.cast(eventSet, ctypes.c_void_p).value)
        if regs is None:
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        regs[i] = regs.get(i, 0) | eventTypes
        return None

    def nvmlEventSetWait_v2(self, eventSet, timeoutms):  # noqa: N803 - pynvml's name
        self._enter("nvmlEventSetWait_v2")
        self._sync()
        regs = self._sets.get(ctypes.cast(eventSet, ctypes.c_void_p).value)
        if regs is None:
            raise _nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        for k, (t, gpu, etype, edata) in enumerate(self._events):
            if t <= self.now_ns and regs.get(gpu, 0) & etype:
                del self._events[k]
                data = _real.c_nvmlEventData_t()
                data.device = self._handles[gpu]
                data.eventType, data.eventData = etype, edata
                data.gpuInstanceId = data.computeInstanceId = NA_UINT
                return data
        if timeoutms > 0:
            self.blocking_waits += 1  # the real call would block this long
        raise _nvml_error(_real.NVML_ERROR_TIMEOUT)

    def nvmlEventSetWait(self, eventSet, timeoutms):  # noqa: N803 - pynvml's name
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)


# ---------------------------------------------------------------------------- scenarios

GIB = 1024 ** 3
TARGET_PID = 4242
OTHER_PID = 5555
HOST_PID = 31337  # the target as NVML sees it from the host in the pid-namespace scenario
CONTAINER_PID = 42  # the same process inside its container


def a100(index: int, load: GpuLoad, **kw: Any) -> FakeGpu:
    """An A100-SXM4-80GB: NVLink, no GPM (Ampere)."""
    return FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid=f"GPU-a100a100-0000-4000-8000-{index:012d}", minor=index,
                   max_sm_clock_mhz=1410, max_mem_clock_mhz=1593, mem_total_bytes=80 * GIB, load=load,
                   gpm=False, nvlink=True, arch=_real.NVML_DEVICE_ARCH_AMPERE, compute_capability=(8, 0), **kw)


def h100(index: int, load: GpuLoad, **kw: Any) -> FakeGpu:
    """An H100 80GB HBM3 (SXM): NVLink and GPM (Hopper)."""
    return FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-h100h100-0000-4000-8000-{index:012d}", minor=index,
                   max_sm_clock_mhz=1980, max_mem_clock_mhz=2619, mem_total_bytes=80 * GIB, load=load,
                   gpm=True, nvlink=True, arch=_real.NVML_DEVICE_ARCH_HOPPER, compute_capability=(9, 0), **kw)


def l4(index: int, load: GpuLoad, **kw: Any) -> FakeGpu:
    """An L4: a PCIe card without NVLink or GPM (Ada)."""
    return FakeGpu(name="NVIDIA L4", uuid=f"GPU-0000l400-0000-4000-8000-{index:012d}", minor=index,
                   max_sm_clock_mhz=2040, max_mem_clock_mhz=6251, mem_total_bytes=24 * GIB, load=load,
                   gpm=False, nvlink=False, arch=_real.NVML_DEVICE_ARCH_ADA, compute_capability=(8, 9), **kw)


def busy_a100(pid: int = TARGET_PID, sm: int = 90) -> GpuLoad:
    return GpuLoad(gpu_util=95, mem_util=40, sm_clock_mhz=1410, mem_clock_mhz=1593, power_w=310.0,
                   power_limit_w=400.0, temperature_c=62, mem_used_bytes=60 * GIB, pcie_tx_bps=2e9,
                   pcie_rx_bps=6e9, nvlink_tx_bps=40e9, nvlink_rx_bps=38e9,
                   procs=(FakeProc(pid, 60 * GIB, sm, 35),))


def busy_h100(pid: int = TARGET_PID) -> GpuLoad:
    return GpuLoad(gpu_util=98, mem_util=52, sm_clock_mhz=1980, mem_clock_mhz=2619, power_w=640.0,
                   power_limit_w=700.0, temperature_c=68, mem_used_bytes=70 * GIB, pcie_tx_bps=3e9,
                   pcie_rx_bps=9e9, nvlink_tx_bps=120e9, nvlink_rx_bps=110e9, sm_active_pct=72.5,
                   sm_occupancy_pct=38.0, tensor_pct=55.0, dram_bw_pct=47.5,
                   procs=(FakeProc(pid, 70 * GIB, 92, 50),))


def busy_l4(pid: int = TARGET_PID) -> GpuLoad:
    return GpuLoad(gpu_util=88, mem_util=30, sm_clock_mhz=2040, mem_clock_mhz=6251, power_w=70.0,
                   power_limit_w=72.0, temperature_c=58, mem_used_bytes=18 * GIB, pcie_tx_bps=1e9,
                   pcie_rx_bps=4e9, procs=(FakeProc(pid, 18 * GIB, 85, 28),))


def idle(power_w: float = 60.0, limit_w: float = 400.0) -> GpuLoad:
    return GpuLoad(power_w=power_w, power_limit_w=limit_w, sm_clock_mhz=210, mem_clock_mhz=1593,
                   clock_reasons=_real.nvmlClocksEventReasonGpuIdle)


@dataclass(frozen=True)
class ProcEntry:
    """A /proc/PID entry of the scenario's process tree."""

    nspid: tuple[int, ...]  # NSpid: outermost namespace first
    comm: str = "python3"
    fds: tuple[str, ...] = ()  # targets of /proc/PID/fd links


@dataclass
class Scenario:
    """A named fake-GPU situation: the fake driver, the target's pids and its /proc tree."""

    name: str
    description: str
    fake: FakeNvml
    target_pids: set[int]
    proc: dict[int, ProcEntry]
    duration_ns: int
    gpus: list[int] | None = None

    @property
    def nvml(self) -> ModuleType:
        return self.fake.module

    def write_proc(self, root: Any) -> str:
        """Write the scenario's /proc tree under `root` and return it as a proc_root."""
        return write_proc_tree(root, self.proc)


def write_proc_tree(root: Any, proc: dict[int, ProcEntry]) -> str:
    """Create /proc-like entries (status with NSpid, comm, fd links) under `root`."""
    import os
    from pathlib import Path

    base = Path(root)
    for pid, e in proc.items():
        d = base / str(pid)
        (d / "fd").mkdir(parents=True, exist_ok=True)
        (d / "status").write_text(f"Name:\t{e.comm}\nPid:\t{e.nspid[0]}\nNSpid:\t" +
                                  "\t".join(map(str, e.nspid)) + "\n", encoding="ascii")
        (d / "comm").write_text(e.comm + "\n", encoding="ascii")
        for k, target in enumerate(e.fds):
            os.symlink(target, d / "fd" / str(k))
    return str(base)


SCENARIOS = {
    "a100_nvlink": "two A100-SXM4 with NVLink, no GPM; the target uses GPU 0 only",
    "h100_gpm": "one H100 with GPM (SM activity, occupancy, tensor and DRAM activity)",
    "pcie_no_nvlink": "an L4 PCIe card: NVLink fields NotSupported, no GPM",
    "one_not_supported": "three A100s; GPU 1 answers NotSupported for energy and power (gpustat-style)",
    "no_permission_process_lists": "process lists answer NoPermission; the target holds /dev/nvidia1 open",
    "gpu_lost": "two H100s; GPU 1 falls off the bus (XID 79, then GpuIsLost) half-way",
    "pid_namespace": "NVML reports the host pid 31337; the target is pid 42 in its container (NSpid)",
    "old_driver": "driver 470 older than the binding: _v3 lists, memory v2, ClocksEventReasons, GPM, "
                  "PCIe byte and throttle counters missing",
    "power_cap": "H100 whose power limit drops 700 → 350 W half-way: SW power cap, SM clock 1980 → 1350 MHz",
    "competing_process": "A100; half-way another process (pid 5555) starts using the same GPU",
    "xid_and_ecc": "A100 with corrected ECC errors, then XID 48 and an uncorrected error",
    "eight_h100": "eight H100s, all used by the target (the benchmark)",
    "no_driver": "nvmlInit fails with DriverNotLoaded",
    "no_library": "nvmlInit fails with LibraryNotFound",
}


def make_scenario(name: str, *, abnormal: bool = True, duration_ns: int = 3_000_000_000,
                  t0_ns: int = T0_NS, changes: Iterable[Change] = (), target_pid: int = TARGET_PID) -> Scenario:
    """Build the named scenario; `abnormal=False` gives its normal twin (no cap, no competitor).

    `changes` adds more Changes (noise for the bundle pairs).  The target is `target_pid`
    ("python3"; a real pid for end-to-end runs) except in pid_namespace.  Mid-run events happen
    at half of `duration_ns` after `t0_ns`.
    """
    half = duration_ns // 2
    pid = target_pid
    extra = list(changes)
    me = {pid: ProcEntry((pid,), "python3", ("/dev/nvidiactl", "/dev/nvidia0"))}
    target = {pid}
    kw: dict[str, Any] = {}
    if name == "a100_nvlink":
        gpus = [a100(0, busy_a100(pid)), a100(1, idle())]
    elif name == "h100_gpm":
        gpus = [h100(0, busy_h100(pid))]
    elif name == "pcie_no_nvlink":
        gpus = [l4(0, busy_l4(pid))]
    elif name == "one_not_supported":
        no_power = {"nvmlDeviceGetTotalEnergyConsumption": _real.NVML_ERROR_NOT_SUPPORTED,
                    "nvmlDeviceGetPowerUsage": _real.NVML_ERROR_NOT_SUPPORTED}
        gpus = [a100(0, busy_a100(pid)), a100(1, busy_a100(pid), errors=no_power), a100(2, busy_a100(pid))]
        me = {pid: ProcEntry((pid,), "python3", tuple(f"/dev/nvidia{i}" for i in range(3)))}
    elif name == "no_permission_process_lists":
        denied = {f: _real.NVML_ERROR_NO_PERMISSION for f in (
            "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2")}
        gpus = [a100(0, idle(), errors=dict(denied)), a100(1, busy_a100(pid), errors=dict(denied))]
        me = {pid: ProcEntry((pid,), "python3", ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"))}
    elif name == "gpu_lost":
        gpus = [h100(0, busy_h100(pid)), h100(1, busy_h100(pid))]
        extra.append(Change(half, 1, lost=True))
        me = {pid: ProcEntry((pid,), "python3", ("/dev/nvidia0", "/dev/nvidia1"))}
    elif name == "pid_namespace":
        gpus = [a100(0, busy_a100(pid=HOST_PID))]
        target = {CONTAINER_PID}
        me = {HOST_PID: ProcEntry((HOST_PID, CONTAINER_PID), "python3")}
    elif name == "old_driver":
        gpus = [a100(0, busy_a100(pid), pcie_counters=False, throttle_counters=False)]
        kw = {"driver": "470.82.01", "nvml_version": "11.470.82.01", "missing_symbols": {
            "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc",
            "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleFree"}}
        extra.append(Change(half, 0, load={"clock_reasons": _real.nvmlClocksEventReasonSwThermalSlowdown,
                                           "sm_clock_mhz": 1275}))
    elif name == "power_cap":
        gpus = [h100(0, busy_h100(pid))]
        if abnormal:
            extra.append(Change(half, 0, load={"power_limit_w": 350.0, "power_w": 348.0, "sm_clock_mhz": 1350,
                                               "clock_reasons": _real.nvmlClocksEventReasonSwPowerCap,
                                               "sm_active_pct": 72.5, "temperature_c": 55}))
    elif name == "competing_process":
        gpus = [a100(0, busy_a100(pid))]
        me = dict(me)
        me[OTHER_PID] = ProcEntry((OTHER_PID,), "gpu_burn")
        if abnormal:
            extra.append(Change(half, 0, load={
                "gpu_util": 100, "mem_used_bytes": 70 * GIB,
                "procs": (FakeProc(pid, 60 * GIB, 50, 20), FakeProc(OTHER_PID, 10 * GIB, 45, 25))}))
    elif name == "xid_and_ecc":
        gpus = [a100(0, busy_a100(pid))]
        extra += [Change(duration_ns // 3, 0, ecc_corrected=3),
                  Change(2 * duration_ns // 3, 0, xid=48, ecc_uncorrected=1)]
    elif name == "eight_h100":
        gpus = [h100(i, busy_h100(pid)) for i in range(8)]
        me = {pid: ProcEntry((pid,), "python3", tuple(f"/dev/nvidia{i}" for i in range(8)))}
    elif name in ("no_driver", "no_library"):
        gpus = []
        kw = {"init_error": _real.NVML_ERROR_DRIVER_NOT_LOADED if name == "no_driver"
              else _real.NVML_ERROR_LIBRARY_NOT_FOUND}
    else:
        raise KeyError(f"unknown fake-GPU scenario {name!r}; known: {', '.join(SCENARIOS)}")
    fake = FakeNvml(gpus, changes=extra, t0_ns=t0_ns, **kw)
    return Scenario(name, SCENARIOS[name], fake, target, me, duration_ns)
