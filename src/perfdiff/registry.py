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
