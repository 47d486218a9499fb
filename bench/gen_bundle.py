#!/usr/bin/env python3
"""Seeded generator of large run bundles for `make bench`.

`--kernels N --cycles K --names F --samples S`: N kernel activities of F distinct names in K
cycles (with launch times and perfdiff markers), S samples over 10 GPU/host metrics.
`--slow REGEX=F` makes matching kernels F× slower.  Written through perfdiff's bundle writer
in parts of 1 M rows, as a collector would.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import BundleWriter, base_manifest, normalize_table

T0 = 1_760_000_000_000_000_000
METRICS = ("gpu_usage", "process_gpu_usage", "gpu_sm_util", "gpu_frequency", "gpu_mem_used", "gpu_power",
           "cpu_frequency", "host_cpu_usage", "process_cpu_usage", "gpu_temperature")


def generate(out: Path, *, kernels: int, cycles: int, names: int, samples: int, seed: int,
             slow: tuple[str, float] | None) -> Path:
    shape = np.random.default_rng(0)  # the program: the same kernels and sequence in every run
    rng = np.random.default_rng(seed)  # the run: timing noise
    per_cycle = kernels // cycles
    kernel_names = np.array([f"void bench::kernel_{i:03d}<float, {i % 7}>(Params)" for i in range(names)], dtype=object)
    # Popularity: a few kernels are called often (Zipf-like), every kernel at least sometimes.
    weights = 1.0 / np.arange(1, names + 1) ** 0.8
    seq = shape.choice(names, size=per_cycle, p=weights / weights.sum())  # one fixed sequence per cycle
    base_us = shape.lognormal(np.log(20.0), 1.0, names)
    if slow:
        rx = re.compile(slow[0])
        base_us = base_us * np.where([bool(rx.search(n)) for n in kernel_names], slow[1], 1.0)
    gap_ns = 2_000
    writer = BundleWriter(out, base_manifest(run_name=out.name, source={"kind": "synthetic", "generator": "bench/gen_bundle.py",
                                                                     "seed": seed}))
    chunk_cycles = max(1, 1_000_000 // per_cycle)
    t = T0
    cycle_starts, cycle_ends = [], []
    for c0 in range(0, cycles, chunk_cycles):  # one iteration per million rows
        nc = min(chunk_cycles, cycles - c0)
        dur = (rng.lognormal(np.log(base_us[seq]), 0.1, (nc, per_cycle)) * 1e3).astype(np.int64)
        step = dur + gap_ns
        rel_start = np.cumsum(step, axis=1) - step
        cyc_len = rel_start[:, -1] + dur[:, -1] + 50_000
        starts = t + np.concatenate([[0], np.cumsum(cyc_len)[:-1]])
        t = int(starts[-1] + cyc_len[-1])
        s = (starts[:, None] + rel_start).ravel()
        e = s + dur.ravel()
        launch = s - 5_000
        n = len(s)
        writer.append("activity", normalize_table("activity", pd.DataFrame({
            "function": pd.Categorical.from_codes(np.tile(seq, nc), categories=kernel_names),
            "kind": pd.Categorical.from_codes(np.zeros(n, np.int8), ["kernel"]),
            "device": pd.Categorical.from_codes(np.zeros(n, np.int8), ["GPU 0"]),
            "start_ns": s, "end_ns": e, "busy_ns": e - s, "launch_ns": launch,
            "stream": np.full(n, 7), "correlation": np.arange(n) + c0 * per_cycle})))
        cycle_starts.append(starts - 10_000)
        cycle_ends.append(starts + cyc_len - 10_000)
    cs, ce = np.concatenate(cycle_starts), np.concatenate(cycle_ends)
    writer.append("markers", normalize_table("markers", pd.DataFrame({
        "name": "step", "start_ns": cs, "end_ns": ce, "tid": 1, "source": "perfdiff"})))
    per_metric = samples // len(METRICS)
    ts = np.linspace(T0, t, per_metric, dtype=np.int64)
    frames = [pd.DataFrame({"metric": m, "device": "Host" if m.startswith(("cpu", "host", "process_cpu")) else "GPU 0",
                            "t_start_ns": ts, "t_end_ns": ts, "value": rng.normal(50, 5, per_metric)})
              for m in METRICS]
    writer.append("samples", normalize_table("samples", pd.concat(frames, ignore_index=True)))
    return writer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=5_000_000)
    ap.add_argument("--cycles", type=int, default=2_000)
    ap.add_argument("--names", type=int, default=300)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slow", default=None, help="REGEX=FACTOR")
    args = ap.parse_args(argv)
    slow = None
    if args.slow:
        rx, f = args.slow.rsplit("=", 1)
        slow = (rx, float(f))
    if args.out.exists():
        shutil.rmtree(args.out)
    generate(args.out, kernels=args.kernels, cycles=args.cycles, names=args.names, samples=args.samples,
             seed=args.seed, slow=slow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
