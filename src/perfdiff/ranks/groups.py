"""Which communicator (process group) each NCCL kernel of a rank's trace ran on.

With tensor and data parallelism a rank's collectives run on several communicators, and only
a communicator's members take part in its collectives.  Recent PyTorch profilers (Kineto) write
the process group into the args of each NCCL kernel and `record_param_comms` op: "Process Group
Name" (or "pg_name"), "Process Group Ranks" (the members' global ranks), "Group size".  nsys
exports made with `--include-blobs=true` of NCCL with NVTX on hold, in the payload of NCCL's
range around each collective call (ncclAllReduce …), the communicator id, the same on every
member.  Older traces, other exports and bundles say nothing: their collectives stay in one
group of every rank.

The trace's events are not imported twice: the file is searched for the group keys (a chunked
byte search, cheap when absent), and only then are the NCCL kernel events holding them decoded.
They are matched to the imported NCCL kernels by order of start time (both hold the same
kernels of the same file).
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.inputs import trace_kind

__all__ = ["KernelGroups", "UNKNOWN", "kineto_groups", "match_groups", "nsys_groups"]

UNKNOWN = ""  # the group label of a collective whose communicator the trace does not name
CHUNK_BYTES = 8 << 20
EVENT_BYTES = 4096  # more than one kernel event with its args
_KERNEL_NAMES = (b'"ncclDevKernel_', b'"ncclKernel_', b'"void ncclDevKernel_', b'"void ncclKernel_')
_NEEDLES = (b'"Process Group Name"', b'"pg_name"')
_COLLECTIVE = re.compile(r"^(?:void )?nccl(?:Dev)?Kernel_")
_COMM_ID = "NCCL communicator ID"
_NOT_COLLECTIVE = re.compile(r"^nccl(?:CommInit|CommSplit|CommDestroy|CommAbort|CommFinalize|CommShrink|Group)")


@dataclass(frozen=True)
class KernelGroups:
    """The NCCL kernels of a trace that name their group, sorted by start: start (µs, the
    trace's own clock), the group label (name and members), and its members (global ranks;
    () when the trace lists none)."""

    start_us: np.ndarray
    label: list[str]
    members: dict[str, tuple[int, ...]]


def _open(p: Path):
    with open(p, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(p, "rb") if gz else open(p, "rb")


def _mentions_groups(p: Path) -> bool:
    """Whether the file holds a process-group key, read in chunks (never all at once).  The
    profiler writes the same args for every NCCL kernel: a chunk holding one well before its end
    and no key says the trace names no group."""
    tail = b""
    keep = max(len(n) for n in _NEEDLES)
    with _open(p) as fh:
        while chunk := fh.read(CHUNK_BYTES):
            buf = tail + chunk
            if any(n in buf for n in _NEEDLES):
                return True
            at = max(buf.find(k) for k in _KERNEL_NAMES)
            if 0 <= at < len(buf) - EVENT_BYTES:
                return False
            tail = buf[-keep:]
    return False


def _members(raw: object) -> tuple[int, ...]:
    """"[0, 1]", [0, 1] → (0, 1); anything else → ()."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return ()
    if isinstance(raw, list) and raw and all(isinstance(r, int) and not isinstance(r, bool) for r in raw):
        return tuple(sorted(raw))
    return ()


def _events_naming_groups(raw: bytes):
    """The events (decoded) whose args name a process group: found from each key's place (the
    args object around it, the event around that), not by scanning every event."""
    seen = set()
    for needle in _NEEDLES:
        at = raw.find(needle)
        while at >= 0:
            args_open = raw.rfind(b"{", 0, at)
            ev_open = raw.rfind(b"{", 0, args_open)
            args_close = raw.find(b"}", at)
            ev_close = raw.find(b"}", args_close + 1)
            if min(args_open, ev_open, args_close, ev_close) >= 0 and ev_open not in seen:
                seen.add(ev_open)
                try:
                    ev = json.loads(raw[ev_open:ev_close + 1])
                except ValueError:
                    ev = None
                if isinstance(ev, dict):
                    yield ev
            at = raw.find(needle, at + len(needle))


