"""Which communicator (process group) each NCCL kernel of a rank's trace ran on.

With tensor and data parallelism a rank's collectives run on several communicators, and only
a communicator's members take part in its collectives.  Recent PyTorch profilers (Kineto) write
the process group into the args of each NCCL kernel and `record_param_comms` op: "Process Group
Name" (or "pg_name"), "Process Group Ranks" (the members' global ranks), "Group size".  Older
traces, nsys exports and bundles say nothing: their collectives stay in one group of every rank.

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

from perfdiff.inputs import trace_kind

__all__ = ["KernelGroups", "UNKNOWN", "kineto_groups", "match_groups"]

UNKNOWN = ""  # the group label of a collective whose communicator the trace does not name
CHUNK_BYTES = 8 << 20
EVENT_BYTES = 4096  # more than one kernel event with its args
_KERNEL_NAMES = (b'"ncclDevKernel_', b'"ncclKernel_', b'"void ncclDevKernel_', b'"void ncclKernel_')
_NEEDLES = (b'"Process Group Name"', b'"pg_name"')
_COLLECTIVE = re.compile(r"^(?:void )?nccl(?:Dev)?Kernel_")


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


def match_groups(groups: KernelGroups | None, n_kernels: int) -> list[str] | None:
    """The group label of each of the run's `n_kernels` NCCL kernels (in start order), or None
    when the trace's named kernels are not exactly those (some unnamed, some dropped on import)."""
    if groups is None or len(groups.label) != n_kernels:
        return None
    return list(groups.label)
