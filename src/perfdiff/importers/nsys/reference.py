"""A plain reader of nsys SQLite exports: one SQL query per table and a Python loop per row.

It gives the tables import_nsys gives (activity, markers, samples; the same rows in some
order) by the rules of the package docstring, written out one row at a time, and shares
nothing with the importer but perfdiff.model (self time, CUDA names, table dtypes).  Tests
compare the importer against it; it is not used to import, and it expects a valid export.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.importers.common import UNNAMED, event_name, valid_text
from perfdiff.importers.nsys.db import open_readonly
from perfdiff.model.cuda_names import MEM_KINDS, memcpy_label, strip_api_version
from perfdiff.model.intervals import self_time_ns
from perfdiff.model.schema import MISSING, SCHEMAS
from perfdiff.model.tables import empty_table, normalize_table

__all__ = ["reference_tables"]

_GPU_TABLES = (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
               ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"))
_METRIC_NAMES = {"GPC Clock Frequency [MHz]": "gpu_frequency", "SMs Active [Throughput %]": "gpu_sm_util",
                 "SM Active [Throughput %]": "gpu_sm_util"}


def _pid(global_id: int | None) -> int | None:
    return None if global_id is None else (global_id >> 24) & 0xFFFFFF


def _tid(global_tid: int | None) -> int:
    return MISSING if global_tid is None or global_tid < 0 else global_tid & 0xFFFFFF


def _int(v: Any) -> int:
    return MISSING if v is None else int(v)


class _Reader:
    def __init__(self, con: sqlite3.Connection, pid: int | None, group: str):
        self.con = con
        self.tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.strings = ({i: valid_text(event_name(v)) for i, v in self.rows("SELECT id, value FROM StringIds")}
                        if "StringIds" in self.tables else {})
        t0 = (self.rows("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
              if "utcEpochNs" in self.cols("TARGET_INFO_SESSION_START_TIME") else [])
        self.t0 = int(t0[0][0]) if t0 and t0[0][0] is not None else 0
        self.group = group
        self.pid = pid if pid is not None else self.busiest_pid()

    def cols(self, table: str) -> list[str]:
        return [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')] if table in self.tables else []

    def rows(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()

    def select(self, table: str, columns: list[str], where: str = "") -> list[dict[str, Any]]:
        """Rows of `table` in rowid order as dicts; a column the table lacks is absent from them."""
        have = [c for c in columns if c in self.cols(table)]
        if table not in self.tables:
            return []
        columns_sql = ", ".join('"' + c + '"' for c in have) or "1"
        sql = f'SELECT {columns_sql} FROM "{table}" {where}'
        return [dict(zip(have, r, strict=True)) for r in self.rows(sql + " ORDER BY rowid")]

    def string(self, sid: int | None, unnamed: str = UNNAMED) -> str:
        """The string `sid` names; an id of None or MISSING (-1) names none, as in the importer."""
        return unnamed if sid is None or sid == MISSING else str(self.strings.get(sid, f"<string {sid}>"))

    def busiest_pid(self) -> int | None:
        """The process with the most GPU rows (of a tie, the smallest pid)."""
        counts: dict[int, int] = {}
        for table, _ in _GPU_TABLES:
            if "globalPid" in self.cols(table):
                for (g,) in self.rows(f'SELECT globalPid FROM "{table}"'):
                    p = _pid(MISSING if g is None else g)
                    counts[p] = counts.get(p, 0) + 1
        return min(counts, key=lambda p: (-counts[p], p)) if counts else None

    def mine(self, row: dict[str, Any], key: str) -> bool:
        """Whether `row` belongs to the imported process and does not end before it starts."""
        if self.pid is not None and key in row and _pid(MISSING if row[key] is None else row[key]) != self.pid:
            return False
        return not ("start" in row and "end" in row and row["end"] < row["start"])

    # -- the tables
    def runtime(self) -> list[dict[str, Any]]:
        rows = self.select("CUPTI_ACTIVITY_KIND_RUNTIME",
                           ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"])
        return [r for r in rows if self.mine(r, "globalTid") and r.get("eventClass", 0) in (0, 1)]

    def gpu_work(self, runtime: list[dict[str, Any]]) -> list[dict[str, Any]]:
        launches: dict[int, dict[str, Any]] = {}

        def when(r: dict[str, Any]) -> tuple:
            return tuple(MISSING if r.get(c) is None else r[c]
                         for c in ("start", "end", "eventClass", "globalTid", "correlationId", "nameId"))

        # The first call with a correlation id, in time order (whatever the table's order), is its launch.
        for r in sorted(runtime, key=when):
            if r.get("correlationId") is not None and r["correlationId"] >= 0:
                launches.setdefault(r["correlationId"], r)
        order = ("shortName", "demangledName", "mangledName", "name") if self.group == "short" else (
            "demangledName", "shortName", "mangledName", "name")
        name_col = next((c for c in order if c in self.cols("CUPTI_ACTIVITY_KIND_KERNEL")), None)
        out = []
        for table, kind in _GPU_TABLES:
            cols = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
                    "srcKind", "dstKind", "memKind"] + ([name_col] if kind == "kernel" and name_col else [])
            for r in self.select(table, cols):
                if not self.mine(r, "globalPid"):
                    continue
                if kind == "kernel":
                    function = self.string(r[name_col]) if name_col else "<unnamed kernel>"
                elif kind == "memcpy":
                    function = memcpy_label(_int(r.get("copyKind", 0)), _int(r.get("srcKind")), _int(r.get("dstKind")))
                else:
                    mk = _int(r.get("memKind"))
                    function = f"Memset ({MEM_KINDS.get(mk, 'Device' if mk < 0 else f'kind {mk}')})"
                corr = _int(r.get("correlationId"))
                launch = launches.get(corr) if corr >= 0 else None
                device = _int(r.get("deviceId"))
                out.append({"function": function, "kind": kind, "device": f"GPU {max(device, 0)}",
                            "start_ns": r["start"] + self.t0, "end_ns": r["end"] + self.t0,
                            "busy_ns": r["end"] - r["start"],
                            "launch_ns": MISSING if launch is None else launch["start"] + self.t0,
                            "tid": MISSING if launch is None else _tid(launch.get("globalTid")),
                            "stream": _int(r.get("streamId")), "correlation": corr,
                            "bytes": _int(r.get("bytes")) if kind != "kernel" else MISSING})
        return out

    def api(self, runtime: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"function": strip_api_version(self.string(r["nameId"])) if "nameId" in r else "<cuda api>",
                 "kind": "api", "device": "Host",
                 "start_ns": r["start"] + self.t0, "end_ns": r["end"] + self.t0, "busy_ns": r["end"] - r["start"],
                 "tid": _tid(r.get("globalTid")), "correlation": _int(r.get("correlationId"))} for r in runtime]

    def nvtx(self, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(ranges, markers); a range's busy_ns is its self time less the ranges and the CUDA
        `calls` nested in it on its thread."""
        cols = self.cols("NVTX_EVENTS")
        if not {"start", "end", "eventType"} <= set(cols):
            return [], []
        domains = {}
        if {"domainId", "text"} <= set(cols):
            domains = {d: valid_text(t) for d, t in self.rows("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75 "
                                                  "AND text IS NOT NULL ORDER BY rowid") if d is not None}
        ranges = []
        for r in self.select("NVTX_EVENTS", ["start", "end", "globalTid", "domainId", "text", "textId"],
                             "WHERE eventType IN (59, 60, 70, 71)"):
            if self.pid is not None and _pid(MISSING if r.get("globalTid") is None else r["globalTid"]) != self.pid:
                continue
            if r["end"] is None or r["end"] < r["start"]:  # never closed
                continue
            name = valid_text(str(r["text"])) if r.get("text") not in (None, "") else self.string(r.get("textId"))
            domain = r.get("domainId") or 0
            if domain != 0:
                name = f"{domains.get(domain, f'domain {domain}')}:{name}"
            ranges.append({"function": name, "kind": "cpu", "device": "Host", "start_ns": r["start"] + self.t0,
                           "end_ns": r["end"] + self.t0, "tid": _tid(r.get("globalTid"))})
        _self_time(ranges, calls)
        markers = [{"name": r["function"], "start_ns": r["start_ns"], "end_ns": r["end_ns"], "tid": r["tid"],
                    "source": "nvtx"} for r in ranges]
        return ranges, markers

    def osrt(self) -> list[dict[str, Any]]:
        if "nameId" not in self.cols("OSRT_API"):
            return []
        calls = [{"function": self.string(r["nameId"]), "kind": "host", "device": "Host",
                  "start_ns": r["start"] + self.t0, "end_ns": r["end"] + self.t0, "tid": _tid(r.get("globalTid"))}
                 for r in self.select("OSRT_API", ["start", "end", "eventClass", "globalTid", "nameId"])
                 if self.mine(r, "globalTid") and r.get("eventClass", 27) == 27]
        _self_time(calls)
        return calls

    def oncpu(self) -> list[dict[str, Any]]:
        if not {"start", "isSchedIn", "globalTid"} <= set(self.cols("SCHED_EVENTS")):
            return []
        events = [r for r in self.select("SCHED_EVENTS", ["start", "isSchedIn", "globalTid"])
                  if self.mine(r, "globalTid")]
        # Per thread in time order (a sched-in first at a tie, then file order); an on-CPU
        # interval is a sched-in directly followed by a sched-out of the same thread.
        events.sort(key=lambda r: (_tid(r["globalTid"]), r["start"], r["isSchedIn"] == 0))
        out = []
        for a, b in zip(events[:-1], events[1:], strict=True):
            if a["isSchedIn"] and not b["isSchedIn"] and _tid(a["globalTid"]) == _tid(b["globalTid"]):
                out.append({"function": "oncpu", "kind": "host", "device": "Host", "start_ns": a["start"] + self.t0,
                            "end_ns": b["start"] + self.t0, "busy_ns": b["start"] - a["start"],
                            "tid": _tid(a["globalTid"])})
        return out

    def samples(self) -> list[dict[str, Any]]:
        if not ({"timestamp", "typeId", "metricId", "value"} <= set(self.cols("GPU_METRICS"))
                and {"typeId", "metricId", "metricName"} <= set(self.cols("TARGET_INFO_GPU_METRICS"))):
            return []
        names = {(t, m): str(n) for t, m, n in self.rows("SELECT typeId, metricId, metricName FROM "
                                                          "TARGET_INFO_GPU_METRICS")}
        rows = self.rows("SELECT timestamp, typeId, metricId, value FROM GPU_METRICS "
                         "ORDER BY typeId, metricId, timestamp, value")  # ties: as the importer orders them
        ordinal = self.cuda_ordinals()
        out = []
        for i, (ts, typ, mid, value) in enumerate(rows):
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            end = nxt[0] if nxt is not None and (nxt[1], nxt[2]) == (typ, mid) else ts
            name = names.get((typ, mid))
            metric = _METRIC_NAMES.get(name or "", "nsys:" + (name if name is not None else f"metric {mid}"))
            out.append({"metric": metric, "device": f"GPU {ordinal.get(typ & 0xFF, typ & 0xFF)}",
                        "t_start_ns": ts + self.t0, "t_end_ns": end + self.t0, "value": float(value)})
        return out

    def cuda_ordinals(self) -> dict[int, int]:
        """nsys GPU id → CUDA device ordinal."""
        if {"id", "cuDevice"} <= set(self.cols("TARGET_INFO_GPU")):
            return {i: c for i, c in self.rows("SELECT id, cuDevice FROM TARGET_INFO_GPU")
                    if i is not None and c is not None}
        cols = self.cols("TARGET_INFO_CUDA_DEVICE")
        if not {"gpuId", "cudaId"} <= set(cols):
            return {}
        rows = self.rows(f"SELECT gpuId, cudaId, {'pid' if 'pid' in cols else 'NULL'} FROM TARGET_INFO_CUDA_DEVICE")
        mine = [r for r in rows if r[2] is None or self.pid is None or r[2] == self.pid] or rows
        return {g: c for g, c, _ in mine if g is not None and c is not None}


