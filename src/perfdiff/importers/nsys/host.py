"""The host side of an nsys export beyond CUDA and NVTX: OS runtime calls (``OSRT_API``,
kind ``host``, self time) and on-CPU intervals from the scheduler (``SCHED_EVENTS``, kind
``host`` function ``oncpu``)."""
from __future__ import annotations

import numpy as np

from perfdiff.importers.nsys.db import PID_MASK, Export
from perfdiff.importers.nsys.process import only_pid
from perfdiff.importers.nsys.strings import labels
from perfdiff.model.intervals import self_time_ns
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, constant_categorical

__all__ = ["osrt", "sched"]

OSRT_CALL_CLASS = 27  # OS runtime call; 31/32 are "profiling started/finished" marks


def osrt(x: Export) -> Part | None:
    """Activity rows of the OS runtime calls (read, poll, ioctl ...), busy = self time."""
    if not x.has("OSRT_API"):
        return None
    c = x.read("OSRT_API", ["start", "end", "eventClass", "globalTid", "nameId"])
    c = only_pid(x, c, "globalTid", "host_osrt")
    if "eventClass" in c:
        keep = c["eventClass"] == OSRT_CALL_CLASS
        if not keep.all():
            x.dropped["host_osrt: start/finish marks"] = int((~keep).sum())
            c = {k: v[keep] for k, v in c.items()}
    n = len(c["start"])
    if n == 0 or "nameId" not in c:
        return None
    s, e = x.wall(c["start"]), x.wall(c["end"])
    tid = c["globalTid"] & PID_MASK if "globalTid" in c else np.full(n, MISSING, np.int64)
    return Part("activity", {"function": labels(x, c["nameId"]), "kind": constant_categorical("host", n),
                             "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                             "busy_ns": self_time_ns(tid, s, e), "tid": tid})


def sched(x: Export) -> Part | None:
    """Activity rows of the on-CPU intervals of each thread (sched-in → sched-out)."""
    if not x.has("SCHED_EVENTS"):
        return None
    c = x.read("SCHED_EVENTS", ["start", "isSchedIn", "globalTid"])
    if not {"start", "isSchedIn", "globalTid"} <= set(c):
        return None
    c = only_pid(x, c, "globalTid", "host_oncpu")
    if len(c["start"]) == 0:
        return None
    tid = c["globalTid"] & PID_MASK
    order = np.lexsort((c["isSchedIn"] == 0, c["start"], tid))  # sched-out before sched-in at a tie
    t, s_in, th = c["start"][order], c["isSchedIn"][order] != 0, tid[order]
    # An on-CPU interval is a sched-in followed by a sched-out of the same thread.
    pair = s_in[:-1] & ~s_in[1:] & (th[:-1] == th[1:])
    first = np.flatnonzero(pair)
    unpaired = len(t) - 2 * len(first)
    if unpaired:
        x.dropped["host_oncpu: unpaired sched-in/out (thread running at capture start or end)"] = unpaired
    n = len(first)
    if n == 0:
        return None
    s, e = x.wall(t[first]), x.wall(t[first + 1])
    return Part("activity", {"function": constant_categorical("oncpu", n), "kind": constant_categorical("host", n),
                             "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                             "busy_ns": e - s, "tid": th[first]})
