"""Test helper: a synthetic nsys export of a two-GPU training job, one process per GPU, as
Nsight Systems exports it (the tables and columns of a real schema 3.17 export, NVIDIA/Fuser's
report1.sqlite in ../shared/data/real: the CREATE TABLE statements below are its own, comments
left out).

Each process (rank r: pid 3000 + r, GPU r) runs `steps` training steps: an NVTX push/pop range
`train_step` (left out with `step_ranges=False`) holding PyTorch's op ranges (`aten::linear`,
`aten::scaled_dot_product_attention`, `aten::gelu` per layer, then `aten::cross_entropy_loss`
and `Optimizer.step#AdamW.step`), each op launching its kernel (cudaLaunchKernel, correlated);
then an NCCL send/receive with the other rank (`ncclDevKernel_SendRecv`, inside NCCL's own
`ncclGroupEnd` range), which ends on both GPUs when the later rank arrives plus the transfer;
then cudaStreamSynchronize.  NCCL's `ncclCommInitRank` range carries the communicator, the
rank and the number of ranks as a JSON payload (as NCCL 2.19+ with NVTX on exports it).

`attention_ns[r]`: rank r's flash_fwd_kernel duration; every kernel varies by ±2 % (seeded).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

__all__ = ["ATTENTION", "SENDRECV", "write_job"]

ATTENTION = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
             "cutlass::bfloat16_t>, false, false, false, false, true, true, false, false>(Flash_fwd_params)")
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#1}>(int, …)")
LOSS = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::LogSoftMaxForwardEpilogue>(…)"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor<float>>(…)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
# Per layer: (op range, kernel, ns); then the step's own ops.
LAYER = (("aten::linear", GEMM, 800_000), ("aten::scaled_dot_product_attention", ATTENTION, None),
         ("aten::linear", GEMM, 800_000), ("aten::gelu", GELU, 200_000))
TAIL = (("aten::cross_entropy_loss", LOSS, 300_000), ("Optimizer.step#AdamW.step", ADAM, 1_000_000))
EMBED = ("aten::embedding", "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
         "unsigned int, 2, 2, -2, true>(…)", 60_000)
TRANSFER_NS = 400_000
COMM_ID = 0x5EED1234
T0_NS = 1_764_000_000_000_000_000  # the session's start, wall clock

# NVIDIA/Fuser report1.sqlite (nsys 2025.1, schema 3.17.1): its CREATE TABLE statements.
SCHEMA = (
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)",
    "CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)",
    "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)",
    "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)",
    "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)",
    "CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
    "isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, "
    "smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, "
    "ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER, "
    "maxIPC INTEGER, maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, "
    "maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER, "
    "maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, "
    "maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, "
    "computeMajor INTEGER, computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
    "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
    "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
    "mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, "
    "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, "
    "blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
    "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
    "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, "
    "graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
    "eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
    "returnValue INTEGER NOT NULL, callchainId INTEGER)",
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
    "domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, "
    "int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT)",
)
_PUSH_POP = 59
_NCCL_DOMAIN = 1


class _Writer:
    """Rows of one export, strings interned."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.kernels: list[tuple] = []
        self.runtime: list[tuple] = []
        self.nvtx: list[tuple] = []
        self.corr = 0

    def sid(self, s: str) -> int:
        return self.strings.setdefault(s, len(self.strings) + 1)

    def range(self, gtid: int, start: int, end: int, text: str, domain: int = 0, payload: dict | None = None) -> None:
        self.nvtx.append((start, end, _PUSH_POP, None, None, None, text, gtid, gtid, None, domain,
                          None, None, None, None, None, None, None,
                          json.dumps(payload) if payload is not None else None, None))

    def step_ops(self, gtid: int, device: int, t: int, ops, attention_ns: int, rng: np.random.Generator,
                 nvtx: bool) -> tuple[int, int]:
        """One step's ops from host time `t`, each an op range (with `nvtx`) launching its
        kernel (±2 %; the attention kernel `attention_ns`) on `device` when the GPU is free;
        returns (the host's position, the GPU's) after the step."""
        gpu = t + 30_000
        for op, kernel, ns in ops:
            dur = int((attention_ns if ns is None else ns) * rng.uniform(0.98, 1.02))
            if nvtx:
                self.range(gtid, t, t + 12_000, op)
            self.launch(gtid, t + 4_000, device, max(gpu, t + 10_000), dur, kernel)
            gpu = max(gpu, t + 10_000) + dur + 2_000
            t += 15_000
        return t, gpu

    def save(self, path: Path, processes: dict[int, str], devices: tuple[int, ...]) -> Path:
        """Write the export at `path`: `processes` pid → name, the GPUs `devices`."""
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        for sql in SCHEMA:
            con.execute(sql)
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                        [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2025.1.1.110"),
                         ("EXPORT_SCHEMA_VERSION", "3.17.1")])
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (T0_NS,))
        con.executemany("INSERT INTO PROCESSES VALUES (?, ?, ?)", [(p << 24, p, n) for p, n in sorted(processes.items())])
        gpu_row = "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, smCount, clockRate, cuDevice, uuid) " \
                  "VALUES (0, ?, 'NVIDIA H200', ?, 132, 1980000000, ?, ?)"
        con.executemany(gpu_row, [(g, f"0000:{0x45 + g:02x}:00.0", g, f"GPU-{g:08d}") for g in sorted(set(devices))])
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 28)})", self.kernels)
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * 8)})", self.runtime)
        con.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({', '.join('?' * 20)})", self.nvtx)
        con.commit()
        con.close()
        return path

    def launch(self, gtid: int, t: int, device: int, start: int, dur: int, name: str) -> int:
        """A cudaLaunchKernel at host time `t` of kernel `name` running [start, start + dur)."""
        self.corr += 1
        self.runtime.append((t, t + 4_000, 0, gtid, self.corr, self.sid("cudaLaunchKernel_v7000"), 0, None))
        short = name.split("(")[0].split("<")[0].split("::")[-1].replace("void ", "")
        self.kernels.append((start, start + dur, device, 1, None, 7, self.corr, gtid & ~0xFFFFFF, self.sid(name),
                             self.sid(short), None, 0, 0, 64, 132, 1, 1, 128, 1, 1, 0, 0, 0, 0, self.corr, 0, None,
                             None))
        return start + dur


