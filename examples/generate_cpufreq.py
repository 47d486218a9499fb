#!/usr/bin/env python3
"""Seeded generator of the example pair: a CPU-frequency cut that starves the GPU.

The story, with a known answer (the CPU-frequency-reduction case of the reference report
perfdiff replaces, without that report's statistical mistakes: docs/STATISTICS.md):

* Each cycle the host schedules a batch (CPU work in ``Scheduler.get_next_batch_to_run`` and
  ``TokenizerManager.detokenize``), launching 40 kernels as it goes, then waits in
  ``cudaStreamSynchronize`` for the GPU.
* abnormal: the CPU clock is cut from ≈86 % to ≈22 % of its maximum.  CPU work takes ≈3.9×
  longer, the GPU idles (starved): every kernel's β shrinks by a common factor while its own
  time per cycle does not change; the host waits less in cudaStreamSynchronize (a symptom).
  ``oncpu`` grows and ``runq`` grows a little.
* On top of that one kernel truly regresses: ``flash_fwd_kernel<…>`` is 1.5× slower per call.

Everything is written through perfdiff's real bundle writer.  Usage::

    python examples/generate_cpufreq.py OUT_DIR [--seed 1] [--cycles-normal 300] [--cycles-abnormal 150]

writes OUT_DIR/normal and OUT_DIR/abnormal.  `generate_run` also makes single runs
(``scenario="normal"`` with different seeds gives the null pair for the tests).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData, base_manifest, normalize_table, write_bundle

T0_NS = 1_760_000_000_000_000_000  # an arbitrary wall-clock origin (2025-10-09)
REGRESSED = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
             "false, true, false, false, true, true, false, false>(Flash_fwd_params)")
KERNELS = [  # (name, mean µs per call, calls per cycle)
    ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn", 570.0, 8),
    ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x6_tn", 420.0, 8),
    (REGRESSED, 360.0, 4),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<long>, "
     "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<long>, std::array<char*, 2ul>)", 72.0, 8),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, "
     "16u, 1u, 2u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, "
     "__nv_bfloat16, float, int, flashinfer::DefaultAttention<false, false, false, false> >, "
     "PagedParams>(PagedParams)", 270.0, 4),
    ("rms_norm_kernel<c10::BFloat16, 8>", 54.0, 4),
    ("act_and_mul_kernel|silu", 84.0, 4),
]
CPU_RANGES = [("Scheduler.get_next_batch_to_run", 7_000.0), ("TokenizerManager.detokenize", 2_400.0)]
HOST_TICK_NS = 10_000_000


def _cycle_plan(rng: np.random.Generator, n: int, freq_pct: float, regress: float) -> dict:
    slow = 86.0 / freq_pct  # CPU work scales with the inverse clock
    cpu = np.stack([rng.lognormal(np.log(us * slow), 0.05, n) for _, us in CPU_RANGES])  # µs
    per_call = []
    for name, us, calls in KERNELS:
        f = regress if name == REGRESSED else 1.0
        per_call.append(rng.lognormal(np.log(us * f), 0.06, (n, calls)))
    return {"cpu_us": cpu, "per_call": per_call, "slow": slow}


def generate_run(out: Path, *, scenario: str, seed: int, n_cycles: int) -> Path:
    """Write one run bundle ('normal' or 'abnormal') of `n_cycles` cycles to `out`."""
    rng = np.random.default_rng(seed)
    abnormal = scenario == "abnormal"
    freq = 22.0 if abnormal else 86.0
    plan = _cycle_plan(rng, n_cycles, freq, 1.5 if abnormal else 1.0)
    tid = 4242
    act: dict[str, list[np.ndarray]] = {k: [] for k in ("function", "kind", "device", "start_ns", "end_ns",
                                                        "busy_ns", "launch_ns", "tid", "stream", "correlation")}

    def add(function: np.ndarray, kind: str, device: str, start: np.ndarray, end: np.ndarray,
            busy: np.ndarray, launch: np.ndarray | None = None, stream: int = -1, corr: np.ndarray | None = None,
            thread: int = tid) -> None:
        m = len(start)
        act["function"].append(np.asarray(function, dtype=object))
        act["kind"].append(np.full(m, kind, dtype=object))
        act["device"].append(np.full(m, device, dtype=object))
        act["start_ns"].append(start.astype(np.int64))
        act["end_ns"].append(end.astype(np.int64))
        act["busy_ns"].append(busy.astype(np.int64))
        act["launch_ns"].append(np.full(m, -1, np.int64) if launch is None else launch.astype(np.int64))
        act["tid"].append(np.full(m, thread, np.int64))
        act["stream"].append(np.full(m, stream, np.int64))
        act["correlation"].append(np.full(m, -1, np.int64) if corr is None else corr.astype(np.int64))

    # Per cycle: CPU phase (ranges back to back; kernels launched evenly across it), then sync.
    cpu_us = plan["cpu_us"]  # (R, n)
    cpu_total_ns = (cpu_us.sum(axis=0) * 1e3).astype(np.int64)
    names_seq, dur_seq = [], []
    for k, (_, _, calls) in enumerate(KERNELS):
        names_seq.append(np.full((n_cycles, calls), k))
        dur_seq.append(plan["per_call"][k])
    kidx = np.concatenate(names_seq, axis=1)  # (n, L)
    kdur_ns = (np.concatenate(dur_seq, axis=1) * 1e3).astype(np.int64)
    L = kidx.shape[1]
    order = np.argsort(np.random.default_rng(0).random(L))  # the same launch order in every run
    kidx, kdur_ns = kidx[:, order], kdur_ns[:, order]
    launch_overhead_ns = 6_000
    # Times relative to each cycle's start.  One GPU stream runs the kernels in order:
    # s_j = max(launch_j + overhead, s_{j-1} + d_{j-1}) = D_j + max_{i<=j}(launch_i + overhead - D_i)
    # with D_j the summed durations before j — a running maximum, no loop over kernels.
    frac = (np.arange(L) + 0.5) / L
    rel_launch = (frac[None, :] * cpu_total_ns[:, None]).astype(np.int64)
    before = np.cumsum(kdur_ns, axis=1) - kdur_ns
    rel_start = before + np.maximum.accumulate(rel_launch + launch_overhead_ns - before, axis=1)
    rel_end = rel_start + kdur_ns
    gpu_done = rel_end[:, -1]
    sync_rel_end = np.maximum(cpu_total_ns + 20_000, gpu_done + 15_000)
    durations = sync_rel_end + rng.normal(150_000, 10_000, n_cycles).astype(np.int64)  # response / bookkeeping
    starts = T0_NS + np.concatenate([[0], np.cumsum(durations)[:-1]])
    ends = starts + durations
    k_launch = starts[:, None] + rel_launch
    k_start = starts[:, None] + rel_start
    k_end = starts[:, None] + rel_end
    sync_start = starts + cpu_total_ns

    kernel_names = np.array([k[0] for k in KERNELS], dtype=object)
    corr = np.arange(n_cycles * L, dtype=np.int64).reshape(n_cycles, L) + 1
    add(kernel_names[kidx.ravel()], "kernel", "GPU 0", k_start.ravel(), k_end.ravel(), kdur_ns.ravel(),
        launch=k_launch.ravel(), stream=7, corr=corr.ravel())
    add(np.full(n_cycles * L, "cudaLaunchKernel", dtype=object), "api", "Host", k_launch.ravel(),
        k_launch.ravel() + 4_000, np.full(n_cycles * L, 4_000), corr=corr.ravel())
    add(np.full(n_cycles, "cudaStreamSynchronize", dtype=object), "api", "Host", sync_start,
        starts + sync_rel_end, starts + sync_rel_end - sync_start)
    # CPU ranges back to back inside the CPU phase.
    off = np.zeros(n_cycles, np.int64)
    for r, (name, _) in enumerate(CPU_RANGES):
        d = (cpu_us[r] * 1e3).astype(np.int64)
        add(np.full(n_cycles, name, dtype=object), "cpu", "Host", starts + off, starts + off + d, d)
        off += d

    # Host states per 10 ms tick, summed over threads: oncpu ≈ CPU phase + a busy helper thread.
    tick0 = np.arange(T0_NS, ends[-1], HOST_TICK_NS, dtype=np.int64)
    tick1 = np.minimum(tick0 + HOST_TICK_NS, ends[-1])
    width = (tick1 - tick0).astype(np.float64)
    cpu_busy = _overlap(tick0, tick1, starts, starts + cpu_total_ns) + _overlap(tick0, tick1, sync_start, starts + sync_rel_end) * 0.05
    oncpu = cpu_busy + width * rng.uniform(0.25, 0.35, len(tick0))
    runq = width * (rng.uniform(0.01, 0.03, len(tick0)) if not abnormal else rng.uniform(0.05, 0.09, len(tick0)))
    blocked = width * rng.uniform(0.9, 1.1, len(tick0))
    for name, busy in (("oncpu", oncpu), ("runq", runq), ("blocked", blocked)):
        add(np.full(len(tick0), name, dtype=object), "host", "Host", tick0, tick1, busy, thread=-1)

    activity = normalize_table("activity", pd.DataFrame({k: np.concatenate(v) for k, v in act.items()}))
    samples = _samples(rng, abnormal, tick0[0], int(ends[-1]), starts, ends, k_start, k_end)
    markers = normalize_table("markers", pd.DataFrame({
        "name": np.full(n_cycles, "step", dtype=object), "start_ns": starts, "end_ns": ends,
        "tid": np.full(n_cycles, tid), "source": np.full(n_cycles, "perfdiff", dtype=object)}))
    manifest = base_manifest(
        run_name=scenario, created_ns=T0_NS,
        source={"kind": "synthetic", "generator": "examples/generate_cpufreq.py", "seed": seed,
                "scenario": scenario},
        target={"pid": 805580 if not abnormal else 842126, "cmdline": ["python", "-m", "sglang.launch_server"]},
        host={"cpu_model": "AMD EPYC 7763 64-Core Processor", "cores": 128, "kernel": "5.15.0"},
        gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-00000000-0000-0000-0000-000000000007",
               "driver": "550.54.15", "max_sm_clock_mhz": 1410, "max_mem_clock_mhz": 1593}],
        collectors=[{"name": "host", "interval_ns": HOST_TICK_NS}, {"name": "nvml", "interval_ns": 100_000_000},
                    {"name": "gpm", "interval_ns": 2_000_000}, {"name": "cupti", "interval_ns": 0}],
        unsupported=[{"device": "GPU 0", "metric": "gpu_link_transmit", "reason": "NVML_ERROR_NOT_SUPPORTED (no NVLink on this board)"},
                     {"device": "GPU 0", "metric": "gpu_link_receive", "reason": "NVML_ERROR_NOT_SUPPORTED (no NVLink on this board)"}],
    )
    run = RunData(manifest=manifest, activity=activity, samples=samples, markers=markers)
    if out.exists():
        shutil.rmtree(out)
    return write_bundle(out, run)


def _overlap(t0: np.ndarray, t1: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Total overlap (ns) of each [t0, t1) with the sorted, disjoint intervals [s, e)."""
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, x, side="right")  # intervals starting at or before x
        full = cum[np.maximum(i - 1, 0)]
        part = np.where(i > 0, np.clip(x - s[np.maximum(i - 1, 0)], 0, (e - s)[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + part, 0)

    return (covered_until(t1) - covered_until(t0)).astype(np.float64)


def _samples(rng: np.random.Generator, abnormal: bool, t_begin: int, t_end: int, starts: np.ndarray,
             ends: np.ndarray, k_start: np.ndarray, k_end: np.ndarray) -> pd.DataFrame:
    rows = []
    t100 = np.arange(t_begin, t_end, 100_000_000, dtype=np.int64)
    m = len(t100)
    gpu_busy = _overlap(t100, t100 + 100_000_000, np.sort(k_start.ravel()), np.sort(k_end.ravel()))
    gpu_pct = np.round(np.clip(100.0 * gpu_busy / 1e8 + rng.normal(0, 1.5, m), 0, 100))
    freq = (22.5 if abnormal else 85.7) + rng.normal(0, 0.8, m)
    clock = np.full(m, 1410.0)
    clock[rng.random(m) < 0.3] = 1395.0
    for metric, device, values in (
        ("cpu_frequency", "Host", freq),
        ("cpu_frequency_mhz", "Host", freq / 100.0 * 3500.0),
        ("host_cpu_usage", "Host", (7.0 if abnormal else 5.8) + rng.normal(0, 0.6, m)),
        ("process_cpu_usage", "Host", 162.0 + rng.normal(0, 4, m)),
        ("gpu_usage", "GPU 0", gpu_pct),
        ("process_gpu_usage", "GPU 0", gpu_pct),
        ("gpu_frequency", "GPU 0", clock),
        ("gpu_sm_frequency", "GPU 0", clock),
        ("gpu_mem_frequency", "GPU 0", np.full(m, 1593.0)),
        ("gpu_mem_used", "GPU 0", np.full(m, 71.2 * 2**30) + rng.normal(0, 2**20, m).round()),
        ("gpu_power", "GPU 0", 90 + 1.6 * gpu_pct + rng.normal(0, 3, m)),
    ):
        rows.append(pd.DataFrame({"metric": metric, "device": device, "t_start_ns": t100, "t_end_ns": t100,
                                  "value": values}))
    # GPM SM activity in 2 ms windows: fine enough to tell kernels apart (func scope).
    t5 = np.arange(t_begin, t_end, 2_000_000, dtype=np.int64)
    busy5 = _overlap(t5, t5 + 2_000_000, np.sort(k_start.ravel()), np.sort(k_end.ravel())) / 2e6
    sm = np.clip(100 * busy5 * rng.uniform(0.55, 0.65, len(t5)), 0, 100)
    rows.append(pd.DataFrame({"metric": "gpu_sm_util", "device": "GPU 0", "t_start_ns": t5,
                              "t_end_ns": t5 + 2_000_000, "value": sm}))
    return normalize_table("samples", pd.concat(rows, ignore_index=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cycles-normal", type=int, default=300)
    ap.add_argument("--cycles-abnormal", type=int, default=150)
    args = ap.parse_args(argv)
    generate_run(args.out / "normal", scenario="normal", seed=args.seed, n_cycles=args.cycles_normal)
    generate_run(args.out / "abnormal", scenario="abnormal", seed=args.seed + 1000, n_cycles=args.cycles_abnormal)
    print(f"wrote {args.out / 'normal'} and {args.out / 'abnormal'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
