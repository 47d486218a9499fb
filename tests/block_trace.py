"""A synthetic PyTorch-profiler (Kineto) trace of one training step holding repeats of a
transformer block: each block's ops (``cpu_op``) launch their kernels through
``cudaLaunchKernel`` (joined by correlation id), the GPU runs them back to back on one
stream.  The attention op launches `attention` (kernel names, their µs each): swapping them
between two traces swaps the implementation under ``aten::scaled_dot_product_attention``."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FLASH = (("flash_fwd_kernel", 120.0),)
SAGE = (("sage_quant_kernel", 20.0), ("sage_fwd_kernel", 104.0))
SDPA = "aten::scaled_dot_product_attention"


def block_trace(path: Path, *, blocks: int = 28, attention: tuple[tuple[str, float], ...] = FLASH,
                inner_op: str = "aten::_flash_attention_forward", seed: int = 0, steps: int = 1) -> Path:
    """Write the trace to `path` (JSON); `inner_op` is the op inside SDPA that launches the
    attention kernels."""
    rng = np.random.default_rng(seed)
    ev: list[dict] = []
    corr = 0
    t = 0.0  # host µs
    gpu_free = 0.0

    def launch(kernel: str, us: float) -> None:
        nonlocal corr, t, gpu_free
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                   "dur": 4, "args": {"correlation": corr}})
        start = max(t + 5, gpu_free + 1)
        dur = us * (1 + rng.normal(0, 0.02))
        gpu_free = start + dur
        ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": start, "dur": dur,
                   "args": {"correlation": corr, "device": 0, "stream": 7}})
        t += 6

    def op(name: str, body) -> None:
        nonlocal t
        t0 = t
        t += 2
        body()
        t += 2
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t0, "dur": t - t0})

    for s in range(steps):
        step_t0 = t
        t += 10
        for _ in range(blocks):
            op("aten::layer_norm", lambda: launch("layer_norm_kernel", 15.0))
            op("aten::linear", lambda: op("aten::addmm", lambda: launch("sm90_xmma_gemm_qkv", 80.0)))
            op(SDPA, lambda: op(inner_op, lambda: [launch(k, us) for k, us in attention]))
            op("aten::linear", lambda: op("aten::addmm", lambda: launch("sm90_xmma_gemm_out", 60.0)))
            op("aten::gelu", lambda: launch("gelu_kernel", 25.0))
        t = max(t, gpu_free) + 20
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 5}", "pid": 1, "tid": 1,
                   "ts": step_t0, "dur": t - step_t0})
        t += 50
    path.write_text(json.dumps({"traceEvents": ev, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                                "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    return path