def kineto_groups(path: str | Path) -> KernelGroups | None:
    """The process group of each NCCL kernel of a Kineto trace that names one; None when the
    trace names none (or is not a Kineto trace)."""
    p = Path(path)
    if not p.is_file() or trace_kind(p) != "kineto":
        return None
    try:
        if not _mentions_groups(p):
            return None
        with _open(p) as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return None
    starts, labels, members = [], [], {}
    for ev in _events_naming_groups(raw):
        if str(ev.get("cat", "")).lower() != "kernel" or not _COLLECTIVE.match(str(ev.get("name", ""))):
            continue
        args = ev.get("args") or {}
        name = args.get("Process Group Name", args.get("pg_name"))
        ts = ev.get("ts")
        if name is None or not isinstance(ts, (int, float)):
            continue
        ranks = _members(args.get("Process Group Ranks"))
        label = f"{name} {list(ranks)}" if ranks else str(name)
        members.setdefault(label, ranks)
        starts.append(float(ts))
        labels.append(label)
    if not starts:
        return None
    order = np.argsort(np.asarray(starts), kind="stable")
    return KernelGroups(np.asarray(starts)[order], [labels[i] for i in order], members)


def nsys_groups(path: str | Path, pid: int | None = None) -> KernelGroups | None:
    """The communicator of each NCCL kernel of an nsys export (of process `pid`, None: all):
    NCCL's NVTX range around the call that launched it (ncclAllReduce …) carries the
    communicator id in its payload (docs/STATISTICS.md §11), tied to the kernel by the launch's
    correlation id.  None when the export has no such payload."""
    import sqlite3

    from perfdiff.ranks.identity import columns_of, nccl_ranges, tables_of

    p = Path(path)
    if not p.is_file() or trace_kind(p) != "nsys":
        return None
    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            tables = tables_of(con)
            if not {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"} <= tables:
                return None
            ranges = [r for r in nccl_ranges(con, "nccl%", pid) if isinstance(r[5].get(_COMM_ID), int)
                      and not _NOT_COLLECTIVE.match(r[4])]
            if not ranges:
                return None
            name = "COALESCE(d.value, s.value)" if "demangledName" in columns_of(
                con, "CUPTI_ACTIVITY_KIND_KERNEL") else "s.value"
            where = "" if pid is None else " AND ((k.globalPid >> 24) & 16777215) = ?"
            launches = con.execute(
                f"SELECT k.start, r.globalTid, r.start, {name} FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                "AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215) "
                "LEFT JOIN StringIds s ON s.id = k.shortName "
                + ("LEFT JOIN StringIds d ON d.id = k.demangledName " if name != "s.value" else "")
                + f"WHERE ({name} LIKE '%ncclKernel%' OR {name} LIKE '%ncclDevKernel%'){where}",
                () if pid is None else (pid,)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    launches = [x for x in launches if _COLLECTIVE.match(str(x[3] or ""))]
    if not launches:
        return None
    # The NCCL range on the launching thread that holds the launch (they do not nest: the
    # group calls that could hold them are left out above).
    rg = pd.DataFrame([(int(r[1]), int(r[2]), int(r[3]), f"comm {r[5][_COMM_ID]:#x}") for r in ranges
                       if r[2] is not None and r[3] is not None], columns=["tid", "start", "end", "label"])
    ln = pd.DataFrame([(float(x[0]), int(x[1]), int(x[2])) for x in launches], columns=["k_start", "tid", "at"])
    label = np.full(len(ln), UNKNOWN, dtype=object)
    for tid, r in rg.sort_values("start", kind="stable").groupby("tid"):
        rows = np.flatnonzero(ln["tid"].to_numpy() == tid)
        at = ln["at"].to_numpy()[rows]
        i = np.searchsorted(r["start"].to_numpy(), at, side="right") - 1
        ok = (i >= 0) & (r["end"].to_numpy()[np.maximum(i, 0)] >= at)
        label[rows[ok]] = r["label"].to_numpy()[i[ok]]
    if (label == UNKNOWN).all():
        return None
    order = np.argsort(ln["k_start"].to_numpy(), kind="stable")
    return KernelGroups(ln["k_start"].to_numpy()[order], [str(x) for x in label[order]],
                        {str(x): () for x in set(label)})


def match_groups(groups: KernelGroups | None, n_kernels: int) -> list[str] | None:
    """The group label of each of the run's `n_kernels` NCCL kernels (in start order), or None
    when the trace's named kernels are not exactly those (some unnamed, some dropped on import)."""
    if groups is None or len(groups.label) != n_kernels:
        return None
    return list(groups.label)
