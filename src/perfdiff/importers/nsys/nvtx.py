"""NVTX ranges of an nsys export: push/pop and start/end ranges become markers (source
"nvtx") and activity kind ``cpu`` with self time.  The name is ``text``, else the registered
string ``textId``; a range in a non-default domain is named ``domain:text``.  Unclosed ranges
are dropped and counted."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.importers.common import UNNAMED
from perfdiff.importers.nsys.db import PID_MASK, Export
from perfdiff.model.intervals import self_time_ns
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, categorical, concat_parts, constant_categorical, dense_codes, empty_table

__all__ = ["nvtx"]

NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end, NVTXT push/pop, NVTXT start/end
NVTX_DOMAIN_CREATE = 75


def nvtx(x: Export, calls: Part | None = None) -> tuple[Part | None, pd.DataFrame]:
    """(activity rows, markers) of the imported process's NVTX ranges.  A range's busy is its
    self time less the ranges and the CUDA `calls` (the runtime rows, where read) nested
    directly in it on its thread, as a PyTorch-profiler op's is less its runtime calls: a range
    around a cudaStreamSynchronize waits in that call, not in its own code."""
    table = "NVTX_EVENTS"
    cols = x.cols(table)
    if not {"start", "end", "eventType"} <= set(cols):
        return None, empty_table("markers")
    text = "n.text" if "text" in cols else "NULL"
    textid = "n.textId" if "textId" in cols else "NULL"
    dom = "n.domainId" if "domainId" in cols else "NULL"
    gtid = "n.globalTid" if "globalTid" in cols else "NULL"
    types = ",".join(map(str, NVTX_RANGE_TYPES))
    rows = x.query(f"SELECT n.start, n.end, {gtid}, {dom}, {text}, {textid} FROM NVTX_EVENTS n "
                      f"WHERE n.eventType IN ({types}) "
                      # One order whatever the table's (exports are not in time order from
                      # Nsight Systems 2025.6 on): the names' codes and the rows follow it.
                      f"ORDER BY n.start, n.end, {gtid}, {dom}, {text}, {textid}")
    domains: dict[int, str] = {}
    if "domainId" in cols and "text" in cols:
        domains = {d: x.text.fix(str(t)) for d, t in x.checked(x.query(
            f"SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE} AND text IS NOT NULL"),
            table, {0: "domainId"}) if d is not None}
    if not rows:
        return None, empty_table("markers")
    arr = np.array(rows, dtype=object).reshape(len(rows), 6)
    start = x.ints(arr[:, 0], table, "start")
    end = x.ints(arr[:, 1], table, "end")
    gt = x.ints(arr[:, 2], table, "globalTid")
    dom = x.ints(arr[:, 3], table, "domainId", null=0)
    # Name: the text (an empty one as none), else the registered string (textId), prefixed by
    # a non-default domain.
    text = arr[:, 4].copy()
    text[text == ""] = None
    text_code, text_uniq = pd.factorize(text, use_na_sentinel=True)
    tid_code, tid_uniq = dense_codes(x.ints(arr[:, 5], table, "textId"))
    labels_text = [x.text.fix(str(t)) for t in text_uniq]
    labels_id = [x.text.fix(x.strings.get(int(u), f"<string {int(u)}>")) if u != MISSING else UNNAMED for u in tid_uniq]
    base = np.where(text_code >= 0, text_code, len(labels_text) + tid_code)
    base_labels = labels_text + labels_id
    dcode, duniq = dense_codes(dom)
    key_code, key_uniq = dense_codes(base * len(duniq) + dcode)
    labels = []
    for k in key_uniq.tolist():
        label, d = base_labels[k // len(duniq)], int(duniq[k % len(duniq)])
        labels.append(label if d == 0 else f"{domains.get(d, f'domain {d}')}:{label}")
    mine = ((gt >> 24) & PID_MASK) == x.pid if x.pid is not None else np.ones(len(start), dtype=bool)
    if (~mine).any():
        x.dropped["nvtx: other processes"] = int((~mine).sum())
    closed = (end >= start) & (start != MISSING)  # NULL start or end (MISSING): not a range
    unclosed = int((~closed & mine).sum())
    if unclosed:
        x.dropped["nvtx: ranges never closed"] = unclosed
    idx = np.flatnonzero(closed & mine)
    if len(idx) == 0:
        return None, empty_table("markers")
    used_code, used = dense_codes(key_code[idx])  # no categories of dropped ranges
    function = categorical(used_code, [labels[i] for i in used.tolist()])
    s, e = x.wall(start[idx]), x.wall(end[idx])
    tid = np.where(gt[idx] >= 0, gt[idx] & PID_MASK, MISSING)
    if calls is not None:
        c = calls.columns
        busy = self_time_ns(np.concatenate([tid, c["tid"]]), np.concatenate([s, c["start_ns"]]),
                            np.concatenate([e, c["end_ns"]]))[:len(s)]
    else:
        busy = self_time_ns(tid, s, e)
    n = len(idx)
    part = Part("activity", {"function": function, "kind": constant_categorical("cpu", n),
                             "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                             "busy_ns": busy, "tid": tid})
    markers = concat_parts("markers", [Part("markers", {"name": function, "start_ns": s, "end_ns": e, "tid": tid,
                                                        "source": constant_categorical("nvtx", n)})])
    x.counts["nvtx_ranges"] = n
    return part, markers
