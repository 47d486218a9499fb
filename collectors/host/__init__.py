"""The host collector: the target's threads and the machine, sampled from /proc and /sys.

`HostSampler` (sampler) ties together the per-thread reading at every tick (target, over the
thread and process states of taskstate) and the host-wide readings (hostwide); `host_info`
(info) is the manifest's host entry.  Every read goes through `perfdiff.collectors.procfs.ProcFS`.
"""
from perfdiff.collectors.base import MISSING
from perfdiff.collectors.procfs import ProcFS

from .hostwide import (
    HOST_MIN_NS,
    PER_CPU_NS,
    parse_cpu_times,
    parse_cpuinfo_mhz,
    parse_diskstats,
    parse_meminfo,
)
from .info import host_info
from .sampler import HostSampler
from .target import IDLE_POLL_EVERY
from .taskstate import (
    HOST,
    HOST_FUNCTIONS,
    RUNNING,
    TaskStat,
    parse_io,
    parse_schedstat,
    parse_syscall,
    parse_task_stat,
    process_cpu_clock,
)

__all__ = [
    "HOST", "HOST_FUNCTIONS", "HOST_MIN_NS", "IDLE_POLL_EVERY", "MISSING", "PER_CPU_NS", "RUNNING",
    "HostSampler", "ProcFS", "TaskStat", "host_info", "parse_cpu_times", "parse_cpuinfo_mhz",
    "parse_diskstats", "parse_io", "parse_meminfo", "parse_schedstat", "parse_syscall",
    "parse_task_stat", "process_cpu_clock",
]
