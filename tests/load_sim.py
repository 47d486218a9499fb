"""Simulated engine steps with known truth for the load tests: each step carries a number
of requests and tokens (prefill and decode), its kernels take a fixed time plus a time per
token, and it is marked as one cycle with its step_* samples, as the framework adapters
record them."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData, base_manifest
from perfdiff.model.tables import empty_table, normalize_table

# (name, kind, device, fixed ns, ns per token)
WORK = (("schedule", "cpu", "Host", 40_000, 0.0), ("gemm", "kernel", "GPU 0", 100_000, 1_500.0),
        ("attn", "kernel", "GPU 0", 30_000, 500.0), ("sample", "kernel", "GPU 0", 20_000, 20.0))
GAP_NS = 2_000


def step_run(seed: int, steps: int = 400, load: float = 1.0, per_token: dict[str, float] | None = None,
             noise: float = 0.05, prefill_every: int = 8, samples: bool = True, attn_quadratic_ns: float = 0.0,
             ) -> RunData:
    """`steps` engine steps; requests per step uniform on 8..64 times `load`; every
    `prefill_every`-th step also prefills 64..256 tokens times `load`.  `per_token` scales a
    function's time per token (1.1: 10 % slower per token); `attn_quadratic_ns` adds that many
    ns per token² to attention (a cost convex in the load)."""
    rng = np.random.default_rng(seed)
    scale = per_token or {}
    requests = np.round(rng.integers(8, 65, steps) * load)
    prefill = np.where(np.arange(steps) % prefill_every == 0, np.round(rng.integers(64, 257, steps) * load), 0.0)
    tokens = requests + prefill
    durs = []
    for name, _, _, fixed, per in WORK:
        quad = attn_quadratic_ns * tokens ** 2 if name == "attn" else 0.0
        d = (fixed + per * scale.get(name, 1.0) * tokens + quad) * (1 + noise * rng.standard_normal(steps))
        durs.append(np.maximum(d, 1_000).astype(np.int64))
    step_len = sum(durs) + GAP_NS * (len(WORK) + 1)
    start = 1_000_000 + np.concatenate([[0], np.cumsum(step_len)[:-1]])
    end = start + step_len
    acts, t = [], start + GAP_NS
    for (name, kind, device, _, _), d in zip(WORK, durs, strict=True):
        acts.append(pd.DataFrame({"function": name, "kind": kind, "device": device, "start_ns": t, "end_ns": t + d,
                                  "busy_ns": d, "launch_ns": t - 500 if kind == "kernel" else -1}))
        t = t + d + GAP_NS
    markers = pd.DataFrame({"name": "vllm.step", "start_ns": start, "end_ns": end, "tid": 1, "source": "perfdiff"})
    sm = empty_table("samples")
    if samples:
        sm = normalize_table("samples", pd.concat([
            pd.DataFrame({"metric": m, "device": "Host", "t_start_ns": start, "t_end_ns": end, "value": v})
            for m, v in (("step_requests", requests), ("step_tokens", tokens), ("step_prefill_tokens", prefill),
                         ("step_decode_tokens", requests))], ignore_index=True))
    return RunData(base_manifest(run_name=f"sim{seed}"), normalize_table("activity", pd.concat(acts, ignore_index=True)),
                   sm, normalize_table("markers", markers), path=f"sim{seed}")
