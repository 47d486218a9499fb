"""Labelled synthetic pairs for the verdict: one simulated training-like loop, and one change
per pair whose class of change is known.

Each cycle of the loop: the host reads a batch (a data-loader range), runs the forward pass
(a CPU range that launches the GPU work: one host-to-device copy, then kernels on one
stream), waits for the GPU in cudaStreamSynchronize, and does a little bookkeeping.  The GPU
runs each kernel when it has been launched and the previous one is done, so the GPU idles
whenever the host is late: the GPU's busy share of the cycle falls exactly when the host is
the bottleneck.  Host states (`oncpu`, `runq`, `iowait`) are written per 10 ms tick as the
host collector writes them; context metrics (CPU clock, GPU clock, power throttling, another
process's GPU use) per 20 ms.

`PAIRS` maps each label (a VerdictCode value) to the abnormal run's changes; `write_pair`
writes a normal and an abnormal bundle through perfdiff's bundle writer.  The null pair is the
normal loop twice with different seeds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData, base_manifest, normalize_table, write_bundle

T0_NS = 1_760_000_000_000_000_000
TID = 4242
HOST_TICK_NS = 10_000_000
SAMPLE_NS = 20_000_000
CYCLES = 200
INPUT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
FORWARD = "Model.forward"
COPY = ("Memcpy HtoD (Pinned -> Device)", "memcpy", 200.0, "copy")
# (name, kind, µs per call, calls per cycle, how it slows: compute kernels follow the SM clock)
KERNELS = [
    ("ampere_bf16_s16816gemm_bf16_128x64_tn", "kernel", 250.0, 8, "compute"),
    ("flash_fwd_kernel", "kernel", 180.0, 4, "compute"),
    ("rms_norm_kernel", "kernel", 30.0, 8, "memory"),
    ("vectorized_elementwise_kernel<add>", "kernel", 20.0, 8, "memory"),
]
NORMAL: dict[str, Any] = {
    "cpu_scale": 1.0, "cpu_freq_pct": 86.0, "input_us": 300.0, "forward_us": 2_500.0, "launch_us": 5.0,
    "runq_gap_us": 0.0, "io_gap_us": 0.0, "kernel_scale": {}, "compute_scale": 1.0, "memory_scale": 1.0,
    "copy_scale": 1.0, "sm_clock_mhz": 1980.0, "throttle_power_pct": 0.0, "other_gpu_pct": 0.0,
    "extra_calls": {}, "new_kernels": [], "syncs": 0, "graph": False,
}
# The abnormal run of each labelled pair (the label is the key up to "/"): what differs from
# NORMAL; "normal" holds what differs in the pair's normal run.
PAIRS: dict[str, dict[str, Any]] = {
    "cpu-clock-reduced": {"cpu_scale": 3.0, "cpu_freq_pct": 29.0},
    "cpu-contention": {"runq_gap_us": 3_000.0},
    "io-wait": {"io_gap_us": 3_000.0},
    "input-pipeline": {"input_us": 3_000.0},
    "gpu-kernel-regression": {"kernel_scale": {"flash_fwd_kernel": 1.8}},
    "gpu-device-wide": {"compute_scale": 1.35, "memory_scale": 1.35, "copy_scale": 1.35},
    "gpu-throttling": {"compute_scale": 1.45, "memory_scale": 1.03, "sm_clock_mhz": 1365.0,
                       "throttle_power_pct": 60.0},
    "other-process": {"compute_scale": 1.6, "memory_scale": 1.6, "copy_scale": 1.6, "other_gpu_pct": 40.0},
    "launch-bound": {"launch_us": 60.0},
    # CUDA graphs turned off: one cudaGraphLaunch per cycle becomes one launch per kernel.
    "launch-bound/graphs-off": {"launch_us": 60.0, "normal": {"graph": True}},
    "new-work": {"new_kernels": [("topk_sampling_kernel", "kernel", 150.0, 4, "compute")],
                 "extra_calls": {"rms_norm_kernel": 8}},
    "added-synchronisation": {"syncs": 7},
    "transfer-growth": {"copy_scale": 5.0},
}


def params(label: str | None, **more: Any) -> dict[str, Any]:
    """The loop's parameters for a pair's abnormal run (`label`), or the normal run (None)."""
    change = {k: v for k, v in (PAIRS[label] if label else {}).items() if k != "normal"}
    return {**NORMAL, **change, **more}


def write_pair(out: Path, label: str | None, *, seed: int = 0, normal: dict[str, Any] | None = None,
               abnormal: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write `out`/normal and `out`/abnormal: the normal loop, and the loop changed as `label`
    says (None: unchanged, a null pair).  `normal` / `abnormal` override the parameters."""
    pa = abnormal if abnormal is not None else params(label)
    pn = normal if normal is not None else params(None, **(PAIRS[label].get("normal", {}) if label else {}))
    return (write_run(out / "normal", pn, seed=2 * seed), write_run(out / "abnormal", pa, seed=2 * seed + 1))


