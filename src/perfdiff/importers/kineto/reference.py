"""A plain reader of Kineto traces: ``json.loads`` and one Python loop, slow but easy to check.

It gives the tables import_kineto gives (activity, markers, samples, the GPU-side ranges as
"gpu_ranges" and the NCCL kernels' process groups as "process_groups"; the same rows in some
order) by the rules of the package docstring, written out one event at a time, and shares
nothing with the fast path but the category lists and the helpers of perfdiff.model (self
time, table dtypes).  Tests compare the importer against it; it is not used to import.
"""
from __future__ import annotations

import gzip
import json
import re
from decimal import ROUND_DOWN, Context, Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from perfdiff.importers.common import event_name, valid_text
from perfdiff.importers.kineto.events import CAT_NAMES, CATEGORIES, ROLES, STEP
from perfdiff.importers.kineto.names import short_kernel_name
from perfdiff.model.intervals import self_time_ns
from perfdiff.model.schema import COLLECTIVE_KERNEL, MISSING
from perfdiff.model.tables import empty_table, normalize_table

__all__ = ["reference_tables"]


def _ns(v: Any) -> int:
    """µs (an int or a Decimal) → ns, the decimals beyond the third cut off (towards zero)."""
    if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
        raise TypeError(v)
    return int(Context(prec=40, rounding=ROUND_DOWN).multiply(v, 1000))  # no rounding up of .999...


def _int(v: Any) -> int:
    """A pid/tid/args integer: an int, or the first number inside a string ("stream 7");
    unknown when it has more than 18 digits (int64 holds 18 whole)."""
    if isinstance(v, bool):
        return MISSING
    if isinstance(v, str):
        m = re.search(r"\d+", v)
        v = int(m.group()) if m and len(m.group()) <= 18 else None
    if isinstance(v, int):
        return v if abs(v) < 10 ** 18 else MISSING
    return MISSING


def _arg(args: dict[str, Any], key: str) -> int:
    v = args.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10 ** 18 else MISSING


def _canonical_key(row: tuple[str, dict[str, Any], int, int]) -> tuple:
    role, e, start, end = row
    args = _args(e)
    name = e.get("name")
    return (start, start - end, ROLES.index(role), _int(e.get("pid")), _int(e.get("tid")),
            event_name(name), CAT_NAMES.index(e["cat"]), _arg(args, "correlation"), _arg(args, "stream"),
            _arg(args, "device"), _arg(args, "bytes"))