def _self_time(ranges: list[dict[str, Any]], inside: list[dict[str, Any]] = ()) -> None:
    """busy_ns of each range: its self time among the ranges of its thread and the rows
    `inside` (perfdiff.model.intervals), which keep theirs."""
    if ranges:
        both = [*ranges, *inside]
        col = lambda k: np.array([r[k] for r in both], dtype=np.int64)
        for r, b in zip(ranges, self_time_ns(col("tid"), col("start_ns"), col("end_ns")), strict=False):
            r["busy_ns"] = int(b)


def reference_tables(path: str | Path, pid: int | None = None, group: str = "full") -> dict[str, pd.DataFrame]:
    """{"activity", "markers", "samples"} of the nsys export at `path`, read the plain way."""
    con = open_readonly(Path(path))
    try:
        r = _Reader(con, pid, group)
        runtime = r.runtime()
        calls = r.api(runtime)
        ranges, markers = r.nvtx(calls)
        activity = r.gpu_work(runtime) + calls + ranges + r.osrt() + r.oncpu()
        return {"activity": _table("activity", activity), "markers": _table("markers", markers),
                "samples": _table("samples", r.samples())}
    finally:
        con.close()


def _table(name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    if not rows:
        return empty_table(name)
    # A column a row lacks is unknown there (MISSING); every column built whole, never via NaN.
    return normalize_table(name, pd.DataFrame({c: [r.get(c, MISSING) for r in rows] for c in SCHEMAS[name]}))
