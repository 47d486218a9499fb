"""The CUDA runtime/driver calls of an nsys export: activity kind ``api``, and the launch
join that gives GPU work its launch time and thread (by correlationId)."""
from __future__ import annotations

import numpy as np

from perfdiff.importers.common import Note
from perfdiff.importers.nsys.db import PID_MASK, RUNTIME, Export
from perfdiff.importers.nsys.process import only_pid
from perfdiff.importers.nsys.strings import labels
from perfdiff.model.cuda_names import strip_api_version
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, constant_categorical

__all__ = ["api_part", "launch_lookup", "read_runtime", "runtime_rows"]

RUNTIME_CLASSES = (0, 1)  # CUDA runtime, CUDA driver (ENUM_NSYS_EVENT_CLASS); 67 are backtrace rows


def read_runtime(x: Export) -> dict[str, np.ndarray]:
    """The runtime table's columns, every row (filtered by runtime_rows)."""
    return x.read(RUNTIME, ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"])


def runtime_rows(x: Export, rt: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    """The runtime/driver calls of the imported process (None: the export has no runtime table)."""
    if rt is None:
        x.notes.append(Note("no-runtime", f"no {RUNTIME} table: launch times unknown"))
        return None
    rt = only_pid(x, rt, "globalTid", "api")
    if "eventClass" in rt:
        keep = np.isin(rt["eventClass"], RUNTIME_CLASSES)
        if not keep.all():
            x.dropped["api: backtrace/other event classes"] = int((~keep).sum())
            rt = {k: v[keep] for k, v in rt.items()}
    return rt


def launch_lookup(runtime: dict[str, np.ndarray], corr: np.ndarray) -> np.ndarray:
    """Row of the runtime call with each correlation id (-1 when none); first call wins."""
    rc = runtime.get("correlationId")
    if rc is None or len(rc) == 0 or len(corr) == 0:
        return np.full(len(corr), -1, dtype=np.int64)
    if len(rc) > 1 and bool((rc[1:] >= rc[:-1]).all()):
        # Runtime rows usually come in correlation order: no sort, no table needed.
        pos = np.searchsorted(rc, corr, side="left")
        pos_c = np.minimum(pos, len(rc) - 1)
        hit = (pos < len(rc)) & (rc[pos_c] == corr) & (corr >= 0)
        return np.where(hit, pos_c, -1)
    valid = rc >= 0
    hi = int(max(rc.max(), corr.max()))
    if hi < 8 * len(rc) + (1 << 20):
        # Dense ids (the usual case): a lookup table is O(n), a sort is not.
        table = np.full(hi + 1, -1, dtype=np.int64)
        rows = np.flatnonzero(valid)[::-1]  # reversed so the first row of an id wins
        table[rc[rows]] = rows
        ok = (corr >= 0) & (corr <= hi)
        out = np.full(len(corr), -1, dtype=np.int64)
        out[ok] = table[corr[ok]]
        return out
    order = np.argsort(rc, kind="stable")
    sorted_c = rc[order]
    pos = np.searchsorted(sorted_c, corr, side="left")
    pos_c = np.minimum(pos, len(sorted_c) - 1)
    hit = (pos < len(sorted_c)) & (sorted_c[pos_c] == corr) & (corr >= 0)
    return np.where(hit, order[pos_c], -1)


def api_part(x: Export, rt: dict[str, np.ndarray]) -> Part:
    """Activity rows (kind api) of the runtime calls `rt`."""
    # Last user of the runtime columns (the launch join read them before): work in place.
    n = len(rt["start"])
    start, end = x.to_wall(rt["start"]), x.to_wall(rt["end"])
    function = labels(x, rt["nameId"], strip_api_version) if "nameId" in rt else constant_categorical("<cuda api>", n)
    tid = np.bitwise_and(rt["globalTid"], PID_MASK, out=rt["globalTid"]) if "globalTid" in rt else np.full(
        n, MISSING, np.int64)
    return Part("activity", {"function": function, "kind": constant_categorical("api", n),
                             "device": constant_categorical("Host", n), "start_ns": start, "end_ns": end,
                             "busy_ns": end - start, "tid": tid,
                             "correlation": rt.get("correlationId", np.full(n, MISSING, np.int64))})
