"""A synthetic cross-vendor pair: the same model's steps as Kineto traces from an NVIDIA H100
(CUDA runtime calls, cuBLAS / FlashAttention kernel names) and an AMD MI300X (HIP runtime calls,
hipBLASLt `Cijk_` / `attn_fwd` kernel names), several profiler steps each, so that `compare`
accepts them.  Only the names and the GPU differ: on the MI300X the GEMMs are faster and the
attention slower (as on the real bert-small pair)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

STEP_US = 5_000
GPUS = {"cuda": "NVIDIA H100 80GB HBM3", "hip": "AMD Instinct MI300X"}
# Per vendor: (launch call, kernel name, µs) of each kernel of a step, in order.
KERNELS = {
    "cuda": [("cudaLaunchKernel", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(…)", 60.0),
             ("cudaLaunchKernelExC", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_cublas", 700.0),
             ("cudaLaunchKernel", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(…)", 150.0),
             ("cudaLaunchKernel", "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>(…)", 80.0)],
    "hip": [("hipLaunchKernel", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(…)", 60.0),
            ("hipExtModuleLaunchKernel", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1", 500.0),
            ("hipModuleLaunchKernel", "attn_fwd", 400.0),
            ("hipLaunchKernel", "void at::native::vectorized_elementwise_kernel<8, GeluCUDAKernelImpl>(…)", 90.0)],
}
COPY = {"cuda": "cudaMemcpyAsync", "hip": "hipMemcpyWithStream"}
SYNC = {"cuda": "cudaStreamSynchronize", "hip": "hipStreamSynchronize"}


def vendor_trace(path: Path, vendor: str, *, steps: int = 12, seed: int = 0) -> Path:
    """A Kineto trace of `steps` profiler steps on `vendor`'s GPU ("cuda" or "hip")."""
    rng = np.random.default_rng(seed)
    ev: list[dict] = []
    corr = 0
    for i in range(steps):
        t0 = i * STEP_US
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": STEP_US - 50})
        cpu, gpu = t0 + 20, t0 + 40
        for launch, name, us in KERNELS[vendor]:
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 1, "tid": 1, "ts": cpu, "dur": 8,
                       "args": {"correlation": corr}})
            gpu = max(gpu, cpu + 10)
            dur = us * (1 + rng.normal(0, 0.02))
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                       "args": {"correlation": corr, "device": 0, "stream": 7}})
            cpu, gpu = cpu + 12, gpu + dur
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": COPY[vendor], "pid": 1, "tid": 1, "ts": cpu,
                   "dur": gpu - cpu + 30, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7,
                   "ts": gpu, "dur": 5, "args": {"correlation": corr, "device": 0, "stream": 7, "bytes": 4096}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": SYNC[vendor], "pid": 1, "tid": 1, "ts": gpu + 40,
                   "dur": 4 + rng.normal(0, 0.1), "args": {"correlation": corr + 100_000}})
    header = {"deviceProperties": [{"id": 0, "name": GPUS[vendor], "totalGlobalMem": 85_000_000_000}],
              "baseTimeNanoseconds": 1_700_000_000_000_000_000}
    path.write_text(json.dumps({**header, "traceEvents": ev}))
    return path


def vendor_pair(tmp: Path) -> tuple[Path, Path]:
    """(the H100 trace, the MI300X trace) under `tmp`."""
    return vendor_trace(tmp / "h100.json", "cuda", seed=1), vendor_trace(tmp / "mi300.json", "hip", seed=2)
