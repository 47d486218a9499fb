"""Which communicator (process group) each NCCL kernel of a rank's trace ran on.

With tensor and data parallelism a rank's collectives run on several communicators, and only
a communicator's members take part in its collectives.  Recent PyTorch profilers (Kineto) write
the process group into the args of each NCCL kernel: "Process Group Name" (or "pg_name") and
"Process Group Ranks" (the members' global ranks); the Kineto importer keeps them per kernel
(RunData.process_groups).  nsys exports made with `--include-blobs=true` of NCCL with NVTX on
hold, in the payload of NCCL's range around each collective call (ncclAllReduce …), the
communicator id, the same on every member; they are read here and matched to the imported NCCL
kernels by order of start time.  Older traces, other exports and bundles say nothing: their
collectives stay in one group of every rank.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.inputs import trace_kind
from perfdiff.model.schema import COLLECTIVE_KERNEL
from perfdiff.model.tables import at_positions

__all__ = ["KernelGroups", "UNKNOWN", "collective_labels", "match_groups", "nsys_groups"]

UNKNOWN = ""  # the group label of a collective whose communicator the trace does not name
_COLLECTIVE = re.compile(COLLECTIVE_KERNEL)
_COMM_ID = "NCCL communicator ID"
_NOT_COLLECTIVE = re.compile(r"^nccl(?:CommInit|CommSplit|CommDestroy|CommAbort|CommFinalize|CommShrink|Group)")


@dataclass(frozen=True)
class KernelGroups:
    """The NCCL kernels of an nsys export, sorted by start: start (ns, the export's own clock)
    and the group label."""

    start_ns: np.ndarray
    label: list[str]


def collective_labels(run: RunData, rows: np.ndarray, path: str | Path, pid: int | None = None) -> np.ndarray:
    """The group label of each NCCL kernel `rows` (positions in run.activity) of the run loaded
    from `path` (process `pid` of an nsys export): the process group's name and, where listed,
    its members ("1 [0, 1]"); UNKNOWN where the trace does not name it.  Kineto traces: per
    kernel, from RunData.process_groups; nsys exports: all or none (`match_groups`)."""
    label = np.full(len(rows), UNKNOWN, dtype=object)
    pg = run.process_groups
    if pg is not None and len(pg):
        group, ranks = pg["group"].astype(object), pg["ranks"].astype(object)
        text = np.where(group.isna(), UNKNOWN, np.where(ranks.isna(), group, group + " " + ranks)).astype(object)
        label = at_positions(pg["row"].to_numpy(), text, rows, UNKNOWN)
    elif pg is None and len(rows) and trace_kind(Path(path)) == "nsys":
        start = run.activity["start_ns"].to_numpy()[rows]
        matched = match_groups(nsys_groups(path, pid), len(rows))
        if matched is not None:
            label[np.argsort(start, kind="stable")] = matched
    return label


def nsys_groups(path: str | Path, pid: int | None = None) -> KernelGroups | None:
    """The communicator of each NCCL kernel of an nsys export (of process `pid`, None: all):
    NCCL's NVTX range around the call that launched it (ncclAllReduce …) carries the
    communicator id in its payload (docs/STATISTICS.md §11), tied to the kernel by the launch's
    correlation id.  None when the export has no such payload."""
    from perfdiff.importers.nsys import query

    p = Path(path)
    if not p.is_file() or trace_kind(p) != "nsys":
        return None
    try:
        con = query.open_export(p)
        try:
            if not query.has_launch_tables(con):
                return None
            ranges = [r for r in query.nccl_ranges(con, "nccl%", pid) if isinstance(r[5].get(_COMM_ID), int)
                      and not _NOT_COLLECTIVE.match(r[4])]
            if not ranges:
                return None
            launches = query.nccl_launches(con, pid)
        finally:
            con.close()
    except query.EXPORT_ERRORS:  # damaged: the collectives' groups stay unknown
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
    return KernelGroups(ln["k_start"].to_numpy()[order], [str(x) for x in label[order]])


def match_groups(groups: KernelGroups | None, n_kernels: int) -> list[str] | None:
    """The group label of each of the run's `n_kernels` NCCL kernels (in start order), or None
    when the export's kernels are not exactly those (some dropped on import)."""
    if groups is None or len(groups.label) != n_kernels:
        return None
    return list(groups.label)
