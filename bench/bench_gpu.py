"""Benchmark of the NVML sampler: 8 fake GPUs at 10 Hz, paced like the collect loop.

    .venv/bin/python bench/bench_gpu.py [--gpus 8] [--hz 10] [--seconds 10]

The loop sleeps until each tick's deadline on the monotonic clock (as collectors/loop.py
does), stamps the tick with CLOCK_REALTIME and calls `sample`.  It prints a Markdown table:
tick jitter (how late each tick started, p50/p99/max), the cost of one `sample` call (wall
and CPU time of this thread, p50/p99) and the share of one core, then the per-call latency
of each NVML function as the sampler's manifest records it.

The NVML functions are the Python fake of tests/fakes (the fake's own work is included in
every number here); a real driver's call costs are recorded in each bundle's manifest
(collector "nvml", call_latency_us and call_stats).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.fake_nvml import FakeNvml, Scenario, h100, busy_h100, make_scenario  # noqa: E402
from perfdiff.collectors.gpu import open_gpu_sampler  # noqa: E402


def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolation quantile of `xs` (q in [0, 1])."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def scenario(n_gpus: int) -> Scenario:
    """`n_gpus` H100s with GPM and NVLink, all used by the target, on the wall clock."""
    t0 = time.time_ns()
    if n_gpus == 8:
        sc = make_scenario("eight_h100", t0_ns=t0)
    else:
        base = make_scenario("eight_h100", t0_ns=t0)
        fake = FakeNvml([h100(i, busy_h100()) for i in range(n_gpus)], t0_ns=t0)
        sc = Scenario("bench", "", fake, base.target_pids, base.proc, base.duration_ns)
    sc.fake.set_time(time.time_ns())  # from here the fake's clock runs with the wall clock
    return sc


def run(n_gpus: int, hz: float, seconds: float) -> dict[str, object]:
    """Pace the sampler for `seconds`; returns the measurements (ms, %, µs)."""
    interval = int(1e9 / hz)
    sc = scenario(n_gpus)
    with TemporaryDirectory(prefix="perfdiff-bench-proc-") as tmp:
        root = sc.write_proc(tmp)
        sampler = open_gpu_sampler(lambda: sc.target_pids, gpus=None, interval_ns=interval, nvml=sc.nvml,
                                   proc_root=root)
        assert sampler is not None
        sampler.start(time.time_ns())
        n = int(seconds * hz)
        jitter, wall, cpu = [], [], []
        rows = missed = 0
        cpu0, mono0 = time.thread_time_ns(), time.monotonic_ns()
        deadline = mono0 + interval
        for _ in range(n):
            delay = deadline - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            woke = time.monotonic_ns()
            jitter.append((woke - deadline) / 1e6)
            t = time.time_ns()
            c, w = time.thread_time_ns(), time.perf_counter_ns()
            rows += len(sampler.sample(t)["samples"])
            wall.append((time.perf_counter_ns() - w) / 1e6)
            cpu.append((time.thread_time_ns() - c) / 1e6)
            deadline += interval
            late = time.monotonic_ns() - deadline
            if late > 0:  # a tick overran: keep the phase, count what was skipped
                skip = late // interval + 1
                missed += skip
                deadline += skip * interval
        busy = (time.thread_time_ns() - cpu0) / (time.monotonic_ns() - mono0) * 100
        manifest = sampler.manifest()
        sampler.close()
    return {"n": n, "rows": rows, "missed": missed, "jitter": jitter, "wall": wall, "cpu": cpu, "busy": busy,
            "stats": manifest["collector"]["call_stats"], "unsupported": len(manifest["unsupported"])}


def render(r: dict[str, object], n_gpus: int, hz: float, seconds: float) -> str:
    """The measurements as Markdown."""
    j, w, c = r["jitter"], r["wall"], r["cpu"]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [
        f"### NVML sampler: {n_gpus} fake GPUs at {hz:g} Hz for {seconds:g} s",
        "",
        f"`python bench/bench_gpu.py --gpus {n_gpus} --hz {hz:g} --seconds {seconds:g}` · "
        f"{platform.python_implementation()} {platform.python_version()} · {os.cpu_count()} CPUs · "
        f"load average {load[0]:.2f} at the end",
        "",
        "| measure | p50 | p99 | max |",
        "|---|---|---|---|",
        f"| tick jitter (ms late) | {quantile(j, .5):.3f} | {quantile(j, .99):.3f} | {max(j):.3f} |",
        f"| `sample` wall time (ms) | {quantile(w, .5):.3f} | {quantile(w, .99):.3f} | {max(w):.3f} |",
        f"| `sample` CPU time (ms) | {quantile(c, .5):.3f} | {quantile(c, .99):.3f} | {max(c):.3f} |",
        "",
        f"{r['n']} ticks, {r['missed']} missed, {r['rows']:,} sample rows; the sampling thread used "
        f"{r['busy']:.2f} % of one core.",
        "",
        "| NVML call (fake) | calls per tick | mean (µs) | max (µs) |",
        "|---|---|---|---|",
    ]
    stats: dict[str, dict[str, float]] = r["stats"]  # type: ignore[assignment]
    ticks = max(int(r["n"]), 1)
    for func, st in sorted(stats.items(), key=lambda kv: -kv[1]["calls"] * kv[1]["mean_us"]):
        if st["calls"] >= ticks:
            lines.append(f"| {func} | {st['calls'] / (ticks + 1):.1f} | {st['mean_us']:.1f} | {st['max_us']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    result = run(args.gpus, args.hz, args.seconds)
    print(render(result, args.gpus, args.hz, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
