"""The manifest of an imported Kineto trace: its source, target process and threads, GPUs
(``deviceProperties``), clock, and what was imported and dropped."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.bundle import base_manifest
from perfdiff.importers.kineto.clock import TraceClock
from perfdiff.importers.kineto.events import ROLES, Events
from perfdiff.model.tables import dense_codes

__all__ = ["kineto_manifest"]


def _category_era(cat_counts: dict[str, int]) -> str:
    """Which generation of Kineto category names the trace uses (for the manifest)."""
    if any(cat_counts.get(c) for c in ("Kernel", "Runtime", "Operator", "Memcpy", "Memset")):
        return "2021 (Kernel/Runtime/Operator)"
    return "2022+ (kernel/cuda_runtime/cpu_op)"


def kineto_manifest(p: Path, ev: Events, clock: TraceClock, pid: np.ndarray, role: np.ndarray, tid: np.ndarray,
                    activity: pd.DataFrame, notes: list[str], cat_counts: dict[str, int]) -> dict[str, Any]:
    """manifest.json of the trace at `p`: `pid`, `role`, `tid` are the event columns."""
    header = ev.header
    host = np.isin(role, [ROLES.index("api"), ROLES.index("cpu")])
    hp = pid[host]
    hp = hp[hp >= 0]
    pids = sorted(int(x) for x in pd.unique(hp)) if len(hp) else []
    main_pid = None
    if len(hp):
        codes, uniq = dense_codes(hp)
        main_pid = int(uniq[np.argmax(np.bincount(codes))])
    ht = tid[host & (pid == (main_pid if main_pid is not None else -2))]
    tids = sorted(int(x) for x in pd.unique(ht[ht >= 0])) if len(ht) else []
    used = {int(str(d).split()[-1]) for d in activity["device"].unique() if str(d).startswith("GPU ")}
    gpus = []
    for d in header.get("deviceProperties") or []:
        if not isinstance(d, dict):
            continue
        g = {"index": d.get("id"), "name": d.get("name"), "sm_count": d.get("numSms"),
             "memory_total_bytes": d.get("totalGlobalMem"),
             "compute_capability": (f"{d['computeMajor']}.{d['computeMinor']}"
                                    if "computeMajor" in d and "computeMinor" in d else None),
             "uuid": d.get("uuid"), "used": d.get("id") in used}
        gpus.append({k: v for k, v in g.items() if v is not None})
    source = {"kind": "kineto", "path": str(p), "format": "json.gz" if p.suffix == ".gz" else "json",
              "schema_version": header.get("schemaVersion"), "categories": _category_era(cat_counts),
              "reader": ev.path_used, "decoded_bytes": ev.decoded_bytes}
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version"):
        if key in header and isinstance(header[key], (int, float, str)):
            source[key] = header[key]
    target: dict[str, Any] = {"pid": main_pid, "pids": pids, "tids": tids}
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        target["distributed"] = {k: v for k, v in dist.items() if isinstance(v, (int, float, str))}
    imported = dict(ev.counts)
    imported["notes"] = [str(n) for n in notes]
    return base_manifest(run_name=_run_name(p), source=source, target=target, gpus=gpus, clock=clock.manifest(),
                         dropped=dict(ev.dropped), **{"import": imported})


def _run_name(p: Path) -> str:
    name = p.name
    for suffix in (".gz", ".json", ".pt.trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or p.stem