def _slots(p: dict[str, Any]) -> list[tuple[str, str, float, str]]:
    """The GPU work of one cycle in launch order: the copy, then the kernels interleaved."""
    kernels = [(n, k, us, c + p["extra_calls"].get(n, 0), how) for n, k, us, c, how in KERNELS] + p["new_kernels"]
    seq = [(n, k, us, how) for n, k, us, calls, how in kernels for _ in range(calls)]
    order = np.argsort(np.random.default_rng(7).random(len(seq)), kind="stable")  # one order in every run
    return [COPY] + [seq[i] for i in order]


def _scale(p: dict[str, Any], name: str, how: str) -> float:
    base = {"compute": p["compute_scale"], "memory": p["memory_scale"], "copy": p["copy_scale"]}[how]
    return base * p["kernel_scale"].get(name, 1.0)


def write_run(out: Path, p: dict[str, Any], *, seed: int, n: int = CYCLES) -> Path:
    """One run bundle of `n` cycles of the loop with parameters `p`."""
    rng = np.random.default_rng(seed)
    rows: list[pd.DataFrame] = []

    def add(name: Any, kind: str, device: str, s: np.ndarray, e: np.ndarray, busy: np.ndarray | None = None,
            **cols: Any) -> None:
        cols = {"tid": TID, "launch_ns": -1, "stream": -1, "correlation": -1, "bytes": -1, **cols}
        rows.append(pd.DataFrame({"function": name, "kind": kind, "device": device, "start_ns": s, "end_ns": e,
                                  "busy_ns": e - s if busy is None else busy, **cols}))

    def jitter(us: float, size: Any = n) -> np.ndarray:
        return (rng.lognormal(np.log(max(us, 1e-3) * 1e3), 0.05, size)).astype(np.int64)

    slots = _slots(p)
    syncs = set(np.linspace(0, len(slots), p["syncs"] + 2).astype(int)[1:-1].tolist()) if p["syncs"] else set()
    # Times relative to each cycle's start (ns), one array over the cycles per step.
    input_ns = jitter(p["input_us"] * p["cpu_scale"])
    chunk_ns = jitter(p["forward_us"] * p["cpu_scale"] / len(slots), (n, len(slots)))
    host = input_ns.copy()
    gpu_free = np.zeros(n, np.int64)
    cpu_busy: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(n, np.int64), input_ns.copy())]
    rel: list[dict[str, Any]] = []
    if p["graph"]:  # one graph launch queues every kernel of the cycle at once
        call = jitter(p["launch_us"] * p["cpu_scale"])
        rel.append({"graph": True, "start": host.copy(), "end": host + call})
        graph_ready = host + call
        host = host + call
    for j, (name, _kind, us, how) in enumerate(slots):
        t0 = host.copy()
        host = host + chunk_ns[:, j]
        call = np.zeros(n, np.int64) if p["graph"] else jitter(p["launch_us"] * p["cpu_scale"])
        dur = jitter(us * _scale(p, name, how))
        start = np.maximum((graph_ready if p["graph"] else host + call) + 2_000, gpu_free)
        gpu_free = start + dur
        rel.append({"slot": j, "launch": graph_ready.copy() if p["graph"] else host.copy(), "call": call,
                    "start": start, "end": gpu_free.copy()})
        host = host + call
        cpu_busy.append((t0, host.copy()))
        if j in syncs:
            s_end = np.maximum(host, gpu_free) + 5_000
            rel.append({"sync": True, "start": host.copy(), "end": s_end})
            host = s_end
    forward_end = host.copy()
    sync_end = np.maximum(host, gpu_free) + 5_000
    gap_start = sync_end
    gap_end = gap_start + (jitter(p["runq_gap_us"] + p["io_gap_us"]) if p["runq_gap_us"] + p["io_gap_us"] else 0)
    dur = gap_end + jitter(300.0)
    starts = T0_NS + np.concatenate([[0], np.cumsum(dur)[:-1]])

    corr = 0
    for r in rel:
        if r.get("sync") or r.get("graph"):
            api = "cudaGraphLaunch" if r.get("graph") else "cudaStreamSynchronize"
            add(api, "api", "Host", starts + r["start"], starts + r["end"])
            continue
        name, kind, _, _ = slots[r["slot"]]
        ids = np.arange(corr, corr + n) + 1
        corr += n
        if not p["graph"]:
            api = "cudaMemcpyAsync" if kind == "memcpy" else "cudaLaunchKernel"
            add(api, "api", "Host", starts + r["launch"], starts + r["launch"] + r["call"], correlation=ids)
        add(name, kind, "GPU 0", starts + r["start"], starts + r["end"], launch_ns=starts + r["launch"], stream=7,
            correlation=ids, bytes=int((8 << 20) * _scale(p, name, "copy")) if kind == "memcpy" else -1)
    add(INPUT, "cpu", "Host", starts, starts + input_ns)
    nested = sum(r["end"] - r["start"] if "end" in r and "slot" not in r else r["call"] for r in rel)
    add(FORWARD, "cpu", "Host", starts + input_ns, starts + forward_end, busy=forward_end - input_ns - nested)
    add("cudaStreamSynchronize", "api", "Host", starts + forward_end, starts + sync_end)

    t_end = int(starts[-1] + dur[-1])
    tick0 = np.arange(T0_NS, t_end, HOST_TICK_NS, dtype=np.int64)
    tick1 = np.minimum(tick0 + HOST_TICK_NS, t_end)
    width = (tick1 - tick0).astype(np.float64)
    busy_s = np.concatenate([starts + s for s, _ in cpu_busy])
    busy_e = np.concatenate([starts + e for _, e in cpu_busy])
    order = np.argsort(busy_s)
    gap = _overlap(tick0, tick1, starts + gap_start, starts + gap_end)
    states = {
        "oncpu": _overlap(tick0, tick1, busy_s[order], busy_e[order]) + width * rng.uniform(0.2, 0.3, len(tick0)),
        "runq": width * rng.uniform(0.01, 0.03, len(tick0)) + (gap if p["runq_gap_us"] else 0.0),
        "iowait": width * rng.uniform(0.005, 0.015, len(tick0)) + (gap if p["io_gap_us"] else 0.0),
    }
    for name, busy in states.items():
        add(name, "host", "Host", tick0, tick1, busy=busy.astype(np.int64), tid=-1)

    activity = normalize_table("activity", pd.concat(rows, ignore_index=True))
    markers = normalize_table("markers", pd.DataFrame({"name": "step", "start_ns": starts, "end_ns": starts + dur,
                                                       "tid": TID, "source": "perfdiff"}))
    manifest = base_manifest(
        run_name=out.name, created_ns=T0_NS,
        source={"kind": "synthetic", "generator": "tests/verdict_pairs.py", "seed": seed},
        target={"pid": 1000 + seed, "cmdline": ["python", "train.py"]},
        host={"cpu_model": "synthetic CPU", "cores": 64, "kernel": "6.8.0"},
        gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "driver": "550.54.15"}],
        collectors=[{"name": "host", "interval_ns": HOST_TICK_NS}, {"name": "nvml", "interval_ns": SAMPLE_NS},
                    {"name": "cupti", "interval_ns": 0}])
    run = RunData(manifest=manifest, activity=activity, samples=_samples(p, rng, T0_NS, t_end), markers=markers)
    return write_bundle(out, run)


