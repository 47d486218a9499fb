"""GPU collection for `perfdiff collect`: an NVML sampler of the target's GPUs.

Imports flow one way, each module importing only modules listed before it: nvml_query (the
one door to NVML), metrics (what is read), pids (which NVML processes are the target's), rows
(one tick's rows), context (what a device read needs from the sampler), device (one GPU),
read (the per-tick readers), sampler (`open_gpu_sampler`, `GpuSampler`).
"""
from __future__ import annotations

from .sampler import NO_DRIVER_LINE, GpuSampler, open_gpu_sampler

__all__ = ["NO_DRIVER_LINE", "GpuSampler", "open_gpu_sampler"]