def write_job(path: Path, attention_ns: tuple[int, int], *, steps: int = 16, layers: int = 4,
              step_ranges: bool = True, nvtx: bool = True, embedding: bool = False, devices: tuple[int, int] = (0, 1),
              one_process: bool = False, seed: int = 0) -> Path:
    """The export of a two-rank job (see the module docstring) at `path`; `step_ranges`: the
    train_step ranges, `nvtx`: any NVTX range (PyTorch's and NCCL's); `embedding`: each step
    starts with one or two embedding kernels, as many as its batch needs (the step's kernel
    sequence then repeats only nearly, and a layer's exactly); `devices`: each process's GPU
    (both on one: a server and its worker, not ranks); `one_process`: both GPUs driven by one
    process (pid 3000, a thread per GPU), not a job of ranks."""
    rng = np.random.default_rng(seed)
    w = _Writer()
    pids = (3000, 3000) if one_process else (3000, 3001)
    gtid = [(p << 24) | (p + r) for r, p in enumerate(pids)]
    host = [1_000_000, 1_000_000]  # each rank's host clock (ns since the session start)
    for r in range(2 if nvtx else 0):
        w.range(gtid[r], host[r], host[r] + 200_000, "ncclCommInitRank", _NCCL_DOMAIN,
                {"NCCL communicator ID": COMM_ID, "Rank": r, "No. of ranks": 2, "CUDA device": devices[r]})
    t_step = 2_000_000  # both ranks start each step together (the previous send/receive synchronised them)
    for _ in range(steps):
        arrive, marks = [], []
        for r in range(2):
            lead = [EMBED] * int(rng.integers(1, 3)) if embedding else []
            ops = lead + [op for _ in range(layers) for op in LAYER] + list(TAIL)
            t, gpu = w.step_ops(gtid[r], devices[r], t_step + 20_000, ops, attention_ns[r], rng, nvtx)
            arrive.append(gpu)
            marks.append(t)
        done = max(arrive) + TRANSFER_NS
        for r in range(2):
            t = marks[r]
            if nvtx:
                w.range(gtid[r], t, t + 10_000, "ncclGroupEnd", _NCCL_DOMAIN)
            w.launch(gtid[r], t + 2_000, devices[r], arrive[r], done - arrive[r], SENDRECV)
            sync_end = done + 5_000
            w.runtime.append((t + 12_000, sync_end, 0, gtid[r], None, w.sid("cudaStreamSynchronize_v3020"), 0, None))
            if step_ranges and nvtx:
                w.range(gtid[r], t_step, sync_end + 1_000, "train_step")
        t_step = done + 50_000
    return w.save(path, {p: "python3" for p in pids}, devices)


