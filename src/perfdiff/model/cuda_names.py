"""CUDA names as the profilers spell them: CUPTI copy and memory kinds, API version suffixes.

Shared by the importers (nsys, Kineto) and the collectors' CUPTI reader, so one kernel or
memcpy gets one name whatever recorded it.
"""
from __future__ import annotations

import re

__all__ = ["COLLECTIVE_KERNEL", "HIP_CALLS", "LAUNCH_CALLS", "MATCHED", "hip_counterparts", "MEMCPY_KINDS", "MEM_KINDS", "SYNC_CALLS", "is_launch_call", "is_sync_call",
           "is_collective_kernel", "memcpy_label", "strip_api_version"]

# CUPTI copy kinds and memory kinds, as Kineto names them in "Memcpy HtoD (Pinned -> Device)"
# (nsys ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND hold the same ids; schema 2.9 lacks them).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD (UVM)", 12: "DtoH (UVM)",
                13: "DtoD (UVM)"}
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}

_API_VERSION = re.compile(r"_v\d+$")

# A collective communication kernel's name, under every library's naming: NCCL before 2.19
# (`ncclKernel_AllReduce_RING_LL_Sum_float`), NCCL 2.19 on (`ncclDevKernel_SendRecv`,
# `ncclDevKernel_AllGather_RING_LL`), RCCL (`ncclDevKernel_Generic_4`, older
# `ncclKernel_…`, `rcclKernel_…`) and RCCL's MSCCL executor (`mscclKernel_Sum_bf16_LL128`);
# Kineto prefixes some with `void `.  The one rule the importers (process groups), the op
# categories, the verdict and the straggler analysis share: a name it misses is silently no
# collective, and a straggler analysis that finds none says nothing.
COLLECTIVE_KERNEL = r"^(?:void )?(?:nccl|rccl|msccl)(?:Dev)?Kernel"
_COLLECTIVE = re.compile(COLLECTIVE_KERNEL)


def is_collective_kernel(name: str) -> bool:
    """`name` is an NCCL / RCCL / MSCCL collective kernel's (COLLECTIVE_KERNEL)."""
    return _COLLECTIVE.match(name) is not None


def strip_api_version(name: str) -> str:
    """`cudaLaunchKernel_v7000` → `cudaLaunchKernel` (nsys suffixes the API version)."""
    return _API_VERSION.sub("", name)


def memcpy_label(copy_kind: int, src_kind: int | None, dst_kind: int | None) -> str:
    """Kineto's memcpy name for CUPTI kinds, e.g. ``Memcpy HtoD (Pinned -> Device)``."""
    kind = MEMCPY_KINDS.get(int(copy_kind), f"kind {int(copy_kind)}")
    if src_kind is None or dst_kind is None or src_kind < 0 or dst_kind < 0:
        return f"Memcpy {kind}"
    src = MEM_KINDS.get(int(src_kind), f"kind {int(src_kind)}")
    dst = MEM_KINDS.get(int(dst_kind), f"kind {int(dst_kind)}")
    return f"Memcpy {kind} ({src} -> {dst})"


# Host calls that launch GPU work, as CUDA (runtime and driver), HIP and graphs name them.
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaLaunchHostFunc", "cudaGraphLaunch",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch",
    "hipLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipExtLaunchKernel",
    "hipGraphLaunch",
})
# Host calls that make the host (or a stream) wait for GPU work: explicit synchronisation,
# the blocking copies (cudaMemcpy without Async returns when the copy is done), and the
# PyTorch operators that read a device value on the host (`.item()`, `if tensor:`).  Not
# queries that return at once (cudaEventQuery, cudaStreamQuery, cudaStreamIsCapturing).
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaStreamWaitEvent", "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol", "cudaMemset",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
    "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipStreamWaitEvent", "hipMemcpy",
    "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero",
})


MATCHED = " ⇄ "  # between a call's names in two runs, matched as one function (perfdiff.analyze.align)


def is_launch_call(name: str) -> bool:
    """`name` is a host call that launches GPU work (cudaLaunchKernel_v7000 included; a CUDA
    call matched with its HIP counterpart, "cudaLaunchKernel ⇄ hipLaunchKernel", too)."""
    return any(strip_api_version(n) in LAUNCH_CALLS for n in name.split(MATCHED))


def is_sync_call(name: str) -> bool:
    """`name` is a host call or PyTorch operator that waits for the GPU (a synchronisation point;
    a CUDA call matched with its HIP counterpart too)."""
    return any(strip_api_version(n) in SYNC_CALLS for n in name.split(MATCHED))


# The HIP runtime's counterparts of CUDA runtime and driver calls, in order of preference: two
# runs on GPUs of different vendors match these call for call (perfdiff.analyze.align).  A
# CUDA name not listed matches its HIP spelling (cudaX ↔ hipX, cuX ↔ hipX).
HIP_CALLS: dict[str, tuple[str, ...]] = {
    "cudaLaunchKernel": ("hipLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel"),
    "cuLaunchKernel": ("hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipLaunchKernel"),
    "cudaLaunchKernelExC": ("hipLaunchKernelExC", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                            "hipExtModuleLaunchKernel"),
    "cuLaunchKernelEx": ("hipModuleLaunchKernelEx", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel"),
    "cudaLaunchCooperativeKernel": ("hipLaunchCooperativeKernel",),
    "cudaGraphLaunch": ("hipGraphLaunch",),
    "cudaMemcpyAsync": ("hipMemcpyAsync", "hipMemcpyWithStream"),
    "cudaMemcpy": ("hipMemcpy",),
    "cudaMemsetAsync": ("hipMemsetAsync",),
    "cudaMemset": ("hipMemset",),
    "cudaStreamSynchronize": ("hipStreamSynchronize",),
    "cudaDeviceSynchronize": ("hipDeviceSynchronize",),
    "cudaEventSynchronize": ("hipEventSynchronize",),
    "cudaStreamWaitEvent": ("hipStreamWaitEvent",),
    "cudaEventRecord": ("hipEventRecord", "hipEventRecordWithFlags"),
    "cudaEventQuery": ("hipEventQuery",),
    "cudaMalloc": ("hipMalloc",),
    "cudaFree": ("hipFree",),
    "cudaMallocAsync": ("hipMallocAsync",),
    "cudaFreeAsync": ("hipFreeAsync",),
    "cudaHostAlloc": ("hipHostMalloc", "hipHostAlloc"),
    "cudaMallocHost": ("hipHostMalloc",),
    "cudaFreeHost": ("hipHostFree", "hipFreeHost"),
    "cudaGetDeviceProperties": ("hipGetDeviceProperties", "hipGetDevicePropertiesR0600"),
    "cudaStreamIsCapturing": ("hipStreamIsCapturing",),
    "cudaStreamGetCaptureInfo": ("hipStreamGetCaptureInfo",),
}


def hip_counterparts(name: str) -> tuple[str, ...]:
    """The HIP calls that do what CUDA call `name` does, preferred first (HIP_CALLS, else its
    HIP spelling: cudaX → hipX, cuX → hipX); () for a name that is no CUDA call."""
    name = strip_api_version(name)
    if name in HIP_CALLS:
        return HIP_CALLS[name]
    if name.startswith("cuda") and len(name) > 4 and name[4].isupper():
        return ("hip" + name[4:],)
    if name.startswith("cu") and len(name) > 2 and name[2].isupper():
        return ("hip" + name[2:],)
    return ()