def reference_tables(path: str | Path, group: str = "full") -> dict[str, pd.DataFrame]:
    """{"activity", "markers", "samples", "gpu_ranges", "process_groups"} of the Kineto trace at
    `path`, read the plain way ("row" of "process_groups": a row of this "activity")."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    header = doc if isinstance(doc, dict) else {}
    base = header.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float, Decimal)) and not isinstance(base, bool) else 0

    # The events imported, in file order: (role, event, start, end).
    rows: list[tuple[str, dict[str, Any], int, int]] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("cat"), str):
            continue
        role = CATEGORIES.get(e["cat"])
        if role is None:
            continue
        try:
            start, dur = _ns(e["ts"]), _ns(e.get("dur", 0))
        except (KeyError, TypeError):
            continue
        if dur < 0:  # an interval that ends before it starts is dropped
            continue
        rows.append((role, e, start + base_ns, start + base_ns + dur))

    # The host-side events in one order whatever the file's (the importer's Events.canonical):
    # by time, longer first, then every other column; GPU events stay in file order.
    host_at = [i for i, r in enumerate(rows) if ROLES.index(r[0]) >= ROLES.index("api")]
    for i, r in zip(host_at, sorted((rows[i] for i in host_at), key=_canonical_key), strict=True):
        rows[i] = r

    launches: dict[int, tuple[int, int]] = {}  # correlation id → (start, tid) of its first runtime call
    for role, e, start, _ in rows:
        corr = _arg(_args(e), "correlation")
        if role == "api" and corr >= 0 and corr not in launches:
            launches[corr] = (start, _int(e.get("tid")))

    activity: list[dict[str, Any]] = []
    markers: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = []
    cpu: list[dict[str, Any]] = []
    gpu_ranges: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    for role, e, start, end in rows:
        args = _args(e)
        name = valid_text(event_name(e.get("name")))
        pid, tid, corr = _int(e.get("pid")), _int(e.get("tid")), _arg(args, "correlation")
        if role in ("kernel", "memcpy", "memset"):
            # A GPU event's pid is its device and its tid its stream, else args says so.
            device = pid if pid >= 0 else _arg(args, "device")
            launch, launch_tid = launches.get(corr, (MISSING, MISSING)) if corr >= 0 else (MISSING, MISSING)
            if role == "kernel" and re.match(COLLECTIVE_KERNEL, name):
                groups.append({"row": len(activity), **_process_group(args)})
            activity.append({
                "function": short_kernel_name(name) if group == "short" and role == "kernel" else name,
                "kind": role, "device": f"GPU {max(device, 0)}", "start_ns": start, "end_ns": end,
                "busy_ns": end - start, "launch_ns": launch, "tid": launch_tid,
                "stream": tid if tid >= 0 else _arg(args, "stream"), "correlation": corr,
                "bytes": MISSING if role == "kernel" else _arg(args, "bytes")})
            continue
        if role == "gpu_range":
            gpu_ranges.append({"name": name, "device": f"GPU {max(pid if pid >= 0 else _arg(args, 'device'), 0)}",
                               "stream": tid if tid >= 0 else _arg(args, "stream"), "start_ns": start,
                               "end_ns": end})
            continue
        step = role == "cpu" and STEP.match(name) is not None
        if step or e["cat"] == "user_annotation":
            markers.append({"name": name, "start_ns": start, "end_ns": end, "tid": tid,
                            "source": "profiler_step" if step else "annotation"})
        if step:
            continue
        row = {"function": name, "kind": role, "device": "Host", "start_ns": start, "end_ns": end,
               "busy_ns": end - start, "launch_ns": MISSING, "tid": tid, "stream": MISSING, "correlation": corr,
               "bytes": MISSING}
        (api if role == "api" else cpu).append(row)
    # Self time of the CPU ranges, over the runtime calls and CPU ranges of each thread.  The
    # runtime calls come first: of two identical ranges the first listed is the parent.
    host = api + cpu
    if host:
        busy = self_time_ns(pd.array([r["tid"] for r in host], dtype="int64").to_numpy(),
                            pd.array([r["start_ns"] for r in host], dtype="int64").to_numpy(),
                            pd.array([r["end_ns"] for r in host], dtype="int64").to_numpy())
        for r, b in zip(cpu, busy[len(api):], strict=True):
            r["busy_ns"] = int(b)
    activity += host
    return {"activity": _table("activity", activity), "markers": _table("markers", markers),
            "samples": empty_table("samples"),
            "gpu_ranges": pd.DataFrame(gpu_ranges) if gpu_ranges else empty_table("gpu_ranges"),
            "process_groups": (pd.DataFrame(groups).astype({"group": "category", "ranks": "category"}) if groups
                               else empty_table("process_groups"))}


def _process_group(args: dict[str, Any]) -> dict[str, Any]:
    """{"group", "ranks"} of an NCCL kernel's args: "Process Group Name" (else "pg_name"), a
    string or an integer; "Process Group Ranks", a list of integers or one written in a
    string, as "[0, 1]" sorted.  None where the args do not say."""
    name = args["Process Group Name"] if "Process Group Name" in args else args.get("pg_name")
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        return {"group": None, "ranks": None}
    ranks = args.get("Process Group Ranks")
    if isinstance(ranks, str):
        try:
            ranks = json.loads(ranks)
        except ValueError:
            ranks = None
    ok = isinstance(ranks, list) and len(ranks) > 0 and all(type(r) is int for r in ranks)
    return {"group": valid_text(str(name)), "ranks": "[" + ", ".join(map(str, sorted(ranks))) + "]" if ok else None}


def _args(e: dict[str, Any]) -> dict[str, Any]:
    return e["args"] if isinstance(e.get("args"), dict) else {}


def _table(name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    return normalize_table(name, pd.DataFrame(rows)) if rows else empty_table(name)
