"""The manifest of an imported nsys export: export metadata, the session start that anchors
the clock, the target process, the GPUs (``TARGET_INFO_GPU``), and what was imported and
dropped."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from perfdiff.bundle import base_manifest
from perfdiff.errors import InputError
from perfdiff.importers.common import ClockDomain, Note, text_notes
from perfdiff.importers.nsys.db import Export
from perfdiff.importers.nsys.metrics import gpu_index_map

__all__ = ["export_meta", "nsys_manifest", "session_start"]


def export_meta(x: Export) -> dict[str, str]:
    """The export's META_DATA_EXPORT (or older EXPORT_META_DATA) name → value."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if x.has(table) and {"name", "value"} <= set(x.cols(table)):
            return {str(k): str(v) for k, v in x.query(f'SELECT name, value FROM "{table}" ORDER BY name, value')}
    return {}


def session_start(x: Export) -> int | None:
    """Wall-clock ns of the session start (TARGET_INFO_SESSION_START_TIME), None when absent."""
    if x.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in x.cols("TARGET_INFO_SESSION_START_TIME"):
        row = x.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if row and row[0][0] is not None:
            if isinstance(row[0][0], bool) or not isinstance(row[0][0], int) or not 0 <= row[0][0] < 2 ** 62:
                raise InputError(f"TARGET_INFO_SESSION_START_TIME.utcEpochNs {str(row[0][0])[:40]!r} is not "
                                 "a time in int64 ns", path=x.path)
            return int(row[0][0])
    x.notes.append(Note("clock-session", "no TARGET_INFO_SESSION_START_TIME: times are ns from the session "
                        "start, not wall clock"))
    return None


def gpu_list(x: Export, used: set[int]) -> list[dict[str, Any]]:
    """manifest GPUs from TARGET_INFO_GPU; `used`: CUDA ordinals the imported work ran on."""
    if not x.has("TARGET_INFO_GPU"):
        return []
    cols = x.cols("TARGET_INFO_GPU")
    want = [c for c in ("id", "cuDevice", "name", "uuid", "smCount", "clockRate", "memoryBandwidth",
                        "totalMemory", "busLocation", "chipName", "l2CacheSize") if c in cols]
    cuda_of = gpu_index_map(x)
    gpus = []
    rows = x.checked(x.query(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU ORDER BY {', '.join(want)}"), "TARGET_INFO_GPU",
                     {want.index(c): c for c in ("id", "cuDevice") if c in want})
    for row in rows:
        r = dict(zip(want, row, strict=True))
        index = r.get("cuDevice", cuda_of.get(int(r["id"]), r["id"]) if r.get("id") is not None else None)
        gpu = {"index": None if index is None else int(index), "nsys_id": r.get("id"), "name": r.get("name"),
               "uuid": r.get("uuid"), "sm_count": r.get("smCount"),
               "max_sm_clock_mhz": None if r.get("clockRate") is None else r["clockRate"] / 1e6,
               "memory_bandwidth_bytes_per_s": r.get("memoryBandwidth"), "memory_total_bytes": r.get("totalMemory"),
               "bus_id": r.get("busLocation"), "chip": r.get("chipName"), "l2_cache_bytes": r.get("l2CacheSize"),
               "used": index is not None and int(index) in used}
        gpus.append({k: v for k, v in gpu.items() if v is not None})
    return sorted(gpus, key=lambda g: (g.get("index") is None, g.get("index", 0)))


def nsys_manifest(x: Export, meta: dict[str, str], activity: pd.DataFrame, tids: list[int]) -> dict[str, Any]:
    """manifest.json of the import (`meta`: export_meta; `tids`: host threads seen)."""
    gpu_rows = activity["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()
    used = {int(str(d).split()[-1]) for d in activity["device"][gpu_rows].unique() if str(d).startswith("GPU ")}
    proc_name = None
    if x.pid is not None and x.has("PROCESSES") and {"pid", "name"} <= set(x.cols("PROCESSES")):
        row = x.query("SELECT name FROM PROCESSES WHERE pid = ? LIMIT 1", (x.pid,))
        proc_name = row[0][0] if row else None
    source = {"kind": "nsys", "path": str(x.path), "format": "sqlite",
              "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
              "nsys_version": meta.get("EXPORT_PRODUCT_VERSION")}
    target: dict[str, Any] = {"pid": x.pid, "tids": tids}
    if proc_name:
        target["name"] = str(proc_name)
    if len(x.process_counts) > 1:
        target["other_pids_with_gpu_work"] = sorted(p for p in x.process_counts if p != x.pid)
    dist = distributed_info(x)
    if dist:
        target["distributed"] = dist
    anchors = ([{"source": "TARGET_INFO_SESSION_START_TIME.utcEpochNs", "utc_epoch_ns": x.t0}]
               if x.t0 is not None else [])
    domain = ClockDomain.REALTIME if x.t0 is not None else ClockDomain.NSYS_SESSION
    clock = {"domain": domain.value, "anchors": anchors}
    imported = {k: int(v) for k, v in x.counts.items()}
    gpus = gpu_list(x, used)  # read before the notes: they count the strings made valid text
    imported["notes"] = [str(n) for n in x.notes + text_notes(x.text)]
    return base_manifest(run_name=x.path.stem, source=source, target=target, gpus=gpus,
                         clock=clock, dropped=dict(x.dropped), **{"import": imported})


# Launcher variables that give a process's rank and the job's size, most specific first.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def launcher_vars(values: Iterable[object]) -> dict[str, int]:
    """The launcher variables (RANK_VARS, SIZE_VARS) among environment entries "NAME=value", as
    integers; the first entry of a name counts, one that is not an integer is left out."""
    wanted = set(RANK_VARS) | set(SIZE_VARS)
    found: dict[str, int] = {}
    for value in values:
        key, _, raw = str(value).partition("=")
        if key in wanted and key not in found:
            try:
                found[key] = int(raw.strip().strip('"'))
            except ValueError:
                continue
    return found


def rank_and_size(found: dict[str, int]) -> dict[str, int]:
    """"rank" and "world_size" from launcher variables (launcher_vars), the most specific
    variable first; a key without a variable is left out."""
    rank = next((found[k] for k in RANK_VARS if k in found), None)
    size = next((found[k] for k in SIZE_VARS if k in found), None)
    return {k: v for k, v in (("rank", rank), ("world_size", size)) if v is not None}


def distributed_info(x: Export) -> dict[str, Any]:
    """Rank and world size of the captured process, from the launcher variables nsys recorded
    in META_DATA_CAPTURE (PROCESS_n:ENVIRONMENT_VARIABLE rows); only these variables are read,
    never the rest of the environment.  Empty when absent."""
    if not x.has("META_DATA_CAPTURE") or not {"name", "value"} <= set(x.cols("META_DATA_CAPTURE")):
        return {}
    rows = x.query("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE' "
                   "ORDER BY name, value")
    return rank_and_size(launcher_vars(value for (value,) in rows))
