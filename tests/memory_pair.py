"""A labelled pair of run bundles for the memory-pressure verdict, written with the bundle writer.

Each cycle (~20 ms, marked) holds a CPU-side range and the host states of one thread: on CPU,
asleep waiting for the GPU (`blocked`), and a little `iowait`.  Under memory pressure the
process spends longer on the CPU (reclaim), in `iowait` (swap-in, page faults) and in its
range, while the sampled memory signals rise: PSI memory stalls, swap-in/out, major faults and
the memory cgroup's limit events.  Other host metrics stay as they were.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perfdiff.bundle import write_bundle

MS = 1_000_000
CYCLES = 300
SAMPLE_NS = 250 * MS

# metric → (normal mean, pressure mean, noise sd): the sampled signals
QUIET = {"host_pressure_memory_some": (0.3, 0.3, 0.1), "host_pressure_memory_full": (0.1, 0.1, 0.05),
         "host_swap_in": (0.0, 0.0, 0.0), "host_swap_out": (0.0, 0.0, 0.0),
         "process_major_faults": (2.0, 2.0, 1.0), "cgroup_mem_events_max": (0.0, 0.0, 0.0),
         "host_pressure_cpu_some": (5.0, 5.0, 1.0), "host_cpu_usage": (40.0, 40.0, 3.0)}
PRESSURE = {**QUIET, "host_pressure_memory_some": (0.3, 18.0, 3.0), "host_pressure_memory_full": (0.1, 9.0, 2.0),
            "host_swap_in": (0.0, 5 * 2**20, 2**20), "host_swap_out": (0.0, 3 * 2**20, 2**20),
            "process_major_faults": (2.0, 900.0, 100.0), "cgroup_mem_events_max": (0.0, 4.0, 1.0)}


def run(seed: int, *, memory: bool = False, slower: bool = False, iowait_ms: float = 0.0,
        sample_ns: int = SAMPLE_NS):
    """One run: `memory` raises the memory signals, `slower` the on-CPU, iowait and range time
    that pressure costs; `iowait_ms` adds I/O wait per cycle without any memory signal;
    signals are sampled every `sample_ns` (below half a cycle: compared as μ per function)."""
    from test_segment_attribute import run_of

    rng = np.random.default_rng(seed)
    rows, marks, samples, t = [], [], [], 0
    for _ in range(CYCLES):
        jitter = 1 + 0.03 * rng.standard_normal(4)
        oncpu = int((9 + (3 if slower else 0)) * MS * jitter[0])
        rng_ns = int((8 + (3 if slower else 0)) * MS * jitter[1])
        io = int((0.2 + (4 if slower else 0) + iowait_ms) * MS * jitter[2])
        blocked = int(10 * MS * jitter[3])
        d = oncpu + io + blocked
        marks.append({"name": "step", "start_ns": t, "end_ns": t + d, "source": "perfdiff"})
        for fn, busy in (("oncpu", oncpu), ("iowait", io), ("blocked", blocked)):
            rows.append({"function": fn, "kind": "host", "device": "Host", "start_ns": t, "end_ns": t + d,
                         "busy_ns": busy, "tid": 1})
        rows.append({"function": "Scheduler.step", "kind": "cpu", "device": "Host", "start_ns": t,
                     "end_ns": t + rng_ns, "busy_ns": rng_ns, "tid": 1})
        t += d
    for metric, (n, a, sd) in (PRESSURE if memory else QUIET).items():
        for i in range(t // sample_ns):
            v = max(0.0, (a if memory else n) + sd * rng.standard_normal())
            samples.append({"metric": metric, "device": "Host", "t_start_ns": i * sample_ns,
                            "t_end_ns": (i + 1) * sample_ns, "value": v})
    return run_of(rows, marks, samples)


def write_pair(root: Path, seed: int, normal: dict, abnormal: dict) -> tuple[Path, Path]:
    """Write the two runs (keyword arguments of `run`) as bundles under `root`."""
    write_bundle(root / "normal", run(seed, **normal))
    write_bundle(root / "abnormal", run(seed + 1, **abnormal))
    return root / "normal", root / "abnormal"
