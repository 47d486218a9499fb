"""Synthetic run bundles the tests build from literal work: steps of host calls and kernels run
back to back on one thread, and host states sampled per tick."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData, base_manifest, normalize_table, write_bundle

T0_NS = 1_760_000_000_000_000_000
MARKER_COLUMNS = ["name", "start_ns", "end_ns", "tid", "source"]

Work = tuple[str, str, str, float]  # (function, kind, device, µs)


def no_samples() -> pd.DataFrame:
    """An empty samples table of the right columns and types."""
    return pd.DataFrame({"metric": pd.Series([], dtype=str), "device": pd.Series([], dtype=str),
                         "t_start_ns": pd.Series([], dtype=np.int64), "t_end_ns": pd.Series([], dtype=np.int64),
                         "value": pd.Series([], dtype=np.float64)})


def host_state_rows(states: dict[str, np.ndarray], tick0: np.ndarray, tick1: np.ndarray) -> pd.DataFrame:
    """Host-state activity rows: each state's busy ns (summed over threads) per tick."""
    return pd.concat([pd.DataFrame({"function": name, "kind": "host", "device": "Host", "start_ns": tick0,
                                    "end_ns": tick1, "busy_ns": v.astype(np.int64), "tid": -1, "launch_ns": -1,
                                    "stream": -1, "correlation": -1, "bytes": -1}) for name, v in states.items()])


def serial_steps(out: Path, steps: Iterable[tuple[int, list[Work]]], rng: np.random.Generator, *,
                 sigma: float, marked: bool = True) -> Path:
    """A bundle at `out` of steps run back to back on thread 1: each step first idles its stall
    (ns), then runs its work, each item lognormal around its µs (log-sd `sigma`), 1 µs apart;
    kernels are launched when they start.  Each step is a perfdiff "step" marker unless not
    `marked`."""
    rows, marks, t = [], [], T0_NS
    for stall_ns, work in steps:
        start = t
        t += stall_ns
        for name, kind, device, us in work:
            dur = int(rng.lognormal(np.log(us * 1e3), sigma))
            rows.append({"function": name, "kind": kind, "device": device, "start_ns": t, "end_ns": t + dur,
                         "busy_ns": dur, "tid": 1, "launch_ns": t if kind == "kernel" else -1, "stream": -1,
                         "correlation": -1, "bytes": -1})
            t += dur + 1_000
        marks.append({"name": "step", "start_ns": start, "end_ns": t, "tid": 1, "source": "perfdiff"})
        t += 2_000
    run = RunData(manifest=base_manifest(run_name=out.name, created_ns=T0_NS),
                  activity=normalize_table("activity", pd.DataFrame(rows)),
                  samples=normalize_table("samples", no_samples()),
                  markers=normalize_table("markers", pd.DataFrame(marks if marked else [], columns=MARKER_COLUMNS)))
    return write_bundle(out, run)


def engine_run(out: Path, *, activity: pd.DataFrame, host: pd.DataFrame, starts: np.ndarray, ends: np.ndarray,
               tid: int, seed: int, generator: str, pid: int, collector: dict) -> Path:
    """A bundle at `out` of an engine's steps (perfdiff "EngineCore.step" markers on thread
    `tid`), its activity and host-state rows, no samples, and a manifest naming the synthetic
    `generator`, the target's `pid` and the host collector's entry `collector`."""
    markers = pd.DataFrame({"name": "EngineCore.step", "start_ns": starts, "end_ns": ends, "tid": tid,
                            "source": "perfdiff"})
    manifest = base_manifest(run_name=out.name, created_ns=T0_NS,
                             source={"kind": "synthetic", "generator": generator, "seed": seed},
                             target={"pid": pid, "cmdline": ["python", "serve.py"]},
                             host={"cpu_model": "synthetic CPU", "cores": 8, "kernel": "6.8.0"},
                             collectors=[collector])
    run = RunData(manifest=manifest, activity=normalize_table("activity", pd.concat([activity, host])),
                  samples=normalize_table("samples", no_samples()), markers=normalize_table("markers", markers))
    return write_bundle(out, run)
