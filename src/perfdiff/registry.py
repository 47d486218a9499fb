"""Metric registry: every sample metric's unit, kind and the reference name users know.

Samples are stored in base units (bytes, bytes/s, MHz, %, W, °C); the registry is where a
unit lives when it is not in the metric's name.  Unknown metrics (an nsys GPU_METRICS row,
say) still load: they get unit "" and kind "gauge", and the report prints them as-is.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric: `unit` as printed, `kind` gauge (a level) or counter-rate (already a rate)."""

    name: str
    unit: str
    kind: str
    description: str
    source: str = ""


_METRICS = [
    # GPU (NVML; docs/COLLECTORS.md)
    Metric("gpu_usage", "%", "gauge", "GPU utilisation: share of time a kernel ran", "nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES)"),
    Metric("process_gpu_usage", "%", "gauge", "GPU utilisation by the target and its children", "nvmlDeviceGetProcessUtilization.smUtil"),
    Metric("gpu_sm_util", "%", "gauge", "SM activity (GPM)", "GPM SM_UTIL"),
    Metric("gpu_sm_occupancy", "%", "gauge", "SM occupancy (GPM)", "GPM SM_OCCUPANCY"),
    Metric("gpu_frequency", "MHz", "gauge", "graphics clock", "nvmlDeviceGetClockInfo(GRAPHICS)"),
    Metric("gpu_sm_frequency", "MHz", "gauge", "SM clock", "nvmlDeviceGetClockInfo(SM)"),
    Metric("gpu_mem_frequency", "MHz", "gauge", "memory clock", "nvmlDeviceGetClockInfo(MEM)"),
    Metric("gpu_mem_used", "bytes", "gauge", "device memory used", "nvmlDeviceGetMemoryInfo.used"),
    Metric("gpu_mem_bw_util", "%", "gauge", "memory controller utilisation", "nvmlDeviceGetSamples(MEMORY_UTILIZATION_SAMPLES)"),
    Metric("gpu_pcie_transmit", "B/s", "gauge", "PCIe transmit rate", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"),
    Metric("gpu_pcie_receive", "B/s", "gauge", "PCIe receive rate", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"),
    Metric("gpu_link_transmit", "B/s", "gauge", "NVLink transmit rate", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"),
    Metric("gpu_link_receive", "B/s", "gauge", "NVLink receive rate", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"),
    Metric("gpu_power", "W", "gauge", "board power", "nvmlDeviceGetTotalEnergyConsumption (rate)"),
    Metric("gpu_temperature", "°C", "gauge", "GPU temperature", "nvmlDeviceGetTemperature"),
    Metric("gpu_throttle_power", "% of window", "gauge", "clocks capped by power", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
    Metric("gpu_throttle_thermal", "% of window", "gauge", "clocks capped by temperature", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
    Metric("other_process_gpu_usage", "%", "gauge", "GPU utilisation by other processes on the target's GPU", "nvmlDeviceGetProcessUtilization.smUtil"),
    Metric("process_gpu_mem_used", "bytes", "gauge", "GPU memory held by the target and its children", "nvmlDeviceGetComputeRunningProcesses.usedGpuMemory"),
    Metric("other_process_gpu_mem_used", "bytes", "gauge", "GPU memory held by other processes on the target's GPU", "nvmlDeviceGetComputeRunningProcesses.usedGpuMemory"),
    Metric("gpu_power_limit", "W", "gauge", "enforced power limit", "nvmlDeviceGetEnforcedPowerLimit"),
    Metric("gpu_tensor_util", "%", "gauge", "share of time SMs ran tensor instructions (GPM)", "GPM ANY_TENSOR_UTIL"),
    Metric("gpu_dram_bw_util", "%", "gauge", "DRAM bandwidth used vs the maximum (GPM)", "GPM DRAM_BW_UTIL"),
    Metric("gpu_throttle_hw_thermal", "% of window", "gauge", "clocks cut by hardware thermal slowdown", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
    Metric("gpu_throttle_power_brake", "% of window", "gauge", "clocks cut by the external power brake", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"),
    Metric("gpu_throttle_sync_boost", "% of window", "gauge", "clocks held to the sync-boost group", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
    Metric("gpu_throttle_hw_slowdown", "% of window", "gauge", "hardware slowdown active (point readings)", "nvmlDeviceGetCurrentClocksEventReasons 0x8"),
    Metric("gpu_throttle_app_clocks", "% of window", "gauge", "clocks held at the application setting (point readings)", "nvmlDeviceGetCurrentClocksEventReasons 0x2"),
    # Host (/proc and /sys; docs/COLLECTORS.md)
    Metric("cpu_frequency", "% of max", "gauge", "CPU clock as a share of its maximum, mean over the target's CPUs", "/sys/devices/system/cpu/cpu*/cpufreq"),
    Metric("cpu_frequency_mhz", "MHz", "gauge", "CPU clock, mean over the target's CPUs", "/sys/devices/system/cpu/cpu*/cpufreq"),
    Metric("host_cpu_usage", "%", "gauge", "whole-host CPU utilisation", "/proc/stat"),
    Metric("cgroup_cpu_throttled", "% of periods", "gauge", "CFS periods in which the target's cgroup was throttled (its CPU quota)", "cgroup cpu.stat nr_throttled / nr_periods"),
    Metric("cgroup_cpu_throttled_time", "ms/s", "gauge", "time the target's cgroup was throttled, per second", "cgroup cpu.stat throttled_usec (v2) / throttled_time (v1)"),
    Metric("cgroup_cpu_quota", "CPUs", "gauge", "the target cgroup's CPU limit", "cgroup cpu.max (v2) / cpu.cfs_quota_us ÷ cpu.cfs_period_us (v1)"),
    # Memory pressure and stalls (collectors/host/pressure.py; docs/COLLECTORS.md)
    *(Metric(f"host_pressure_{r}_{k}", "% of time", "gauge",
             f"host-wide share of time {'some' if k == 'some' else 'all'} non-idle tasks stalled on {r}",
             f"/proc/pressure/{r} {k} total= (µs)") for r, k in (("cpu", "some"), ("io", "some"), ("io", "full"),
                                                                  ("memory", "some"), ("memory", "full"))),
    *(Metric(f"cgroup_pressure_{r}_{k}", "% of time", "gauge",
             f"share of time {'some' if k == 'some' else 'all'} of the target cgroup's tasks stalled on {r}",
             f"cgroup v2 {r}.pressure {k} total= (µs)") for r in ("cpu", "io", "memory") for k in ("some", "full")),
    Metric("cgroup_mem_events_high", "1/s", "gauge", "times the target cgroup went over memory.high (reclaim, throttling)", "cgroup v2 memory.events high"),
    Metric("cgroup_mem_events_max", "1/s", "gauge", "times the target cgroup hit its memory limit", "cgroup v2 memory.events max / v1 memory.failcnt"),
    Metric("cgroup_mem_events_oom", "1/s", "gauge", "times the target cgroup's memory limit led to an OOM", "cgroup v2 memory.events oom"),
    Metric("cgroup_mem_events_oom_kill", "1/s", "gauge", "processes of the target cgroup killed by the OOM killer", "cgroup v2 memory.events oom_kill / v1 memory.oom_control oom_kill"),
    Metric("cgroup_mem_under_oom", "% of readings", "gauge", "the target cgroup was under OOM (tasks held)", "cgroup v1 memory.oom_control under_oom"),
    Metric("cgroup_mem_current", "bytes", "gauge", "memory charged to the target's cgroup", "cgroup v2 memory.current / v1 memory.usage_in_bytes"),
    Metric("cgroup_swap_current", "bytes", "gauge", "swap used by the target's cgroup", "cgroup v2 memory.swap.current / v1 memory.memsw.usage_in_bytes − usage_in_bytes"),
    Metric("cgroup_mem_max", "bytes", "gauge", "the target cgroup's memory limit", "cgroup v2 memory.max / v1 memory.limit_in_bytes"),
    Metric("cgroup_mem_high", "bytes", "gauge", "the target cgroup's memory throttling threshold", "cgroup v2 memory.high"),
    Metric("host_swap_in", "B/s", "gauge", "host-wide swap-in rate", "/proc/vmstat pswpin (pages)"),
    Metric("host_swap_out", "B/s", "gauge", "host-wide swap-out rate", "/proc/vmstat pswpout (pages)"),
    Metric("process_major_faults", "1/s", "gauge", "major page faults of the target and its children", "/proc/PID/stat majflt"),
    Metric("process_cpu_usage", "% of one core", "gauge", "CPU used by the target and its children", "/proc/PID/stat"),
    Metric("host_mem_used", "bytes", "gauge", "host memory in use", "/proc/meminfo"),
    Metric("process_rss", "bytes", "gauge", "resident memory of the target and its children", "/proc/PID/status"),
    Metric("context_switches", "1/s", "gauge", "context switches of the target's threads", "/proc/PID/task/*/status"),
    Metric("disk_usage", "%", "gauge", "disk busy time", "/proc/diskstats"),
    Metric("disk_read", "B/s", "gauge", "disk read rate", "/proc/diskstats"),
    Metric("disk_write", "B/s", "gauge", "disk write rate", "/proc/diskstats"),
    # Framework steps (the agent's adapters; one sample per step, its interval the step's)
    Metric("step_requests", "requests", "gauge", "requests the engine step carried (scheduled)", "framework scheduler output"),
    Metric("step_tokens", "tokens", "gauge", "tokens the engine step computed (prefill + decode)", "framework scheduler output"),
    Metric("step_prefill_tokens", "tokens", "gauge", "prompt (prefill) tokens the step computed", "framework scheduler output"),
    Metric("step_decode_tokens", "tokens", "gauge", "decode tokens the step computed", "framework scheduler output"),
]

METRICS: dict[str, Metric] = {m.name: m for m in _METRICS}


def metric_info(name: str) -> Metric:
    """The registry entry of `name`, or a unit-less gauge for a metric the registry lacks."""
    found = METRICS.get(name)
    if found is not None:
        return found
    return Metric(name, "", "gauge", "not in the registry")


def metric_unit(name: str) -> str:
    """The unit `name` is stored in ('' when unknown)."""
    return metric_info(name).unit