def _samples(p: dict[str, Any], rng: np.random.Generator, t0: int, t1: int) -> pd.DataFrame:
    t = np.arange(t0, t1, SAMPLE_NS, dtype=np.int64)
    m = len(t)
    series = {
        ("cpu_frequency", "Host"): p["cpu_freq_pct"] + rng.normal(0, 0.8, m),
        ("gpu_sm_frequency", "GPU 0"): p["sm_clock_mhz"] + rng.integers(-15, 16, m),
        ("gpu_throttle_power", "GPU 0"): np.clip(p["throttle_power_pct"] + rng.normal(0, 3, m), 0, 100)
        if p["throttle_power_pct"] else np.zeros(m),
        ("other_process_gpu_usage", "GPU 0"): np.clip(p["other_gpu_pct"] + rng.normal(0, 3, m), 0, 100)
        if p["other_gpu_pct"] else np.zeros(m),
        # Pressure stalls (% of time): a grown run queue or I/O wait shows in PSI as well.
        ("host_pressure_cpu_some", "Host"): np.clip(rng.normal(1.5, 0.5, m) + (40.0 if p["runq_gap_us"] else 0.0), 0, 100),
        ("host_pressure_io_some", "Host"): np.clip(rng.normal(0.5, 0.2, m) + (40.0 if p["io_gap_us"] else 0.0), 0, 100),
    }
    return normalize_table("samples", pd.concat([
        pd.DataFrame({"metric": metric, "device": device, "t_start_ns": t, "t_end_ns": t, "value": v})
        for (metric, device), v in series.items()], ignore_index=True))


def _overlap(t0: np.ndarray, t1: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Total overlap (ns) of each [t0, t1) with the sorted, disjoint intervals [s, e)."""
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, x, side="right")
        k = np.maximum(i - 1, 0)
        return np.where(i > 0, cum[k] + np.clip(x - s[k], 0, (e - s)[k]), 0)

    return (covered_until(t1) - covered_until(t0)).astype(np.float64)
