"""What the GPU sampler reads, declared as tables (docs/COLLECTORS.md, GPU).

Each row names the registry metric, the NVML call or constant it comes from, and the unit
conversion to the registry's stored unit, with the `nvidia-smi --query-gpu` equivalent where
there is one so a reading can be checked by hand.  Constants are looked up by name in the
NVML module at run time, so a binding that lacks one makes that metric unsupported instead
of failing to import.
"""
from __future__ import annotations

from .nvml_query import UINT_MAX

# Point getters: (metric, function, constant arguments, factor to the stored unit).
POINT_GETTERS: tuple[tuple[str, str, tuple[str, ...], float], ...] = (
    ("gpu_frequency", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_GRAPHICS",), 1.0),  # MHz; clocks.gr
    ("gpu_sm_frequency", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",), 1.0),  # MHz; clocks.sm
    ("gpu_mem_frequency", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",), 1.0),  # MHz; clocks.mem
    ("gpu_temperature", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",), 1.0),  # °C; temperature.gpu
    ("gpu_power_limit", "nvmlDeviceGetEnforcedPowerLimit", (), 1e-3),  # mW → W; enforced.power.limit
)

# Buffered utilisation samples (nvmlDeviceGetSamples): (metric, sampling type, field of
# c_nvmlUtilization_t used when the buffer is unavailable or has run dry).
UTIL_SAMPLES: tuple[tuple[str, str, str], ...] = (
    ("gpu_usage", "NVML_GPU_UTILIZATION_SAMPLES", "gpu"),  # %; utilization.gpu
    ("gpu_mem_bw_util", "NVML_MEMORY_UTILIZATION_SAMPLES", "memory"),  # %; utilization.memory
)

# Cumulative counters read through nvmlDeviceGetFieldValues and turned into rates over
# [previous reading, this reading] using each value's own µs timestamp:
# (metric, field constant, scopeId, factor from the counter's unit to bytes).
RATE_FIELDS: tuple[tuple[str, str, int, float], ...] = (
    ("gpu_pcie_transmit", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, 1.0),  # bytes → B/s
    ("gpu_pcie_receive", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, 1.0),
    # KiB, summed over links; UINT_MAX scope = all links (check on a GPU with NVLink).
    ("gpu_link_transmit", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", UINT_MAX, 1024.0),
    ("gpu_link_receive", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", UINT_MAX, 1024.0),
)

# Clock-event (throttle) reasons: (metric, bitmask constant(s), cumulative-ns field or None).
# With the counter the value is the exact share of each window (%); without it, the bitmask
# of nvmlDeviceGetCurrentClocksEventReasons gives a point reading of 0 or 100 per tick.
THROTTLE_REASONS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("gpu_throttle_power", ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"),
     "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),  # 0x4
    ("gpu_throttle_thermal", ("nvmlClocksEventReasonSwThermalSlowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
     "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),  # 0x20
    ("gpu_throttle_hw_thermal", ("nvmlClocksEventReasonHwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
     "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),  # 0x40
    ("gpu_throttle_power_brake", ("nvmlClocksEventReasonHwPowerBrakeSlowdown",
                                  "nvmlClocksThrottleReasonHwPowerBrakeSlowdown"),
     "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"),  # 0x80
    ("gpu_throttle_sync_boost", ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"),
     "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),  # 0x10
    ("gpu_throttle_hw_slowdown", ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"),
     None),  # 0x8
    ("gpu_throttle_app_clocks", ("nvmlClocksEventReasonApplicationsClocksSetting",
                                 "nvmlClocksThrottleReasonApplicationsClocksSetting"), None),  # 0x2
)
REASON_FUNCS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")

# Volatile ECC totals (since driver load), read with the fields; an increase is an event.
ECC_FIELDS: tuple[tuple[str, str], ...] = (
    ("corrected", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"),
    ("uncorrected", "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"),
)

# GPM metrics (Hopper and newer), each a % over the window between two GPM samples.
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("gpu_sm_util", "NVML_GPM_METRIC_SM_UTIL"),
    ("gpu_sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("gpu_tensor_util", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("gpu_dram_bw_util", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)

# Process lists, newest interface first (pynvml's unversioned wrappers call _v3 only and turn
# FunctionNotFound into NVMLLibraryMismatchError, so the versions are called directly).
PROCESS_LISTS: tuple[tuple[str, ...], ...] = (
    ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
    ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2"),
)
PROCESS_METRICS = ("process_gpu_mem_used", "other_process_gpu_mem_used")
PROCESS_UTIL_METRICS = ("process_gpu_usage", "other_process_gpu_usage")

# Well-known XID codes (NVIDIA's XID catalogue); others are recorded by number only.
XID_MEANING = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
}

# Metrics this sampler writes that src/perfdiff/registry.py did not have when it was written
# (the report lists the Metric(...) lines to add).
NEW_METRICS = (
    "other_process_gpu_usage", "process_gpu_mem_used", "other_process_gpu_mem_used",
    "gpu_power_limit", "gpu_tensor_util", "gpu_dram_bw_util",
    "gpu_throttle_hw_thermal", "gpu_throttle_power_brake", "gpu_throttle_sync_boost",
    "gpu_throttle_hw_slowdown", "gpu_throttle_app_clocks",
)