SAMPLER = ("sampler", "void at::native::(anonymous namespace)::argmax_kernel<float>(…)", 150_000)
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, …)"


def write_server(path: Path, attention_ns: tuple[int, int], *, steps: int = 20, layers: int = 4,
                 pids: tuple[int, int] = (3000, 3001), devices: tuple[int, int] = (0, 1),
                 nvtx: tuple[bool, bool] = (True, True), server: int | None = 2990, tokenizer: int | None = 2991,
                 seed: int = 0) -> Path:
    """The export of an inference server: two GPU workers that share nothing (no NCCL), each
    (`pids`, one process with a thread per GPU where both are one) running `steps` model steps
    on its GPU (`devices`): an NVTX range `execute_model` (where `nvtx` says, per worker)
    holding the op ranges of `layers` layers and a sampler, each launching its kernel; then a
    cudaStreamSynchronize and 100 µs idle.  `attention_ns[r]`: worker r's flash_fwd_kernel
    (±2 %, seeded).  `server`: the API server's pid (None: none), which serves each request
    in a `handle_request` range and launched 3 fill kernels on the first worker's GPU at its
    start (little GPU work, a GPU shared); `tokenizer`: a process that only made CUDA calls
    (cudaGetDeviceCount), no GPU work (None: none)."""
    rng = np.random.default_rng(seed)
    w = _Writer()
    names = {p: "python3" for p in pids}
    ops = [op for _ in range(layers) for op in LAYER] + [SAMPLER]
    for r in range(2):
        gtid = (pids[r] << 24) | (pids[r] + r)
        t = 2_000_000 + 300_000 * r
        for _ in range(steps):
            start = t
            t, gpu = w.step_ops(gtid, devices[r], t + 20_000, ops, attention_ns[r], rng, nvtx[r])
            w.runtime.append((t, gpu + 5_000, 0, gtid, None, w.sid("cudaStreamSynchronize_v3020"), 0, None))
            if nvtx[r]:
                w.range(gtid, start, gpu + 6_000, "execute_model")
            t = gpu + 100_000
    if server is not None:
        names[server] = "vllm-api-server"
        gtid = server << 24 | server
        for k in range(3):
            w.launch(gtid, 500_000 + 10_000 * k, devices[0], 520_000 + 10_000 * k, 5_000, FILL)
        for k in range(steps):
            t = 2_000_000 + 1_000_000 * k
            w.range(gtid, t, t + 400_000, "handle_request")
            w.runtime.append((t + 1_000, t + 3_000, 0, gtid, None, w.sid("cudaGetDevice_v3020"), 0, None))
    if tokenizer is not None:
        names[tokenizer] = "tokenizer"
        gtid = tokenizer << 24 | tokenizer
        w.runtime.append((400_000, 410_000, 0, gtid, None, w.sid("cudaGetDeviceCount_v3020"), 0, None))
    return w.save(path, names, devices)
