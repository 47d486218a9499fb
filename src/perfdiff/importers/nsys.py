"""Import an Nsight Systems SQLite export (``nsys export --type sqlite``) as a RunData.

What is read (FORMATS.md has the tables):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` → activity kind ``kernel``: demangled name (short name with
  ``group="short"``), ``GPU <deviceId>``, stream, correlation, wall-clock start/end;
  ``launch_ns`` and ``tid`` from the CUDA runtime/driver call with the same correlationId in
  the same process (runtime rows of event class 0/1 only: class 67 backtrace rows repeat ids).
- ``…_MEMCPY`` / ``…_MEMSET`` → kinds ``memcpy`` ("Memcpy HtoD (Pinned -> Device)", as Kineto
  names them) and ``memset`` with bytes, joined to their launch the same way.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` → kind ``api`` (device "Host"), names without the ``_v7000``
  version suffix; synchronisation calls are ordinary runtime rows and come along.
- ``NVTX_EVENTS`` push/pop (59, 70) and start/end (60, 71) ranges → markers (source "nvtx")
  and kind ``cpu`` functions whose busy_ns is self time (`perfdiff.intervals`).  The name is
  ``text``, else the registered string ``textId``; a range in a non-default domain is named
  ``domain:text``.  A start/end range belongs to the thread that started it.  Unclosed
  ranges are dropped and counted; marks and thread names are not ranges.
- ``OSRT_API`` calls (event class 27) → kind ``host`` functions (read, poll, ioctl …), busy =
  self time (nested calls are subtracted); ``SCHED_EVENTS`` → kind ``host`` function
  ``oncpu``, one row per on-CPU interval of a thread (sched-in → sched-out).
- ``GPU_METRICS`` + ``TARGET_INFO_GPU_METRICS`` → samples (each covers [t, next t)).
- ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE`` → manifest GPUs; times become wall clock
  through ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``.  Capture-host environment tables
  (``TARGET_INFO_SYSTEM_ENV``, ``META_DATA_CAPTURE``) are never read.

Only one process is imported: ``pid``, or by default the one that launched the most GPU
work.  An export without a kernel table is refused (InputError): perfdiff compares GPU runs.

Speed: the integer tables (kernels, runtime calls, memcpy, OSRT, scheduling) are decoded
straight from the SQLite B-tree pages with numpy (`_PageReader`), because SQLite's own
row-by-row engine plus Python tuples cost 2–4 µs per row; the runtime table is read in a
helper thread while the kernel table is read.  Anything the page reader does not handle
(live WAL file, overflow pages, non-integer values, corrupt pages) falls back to a plain
SELECT, which also reports a damaged file.  NVTX ranges (text columns) go through SQL.
The file is opened read-only (mmap ACCESS_READ and SQLite mode=ro), never written.
"""
from __future__ import annotations

import mmap
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, RunData, base_manifest, empty_table
from perfdiff.errors import InputError
from perfdiff.importers.common import resolve_cores
from perfdiff.model.cuda_names import MEM_KINDS, memcpy_label, strip_api_version
from perfdiff.model.tables import Part, categorical, concat_parts, constant_categorical, dense_codes
from perfdiff.model.intervals import self_time_ns

__all__ = ["import_nsys"]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end, NVTXT push/pop, NVTXT start/end
NVTX_DOMAIN_CREATE = 75
RUNTIME_CLASSES = (0, 1)  # CUDA runtime, CUDA driver (ENUM_NSYS_EVENT_CLASS)
OSRT_CALL_CLASS = 27  # OS runtime call; 31/32 are "profiling started/finished" marks
PID_MASK = 0xFFFFFF
# nsys GPU metric names the registry knows under another name (unit in both).
GPU_METRIC_NAMES = {
    "GPC Clock Frequency [MHz]": "gpu_frequency",
    "SMs Active [Throughput %]": "gpu_sm_util",
    "SM Active [Throughput %]": "gpu_sm_util",
}


def import_nsys(path: str | Path, *, pid: int | None = None, group: str = "full",
                skip: frozenset[str] = frozenset(), cores: int | None = None) -> RunData:
    """Read the nsys SQLite export at `path` into a RunData (times: wall-clock ns).

    `pid` picks the process when the export holds several (default: the one with most GPU
    work); `group="short"` names kernels by their short name; `skip`: activity columns left
    unknown (see concat_parts); `cores`: CPU cores the import may keep busy (None: all).  Bad
    input raises InputError naming the file.
    """
    p = Path(path)
    if group not in ("full", "short"):
        raise ValueError(f"group must be 'full' or 'short', not {group!r}")
    con = _connect(p)
    try:
        return _Import(con, p, pid, group, skip, cores).run()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"cannot read the SQLite export ({exc})", path=p) from None
    finally:
        con.close()


# ------------------------------------------------------------------------------ opening

def _connect(p: Path) -> sqlite3.Connection:
    if not p.exists():
        raise InputError("no such file", path=p)
    if not p.is_file():
        raise InputError("not a file", path=p)
    try:
        with open(p, "rb") as fh:
            magic = fh.read(16)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
    if magic != b"SQLite format 3\x00":
        raise InputError("not a SQLite file (export the report with `nsys export --type sqlite`)", path=p)
    try:
        # mode=ro: never create, never write; immutable is not used so a live WAL is honoured.
        # check_same_thread=False: the runtime table may be read (or, on fallback, queried)
        # from a helper thread; SQLite is built serialized (sqlite3.threadsafety == 3).
        con = sqlite3.connect(f"file:{p.resolve().as_posix()}?mode=ro", uri=True, check_same_thread=False)
        # Exports hold strings from the target (kernel names, NVTX text) that need not be UTF-8.
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"not a readable SQLite database ({exc})", path=p) from None
    return con


class _Import:
    """One import: the connection, the schema found, and the pieces built so far."""

    def __init__(self, con: sqlite3.Connection, path: Path, pid: int | None, group: str,
                 skip: frozenset[str] = frozenset(), cores: int | None = None):
        self.con = con
        self.path = path
        self.want_pid = pid
        self.group = group
        self.skip = skip
        self.cores = resolve_cores(cores)
        self.tables = {name: int(root or 0) for name, root in
                       con.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'")}
        self._cols: dict[str, list[str]] = {}
        self.dropped: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.notes: list[str] = []
        self.reader = _PageReader.open(path)

    # -- schema probing
    def has(self, table: str) -> bool:
        return table in self.tables

    def cols(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')] if self.has(table) else []
        return self._cols[table]

    def read(self, table: str, columns: list[str], where_sql: str = "") -> dict[str, np.ndarray]:
        """Integer columns of `table` as int64 arrays (NULL → MISSING), fastest way available."""
        present = [c for c in columns if c in self.cols(table)]
        if not where_sql and self.reader is not None:
            try:
                return self.reader.read_int_columns(self.tables[table], self.cols(table), present)
            except _Unsupported as why:
                self.notes.append(f"{table}: page reader fell back to SQL ({why})")
            except (IndexError, ValueError) as exc:  # corrupt pages: let SQLite report it
                self.notes.append(f"{table}: page reader fell back to SQL ({exc.__class__.__name__})")
        sel = ", ".join(f'"{c}"' for c in present) or "1"
        rows = self.con.execute(f'SELECT {sel} FROM "{table}" {where_sql}').fetchall()
        out: dict[str, np.ndarray] = {}
        if not present:
            return out
        arr = np.array(rows, dtype=object).reshape(len(rows), len(present))
        for i, c in enumerate(present):
            col = arr[:, i]
            out[c] = np.where(_is_null(col), MISSING, col).astype(np.int64) if len(col) else np.zeros(0, np.int64)
        return out

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.con.execute(sql, args).fetchall()

    # -- the import
    def run(self) -> RunData:
        meta = self._export_meta()
        if not (self.has("StringIds") or meta or any(t.startswith(("CUPTI_", "NVTX_", "TARGET_INFO_")) for t in self.tables)):
            raise InputError("SQLite file is not an Nsight Systems export (no StringIds, no CUPTI/NVTX tables)", path=self.path)
        if not self.has(KERNEL):
            others = [label for table, label in ((RUNTIME, "CUDA API calls"), ("NVTX_EVENTS", "NVTX ranges"),
                                                 ("OSRT_API", "OS runtime calls"), (MEMCPY, "memcpys"))
                      if self.has(table)]
            has = f" (it has {', '.join(others)})" if others else ""
            raise InputError(f"export has no CUDA kernel table {KERNEL}{has}: perfdiff compares GPU runs; "
                             "capture with `nsys profile --trace=cuda`", path=self.path)
        self.strings = self._string_ids()
        self.t0 = self._session_start()
        # The runtime table is the biggest (launches, syncs, copies): read it in a second
        # thread while this one reads the GPU tables (numpy releases the GIL in its loops),
        # where a second core is free for it.
        with ThreadPoolExecutor(max_workers=1) as pool:
            self.cols(RUNTIME)  # schema probe here, not in the helper thread
            rt_future = (pool.submit(self._read_runtime) if self.has(RUNTIME) and self.cores >= 2
                         else None)
            self.name_col = self._kernel_name_column()
            kern = self.read(KERNEL, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
                             + ([self.name_col] if self.name_col else []))
            gpu_parts = self._read_gpu_tables(kern)
            if rt_future is not None:
                rt_raw = rt_future.result()
            else:
                rt_raw = self._read_runtime() if self.has(RUNTIME) else None
        self.pid = self._choose_pid(gpu_parts)
        for kind, cols in gpu_parts.items():
            gpu_parts[kind] = self._only_pid(cols, "globalPid", kind)
        runtime = self._runtime(rt_raw)

        parts: list[Part] = []
        for kind, cols in gpu_parts.items():
            part = self._gpu_part(kind, cols, runtime)
            parts.append(part)
            self.counts[kind] = len(part)
        if runtime is not None:
            api = self._api_part(runtime)
            parts.append(api)
            self.counts["api"] = len(api)
        nvtx_part, markers = self._nvtx()
        if nvtx_part is not None:
            parts.append(nvtx_part)
            self.counts["cpu"] = len(nvtx_part)
        for part, label in ((self._osrt(), "host_osrt"), (self._sched(), "host_oncpu")):
            if part is not None:
                parts.append(part)
                self.counts[label] = len(part)
        activity = concat_parts("activity", parts, self.skip)
        host = activity["tid"].to_numpy()
        tids = sorted(int(t) for t in pd.unique(host[host != MISSING]))
        samples = self._gpu_metrics()
        manifest = self._manifest(meta, activity, tids)
        return RunData(manifest=manifest, activity=activity, samples=samples, markers=markers,
                       path=str(self.path), notes=list(self.notes))

    # -- small tables
    def _export_meta(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table) and {"name", "value"} <= set(self.cols(table)):
                return {str(k): str(v) for k, v in self.query(f'SELECT name, value FROM "{table}"')}
        return {}

    def _string_ids(self) -> dict[int, str]:
        if not self.has("StringIds"):
            return {}
        return {int(i): str(v) for i, v in self.query("SELECT id, value FROM StringIds")}

    def _session_start(self) -> int | None:
        if self.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in self.cols("TARGET_INFO_SESSION_START_TIME"):
            row = self.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            if row and row[0][0] is not None:
                return int(row[0][0])
        self.notes.append("no TARGET_INFO_SESSION_START_TIME: times are ns from the session start, not wall clock")
        return None

    def _wall(self, t: np.ndarray) -> np.ndarray:
        return t + self.t0 if self.t0 is not None else t

    def _to_wall(self, t: np.ndarray) -> np.ndarray:
        """`t` (an array this import owns) shifted to wall clock in place: no new memory."""
        if self.t0 is not None:
            t += self.t0
        return t

    def _labels(self, ids: np.ndarray, transform=None) -> pd.Categorical:
        codes, uniq = dense_codes(ids)
        labels = [self.strings.get(int(u), f"<string {int(u)}>") if u != MISSING else "<unnamed>" for u in uniq]
        if transform is not None:
            labels = [transform(x) for x in labels]
        return categorical(codes, labels)

    def _kernel_name_column(self) -> str | None:
        order = ("shortName", "demangledName", "mangledName", "name") if self.group == "short" else (
            "demangledName", "shortName", "mangledName", "name")
        for col in order:
            if col in self.cols(KERNEL):
                if col != order[0]:
                    self.notes.append(f"kernel names from column {col} ({order[0]} is missing)")
                return col
        return None

    def _read_gpu_tables(self, kern: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        parts = {"kernel": kern}
        for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
            if self.has(table):
                parts[kind] = self.read(table, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                                "bytes", "copyKind", "srcKind", "dstKind", "memKind"])
        return parts

    # -- process selection
    def _choose_pid(self, gpu_parts: dict[str, dict[str, np.ndarray]]) -> int | None:
        pids = np.concatenate([(c["globalPid"] >> 24) & PID_MASK for c in gpu_parts.values() if "globalPid" in c]
                              or [np.empty(0, np.int64)])
        if len(pids) == 0:
            if self.want_pid is not None:
                self.notes.append(f"kernel rows carry no process id: --pid {self.want_pid} not applied")
            return None
        codes, uniq = dense_codes(pids)
        counts = np.bincount(codes, minlength=len(uniq))
        self.process_counts = {int(u): int(c) for u, c in zip(uniq, counts, strict=True)}
        if self.want_pid is not None:
            if self.want_pid not in self.process_counts:
                have = ", ".join(f"{u} ({c} GPU activities)" for u, c in sorted(self.process_counts.items()))
                raise InputError(f"no GPU work of pid {self.want_pid} in the export; processes with GPU work: {have}",
                                 path=self.path)
            return self.want_pid
        best = int(uniq[np.argmax(counts)])
        if len(uniq) > 1:
            self.notes.append(f"{len(uniq)} processes launched GPU work; imported pid {best} (the most); "
                              "choose another with --pid")
        return best

    def _only_pid(self, cols: dict[str, np.ndarray], key: str, what: str) -> dict[str, np.ndarray]:
        """Rows of the imported process (and, when the table has both, with end >= start)."""
        keep = None
        if self.pid is not None and key in cols:
            keep = ((cols[key] >> 24) & PID_MASK) == self.pid
            if not keep.all():
                self._drop(f"{what}: other processes", int((~keep).sum()))
        if "start" in cols and "end" in cols:
            backwards = cols["end"] < cols["start"]
            if backwards.any():  # the bundle holds no interval that ends before it starts
                self._drop(f"{what}: end before start", int((backwards & (keep if keep is not None else True)).sum()))
                keep = ~backwards if keep is None else keep & ~backwards
        if keep is None or keep.all():
            return cols
        return {k: v[keep] for k, v in cols.items()}

    def _drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + n

    # -- CUDA runtime and the launch join
    def _read_runtime(self) -> dict[str, np.ndarray]:
        return self.read(RUNTIME, ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"])

    def _runtime(self, rt: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        if rt is None:
            self.notes.append(f"no {RUNTIME} table: launch times unknown")
            return None
        rt = self._only_pid(rt, "globalTid", "api")
        if "eventClass" in rt:
            keep = np.isin(rt["eventClass"], RUNTIME_CLASSES)
            if not keep.all():
                self.dropped["api: backtrace/other event classes"] = int((~keep).sum())
                rt = {k: v[keep] for k, v in rt.items()}
        return rt

    def _launch_lookup(self, runtime: dict[str, np.ndarray], corr: np.ndarray) -> np.ndarray:
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

    def _gpu_part(self, kind: str, c: dict[str, np.ndarray], runtime: dict[str, np.ndarray] | None) -> Part:
        n = len(c["start"])
        start = self._to_wall(c["start"])
        end = self._to_wall(c["end"])
        corr = c.get("correlationId", np.full(n, MISSING, np.int64))
        launch = np.full(n, MISSING, dtype=np.int64)
        tid = np.full(n, MISSING, dtype=np.int64)
        if runtime is not None and n:
            row = self._launch_lookup(runtime, corr)
            hit = row >= 0
            launch[hit] = self._wall(runtime["start"][row[hit]])
            if "globalTid" in runtime:
                tid[hit] = runtime["globalTid"][row[hit]] & PID_MASK
            self.counts[f"{kind}_launch_joined"] = int(hit.sum())
        if kind == "kernel":
            function = self._kernel_names(c)
        elif kind == "memcpy":
            function = self._memcpy_names(c)
        else:
            function = self._memset_names(c)
        dev_codes, dev_uniq = dense_codes(np.where(c["deviceId"] >= 0, c["deviceId"], 0)) if "deviceId" in c else (
            np.zeros(n, np.int64), np.zeros(1, np.int64))
        device = categorical(dev_codes, [f"GPU {int(d)}" for d in dev_uniq])
        cols = {"function": function, "kind": constant_categorical(kind, n), "device": device,
                "start_ns": start, "end_ns": end, "busy_ns": end - start, "launch_ns": launch, "tid": tid,
                "stream": c.get("streamId", np.full(n, MISSING, np.int64)), "correlation": corr}
        if kind in ("memcpy", "memset"):
            cols["bytes"] = c.get("bytes", np.full(n, MISSING, np.int64))
        return Part("activity", cols)

    def _kernel_names(self, c: dict[str, np.ndarray]) -> pd.Categorical:
        if self.name_col and self.name_col in c:
            return self._labels(c[self.name_col])
        return constant_categorical("<unnamed kernel>", len(c["start"]))

    def _memcpy_names(self, c: dict[str, np.ndarray]) -> pd.Categorical:
        n = len(c["start"])
        ck = c.get("copyKind", np.zeros(n, np.int64))
        sk = c.get("srcKind", np.full(n, MISSING, np.int64))
        dk = c.get("dstKind", np.full(n, MISSING, np.int64))
        # Few distinct (copy, src, dst) triples: name the triples, not the rows.
        key = (ck.clip(-1, 255) + 1) * 65536 + (sk.clip(-1, 255) + 1) * 256 + (dk.clip(-1, 254) + 1)
        codes, uniq = dense_codes(key)
        labels = [memcpy_label(u // 65536 - 1, (u // 256) % 256 - 1, u % 256 - 1) for u in uniq.tolist()]
        return categorical(codes, labels)

    def _memset_names(self, c: dict[str, np.ndarray]) -> pd.Categorical:
        n = len(c["start"])
        if "memKind" not in c:
            return constant_categorical("Memset (Device)", n)
        codes, uniq = dense_codes(c["memKind"].clip(-1, None) + 1)
        labels = [f"Memset ({MEM_KINDS.get(int(u) - 1, 'Device' if u == 0 else f'kind {int(u) - 1}')})" for u in uniq]
        return categorical(codes, labels)

    def _api_part(self, rt: dict[str, np.ndarray]) -> Part:
        # Last user of the runtime columns (the launch join read them before): work in place.
        n = len(rt["start"])
        start, end = self._to_wall(rt["start"]), self._to_wall(rt["end"])
        function = self._labels(rt["nameId"], strip_api_version) if "nameId" in rt else constant_categorical("<cuda api>", n)
        tid = np.bitwise_and(rt["globalTid"], PID_MASK, out=rt["globalTid"]) if "globalTid" in rt else np.full(
            n, MISSING, np.int64)
        return Part("activity", {"function": function, "kind": constant_categorical("api", n),
                                 "device": constant_categorical("Host", n), "start_ns": start, "end_ns": end,
                                 "busy_ns": end - start, "tid": tid,
                                 "correlation": rt.get("correlationId", np.full(n, MISSING, np.int64))})

    # -- NVTX, OS runtime, scheduling
    def _nvtx(self) -> tuple[Part | None, pd.DataFrame]:
        table = "NVTX_EVENTS"
        cols = self.cols(table)
        if not {"start", "end", "eventType"} <= set(cols):
            return None, empty_table("markers")
        text = "n.text" if "text" in cols else "NULL"
        textid = "n.textId" if "textId" in cols else "NULL"
        dom = "n.domainId" if "domainId" in cols else "NULL"
        gtid = "n.globalTid" if "globalTid" in cols else "NULL"
        types = ",".join(map(str, NVTX_RANGE_TYPES))
        rows = self.query(f"SELECT n.start, n.end, {gtid}, {dom}, {text}, {textid} FROM NVTX_EVENTS n "
                          f"WHERE n.eventType IN ({types})")
        domains: dict[int, str] = {}
        if "domainId" in cols and "text" in cols:
            domains = {int(d): str(t) for d, t in self.query(
                f"SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE} AND text IS NOT NULL")
                if d is not None}
        if not rows:
            return None, empty_table("markers")
        arr = np.array(rows, dtype=object).reshape(len(rows), 6)
        start = arr[:, 0].astype(np.int64)
        end = np.where(_is_null(arr[:, 1]), MISSING, arr[:, 1]).astype(np.int64)
        gt = np.where(_is_null(arr[:, 2]), MISSING, arr[:, 2]).astype(np.int64)
        dom = np.where(_is_null(arr[:, 3]), 0, arr[:, 3]).astype(np.int64)
        # Name: the text, else the registered string (textId), prefixed by a non-default domain.
        text_code, text_uniq = pd.factorize(arr[:, 4], use_na_sentinel=True)
        tid_code, tid_uniq = dense_codes(np.where(_is_null(arr[:, 5]), MISSING, arr[:, 5]).astype(np.int64))
        labels_text = [str(t) for t in text_uniq]
        labels_id = [self.strings.get(int(u), f"<string {int(u)}>") if u != MISSING else "<unnamed range>"
                     for u in tid_uniq]
        base = np.where(text_code >= 0, text_code, len(labels_text) + tid_code)
        base_labels = labels_text + labels_id
        dcode, duniq = dense_codes(dom)
        key_code, key_uniq = dense_codes(base * len(duniq) + dcode)
        labels = []
        for k in key_uniq.tolist():
            label, d = base_labels[k // len(duniq)], int(duniq[k % len(duniq)])
            labels.append(label if d == 0 else f"{domains.get(d, f'domain {d}')}:{label}")
        mine = ((gt >> 24) & PID_MASK) == self.pid if self.pid is not None else np.ones(len(start), dtype=bool)
        if (~mine).any():
            self.dropped["nvtx: other processes"] = int((~mine).sum())
        unclosed = int(((end < start) & mine).sum())
        if unclosed:
            self.dropped["nvtx: ranges never closed"] = unclosed
        idx = np.flatnonzero((end >= start) & mine)
        if len(idx) == 0:
            return None, empty_table("markers")
        used_code, used = dense_codes(key_code[idx])  # no categories of dropped ranges
        function = categorical(used_code, [labels[i] for i in used.tolist()])
        s, e = self._wall(start[idx]), self._wall(end[idx])
        tid = np.where(gt[idx] >= 0, gt[idx] & PID_MASK, MISSING)
        busy = self_time_ns(tid, s, e)
        n = len(idx)
        part = Part("activity", {"function": function, "kind": constant_categorical("cpu", n),
                                 "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                                 "busy_ns": busy, "tid": tid})
        markers = concat_parts("markers", [Part("markers", {"name": function, "start_ns": s, "end_ns": e, "tid": tid,
                                                            "source": constant_categorical("nvtx", n)})])
        self.counts["nvtx_ranges"] = n
        return part, markers

    def _osrt(self) -> Part | None:
        if not self.has("OSRT_API"):
            return None
        c = self.read("OSRT_API", ["start", "end", "eventClass", "globalTid", "nameId"])
        c = self._only_pid(c, "globalTid", "host_osrt")
        if "eventClass" in c:
            keep = c["eventClass"] == OSRT_CALL_CLASS
            if not keep.all():
                self.dropped["host_osrt: start/finish marks"] = int((~keep).sum())
                c = {k: v[keep] for k, v in c.items()}
        n = len(c["start"])
        if n == 0 or "nameId" not in c:
            return None
        s, e = self._wall(c["start"]), self._wall(c["end"])
        tid = c["globalTid"] & PID_MASK if "globalTid" in c else np.full(n, MISSING, np.int64)
        return Part("activity", {"function": self._labels(c["nameId"]), "kind": constant_categorical("host", n),
                                 "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                                 "busy_ns": self_time_ns(tid, s, e), "tid": tid})

    def _sched(self) -> Part | None:
        if not self.has("SCHED_EVENTS"):
            return None
        c = self.read("SCHED_EVENTS", ["start", "isSchedIn", "globalTid"])
        if not {"start", "isSchedIn", "globalTid"} <= set(c):
            return None
        c = self._only_pid(c, "globalTid", "host_oncpu")
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
            self.dropped["host_oncpu: unpaired sched-in/out (thread running at capture start or end)"] = unpaired
        n = len(first)
        if n == 0:
            return None
        s, e = self._wall(t[first]), self._wall(t[first + 1])
        return Part("activity", {"function": constant_categorical("oncpu", n), "kind": constant_categorical("host", n),
                                 "device": constant_categorical("Host", n), "start_ns": s, "end_ns": e,
                                 "busy_ns": e - s, "tid": th[first]})

    # -- GPU metrics and the manifest
    def _gpu_metrics(self) -> pd.DataFrame:
        if not (self.has("GPU_METRICS") and self.has("TARGET_INFO_GPU_METRICS")):
            return empty_table("samples")
        mcols = set(self.cols("GPU_METRICS"))
        icols = set(self.cols("TARGET_INFO_GPU_METRICS"))
        if not ({"timestamp", "typeId", "metricId", "value"} <= mcols and {"typeId", "metricId", "metricName"} <= icols):
            self.notes.append("GPU_METRICS present but its columns are not the known ones: not imported")
            return empty_table("samples")
        names = {(int(t), int(m)): str(nm) for t, m, nm in
                 self.query("SELECT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS")}
        rows = self.query("SELECT timestamp, typeId, metricId, value FROM GPU_METRICS ORDER BY typeId, metricId, timestamp")
        if not rows:
            return empty_table("samples")
        a = np.array(rows, dtype=np.float64)
        ts, typ, mid, val = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64), a[:, 3]
        same_next = np.r_[(typ[1:] == typ[:-1]) & (mid[1:] == mid[:-1]), False]
        t_end = np.where(same_next, np.r_[ts[1:], 0], ts)
        key = typ * 1_000_000 + mid
        codes, uniq = dense_codes(key)
        gpu_index = self._gpu_index_map()
        metric_labels = [GPU_METRIC_NAMES.get(names.get((int(k) // 1_000_000, int(k) % 1_000_000), ""),
                                              "nsys:" + names.get((int(k) // 1_000_000, int(k) % 1_000_000),
                                                                  f"metric {int(k) % 1_000_000}")) for k in uniq]
        dcodes, duniq = dense_codes(typ & 0xFF)
        device = categorical(dcodes, [f"GPU {gpu_index.get(int(g), int(g))}" for g in duniq])
        self.counts["gpu_metric_samples"] = len(ts)
        return concat_parts("samples", [Part("samples", {"metric": categorical(codes, metric_labels), "device": device,
                                                         "t_start_ns": self._wall(ts), "t_end_ns": self._wall(t_end),
                                                         "value": val})])

    def _gpu_index_map(self) -> dict[int, int]:
        """nsys GPU id → CUDA device ordinal (the deviceId kernels carry).

        From TARGET_INFO_GPU.cuDevice, else TARGET_INFO_CUDA_DEVICE (gpuId, cudaId) of the
        imported process (older exports).
        """
        if self.has("TARGET_INFO_GPU") and {"id", "cuDevice"} <= set(self.cols("TARGET_INFO_GPU")):
            return {int(i): int(c) for i, c in self.query("SELECT id, cuDevice FROM TARGET_INFO_GPU")
                    if i is not None and c is not None}
        table = "TARGET_INFO_CUDA_DEVICE"
        if self.has(table) and {"gpuId", "cudaId"} <= set(self.cols(table)):
            rows = self.query(f"SELECT gpuId, cudaId{', pid' if 'pid' in self.cols(table) else ', NULL'} FROM {table}")
            mine = [r for r in rows if r[2] is None or self.pid is None or int(r[2]) == self.pid] or rows
            return {int(g): int(c) for g, c, _ in mine if g is not None and c is not None}
        return {}

    def _gpus(self, used: set[int]) -> list[dict[str, Any]]:
        if not self.has("TARGET_INFO_GPU"):
            return []
        cols = self.cols("TARGET_INFO_GPU")
        want = [c for c in ("id", "cuDevice", "name", "uuid", "smCount", "clockRate", "memoryBandwidth",
                            "totalMemory", "busLocation", "chipName", "l2CacheSize") if c in cols]
        cuda_of = self._gpu_index_map()
        gpus = []
        for row in self.query(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU"):
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

    def _manifest(self, meta: dict[str, str], activity: pd.DataFrame, tids: list[int]) -> dict[str, Any]:
        gpu_rows = activity["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()
        used = {int(str(d).split()[-1]) for d in activity["device"][gpu_rows].unique() if str(d).startswith("GPU ")}
        proc_name = None
        if self.pid is not None and self.has("PROCESSES") and {"pid", "name"} <= set(self.cols("PROCESSES")):
            row = self.query("SELECT name FROM PROCESSES WHERE pid = ? LIMIT 1", (self.pid,))
            proc_name = row[0][0] if row else None
        source = {"kind": "nsys", "path": str(self.path), "format": "sqlite",
                  "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
                  "nsys_version": meta.get("EXPORT_PRODUCT_VERSION")}
        target: dict[str, Any] = {"pid": self.pid, "tids": tids}
        if proc_name:
            target["name"] = str(proc_name)
        if getattr(self, "process_counts", None) and len(self.process_counts) > 1:
            target["other_pids_with_gpu_work"] = sorted(p for p in self.process_counts if p != self.pid)
        anchors = ([{"source": "TARGET_INFO_SESSION_START_TIME.utcEpochNs", "utc_epoch_ns": self.t0}]
                   if self.t0 is not None else [])
        clock = {"domain": "CLOCK_REALTIME" if self.t0 is not None else "nsys session time", "anchors": anchors}
        imported = {k: int(v) for k, v in self.counts.items()}
        imported["notes"] = list(self.notes)
        return base_manifest(run_name=self.path.stem, source=source, target=target, gpus=self._gpus(used),
                             clock=clock, dropped=dict(self.dropped), **{"import": imported})


def _is_null(col: np.ndarray) -> np.ndarray:
    """Which entries of an object column fetched from SQLite are NULL."""
    return pd.isna(col) if len(col) else np.zeros(0, dtype=bool)


# ------------------------------------------------------------------------------ page reader

class _Unsupported(Exception):
    """The page reader met something it does not decode; the caller falls back to SQL."""


_SERIAL_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)


class _PageReader:
    """Decodes integer columns of a SQLite table straight from its B-tree pages with numpy.

    SQLite file format (sqlite.org/fileformat2.html): the table's root page leads through
    interior pages (type 5: child page numbers) to leaf pages (type 13) whose cells hold
    (payload length varint, rowid varint, record).  A record is a header of serial-type
    varints then the values, big-endian.  Every step is done for all pages or all rows at
    once.  Tables whose rows spill to overflow pages, non-integer values in a requested
    column, and databases with a live WAL file raise `_Unsupported`.
    """

    def __init__(self, buf: mmap.mmap, size: int):
        self.buf = buf
        self.u8 = np.frombuffer(buf, dtype=np.uint8)
        self.size = size
        hdr = bytes(self.u8[:100])
        ps = int.from_bytes(hdr[16:18], "big")
        self.page_size = 65536 if ps == 1 else ps
        self.usable = self.page_size - hdr[20]
        # Big-endian 8-byte words starting at every byte (unaligned view, no copy).
        self.be8 = np.ndarray(shape=(max(size - 7, 0),), dtype=">i8", buffer=buf, offset=0, strides=(1,))
        self.le8 = np.ndarray(shape=(max(size - 7, 0),), dtype="<u8", buffer=buf, offset=0, strides=(1,))
        self.be2 = np.ndarray(shape=(max(size - 1, 0),), dtype=">u2", buffer=buf, offset=0, strides=(1,))
        self.be4 = np.ndarray(shape=(max(size - 3, 0),), dtype=">u4", buffer=buf, offset=0, strides=(1,))

    @classmethod
    def open(cls, path: Path) -> "_PageReader | None":
        wal = Path(str(path) + "-wal")
        try:
            if wal.exists() and wal.stat().st_size > 0:
                return None  # rows may live in the WAL: let SQLite read them
            size = os.path.getsize(path)
            if size < 512:
                return None
            with open(path, "rb") as fh:
                # MAP_POPULATE maps every page in one call: the reader touches most of the
                # file, and one fault per 4 KiB page costs more than the reading itself.
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                buf = mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
            return cls(buf, size)
        except (OSError, ValueError):
            return None

    # -- primitive readers (vectorised over positions)
    def _be(self, pos: np.ndarray, nbytes: int) -> np.ndarray:
        """Unsigned big-endian integers of 2 or 4 bytes at each position (page headers)."""
        view = self.be2 if nbytes == 2 else self.be4
        return view[pos].astype(np.int64)

    def _word(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each position as a little-endian uint64 (zero-padded past the end)."""
        if len(pos) == 0 or int(pos.max()) <= self.size - 8:
            return self.le8[pos]
        tail = pos > self.size - 8
        w = self.le8[np.where(tail, 0, pos)]
        i = np.flatnonzero(tail)
        w[i] = self._padded(pos[i], big_endian=False)
        return w

    def _varint_len(self, pos: np.ndarray) -> np.ndarray:
        """Length in bytes of the SQLite varint at each position (1..9)."""
        z = ~self._word(pos) & np.uint64(0x8080808080808080)  # bytes whose high bit is clear
        low = z & (~z + np.uint64(1))  # lowest such byte (little-endian: the first one)
        n = (np.bitwise_count(low - np.uint64(1)).astype(np.int64) + 1) >> 3
        return np.where(z == 0, 9, n)

    def _varint(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, length in bytes) of the SQLite varint at each position."""
        b = self.u8[pos].astype(np.int64)
        if not (b & 0x80).any():
            return b, np.ones(len(pos), dtype=np.int64)
        val = b & 0x7F
        length = np.ones(len(pos), dtype=np.int64)
        going = (b & 0x80) != 0
        for k in range(1, 9):
            idx = np.flatnonzero(going)
            if len(idx) == 0:
                break
            nb = self.u8[pos[idx] + k].astype(np.int64)
            if k == 8:  # the ninth byte contributes all 8 bits
                val[idx] = (val[idx] << 8) | nb
                going[idx] = False
            else:
                val[idx] = (val[idx] << 7) | (nb & 0x7F)
                going[idx] = (nb & 0x80) != 0
            length[idx] += 1
        return val, length

    def _check_pages(self, pages: np.ndarray) -> None:
        if len(pages) and (pages.min() < 1 or (pages.max()) * self.page_size > self.size):
            raise _Unsupported("page number outside the file")

    # -- B-tree walk
    def leaf_cells(self, root: int) -> np.ndarray:
        """File offsets of every cell of the table rooted at `root`, in rowid order."""
        pages = np.array([root], dtype=np.int64)
        for _ in range(64):  # a B-tree deeper than 64 levels is not a SQLite file
            self._check_pages(pages)
            base = (pages - 1) * self.page_size
            hoff = base + np.where(pages == 1, 100, 0)
            typ = self.u8[hoff]
            ncell = self._be(hoff + 3, 2)
            if (typ == 13).all():
                leaf = True
            elif (typ == 5).all():
                leaf = False
            else:
                raise _Unsupported("mixed or non-table B-tree pages")
            total = int(ncell.sum())
            owner = np.repeat(np.arange(len(pages)), ncell)
            within = np.arange(total) - np.repeat(np.cumsum(ncell) - ncell, ncell)
            ptr_pos = hoff[owner] + (8 if leaf else 12) + 2 * within
            cells = base[owner] + self._be(ptr_pos, 2)
            if leaf:
                return cells
            child = self._be(cells, 4)
            right = self._be(hoff + 8, 4)
            # children in key order: each page's cells, then its right-most pointer
            key = np.concatenate((owner * (1 << 20) + within, np.arange(len(pages)) * (1 << 20) + (1 << 20) - 1))
            pages = np.concatenate((child, right))[np.argsort(key, kind="stable")]
        raise _Unsupported("B-tree too deep")

    def read_int_columns(self, root: int, table_cols: list[str], want: list[str]) -> dict[str, np.ndarray]:
        """The integer columns `want` of a table (its columns in order: `table_cols`)."""
        cells = self.leaf_cells(root)
        n = len(cells)
        out = {c: np.empty(n, dtype=np.int64) for c in want}
        if n == 0 or not want:
            return out
        need = {table_cols.index(c): c for c in want}
        # Blocks of rows small enough for the temporaries to stay in cache.
        for lo in range(0, n, _BLOCK):
            got = self._read_block(cells[lo:lo + _BLOCK], need)
            for name, values in got.items():
                out[name][lo:lo + len(values)] = values
        return out

    def _read_block(self, cells: np.ndarray, need: dict[int, str]) -> dict[str, np.ndarray]:
        payload, l1 = self._varint(cells)
        if payload.max() > self.usable - 35:
            raise _Unsupported("rows spill to overflow pages")
        rec = cells + l1 + self._varint_len(cells + l1)  # record start (after the rowid)
        rec_end = rec + payload
        hsize = self.u8[rec].astype(np.int64)
        last = max(need)
        if not (hsize.max() < 128 and int(hsize.min()) >= last + 2):
            return self._read_general(rec, rec_end, need)
        # Fast path: serial types up to `last` are one byte each (no long text before them):
        # read them 8 at a time as little-endian words; byte c of word k = column 8k + c.
        words = [self._word(rec + 1 + 8 * k).view(np.uint8).reshape(-1, 8) for k in range(last // 8 + 1)]
        tail_safe = int(rec_end.max()) + 8 <= self.size  # no value within 8 bytes of the file end
        offset = rec + hsize  # where the next column's value starts
        out: dict[str, np.ndarray] = {}
        for col in range(last + 1):
            st = words[col >> 3][:, col & 7]  # a strided view: no copy
            if int(st.max()) >= 128:  # a multi-byte serial type (long text): columns shift
                return self._read_general(rec, rec_end, need)
            if col in need:
                out[need[col]] = self._values(st, offset, tail_safe)
            if col < last:
                offset = offset + _SIZE_LUT[st]
        return out

    def _read_general(self, rec: np.ndarray, rec_end: np.ndarray, need: dict[int, str]) -> dict[str, np.ndarray]:
        """Record decoding one column at a time with full varints (multi-byte serial types)."""
        n = len(rec)
        hsize, l3 = self._varint(rec)
        hdr_end = rec + hsize
        cursor = rec + l3
        body = rec + hsize
        offset = np.zeros(n, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for col in range(max(need) + 1):
            present = cursor < hdr_end  # rows written before an ALTER TABLE ADD COLUMN lack it
            st, ln = self._varint(np.where(present, cursor, rec))
            st = np.where(present, st, 0)
            cursor = cursor + np.where(present, ln, 0)
            if col in need:
                out[need[col]] = self._values(st, body + offset)
            if ((st == 10) | (st == 11)).any():
                raise _Unsupported("reserved serial type")
            offset += np.where(st >= 12, (st - 12) >> 1, _SERIAL_SIZE[np.clip(st, 0, 11)])
        if (body + offset > rec_end).any():
            raise _Unsupported("record longer than its payload")
        return out

    def _values(self, st: np.ndarray, pos: np.ndarray, tail_safe: bool = False) -> np.ndarray:
        """Signed big-endian integers of serial types `st` stored at file offsets `pos`."""
        lo, hi = int(st.min()), int(st.max())
        if lo == hi and lo in (0, 8, 9):  # the whole column is NULL, 0 or 1 (no bytes stored)
            return np.full(len(st), {0: MISSING, 8: 0, 9: 1}[lo], dtype=np.int64)
        if hi >= 7 and _BAD_INT[st].any():
            raise _Unsupported("text, blob or float in an integer column")
        if not tail_safe and int(pos.max()) > self.size - 8:  # a value in the last 8 bytes
            tail = pos > self.size - 8
            raw = self.be8[np.where(tail, 0, pos)].astype(np.int64)
            i = np.flatnonzero(tail)
            raw[i] = self._padded(pos[i], big_endian=True).view(np.int64)
        else:
            raw = self.le8[pos].byteswap().view(np.int64)  # native gather, then swap: faster
        # Arithmetic shift right: keeps the value's `size` leading bytes, extends the sign.
        if lo == hi:
            raw >>= _SHIFT_LUT[lo]
        else:
            raw >>= _SHIFT_LUT[st]
        if lo == 0 or hi >= 8:
            np.putmask(raw, st == 8, 0)
            np.putmask(raw, st == 9, 1)
            np.putmask(raw, st == 0, MISSING)
        return raw

    def _padded(self, pos: np.ndarray, big_endian: bool) -> np.ndarray:
        """8 bytes at each position as uint64, zero bytes past the end of the file."""
        out = np.zeros(len(pos), dtype=np.uint64)
        for k in range(8):
            byte = np.where(pos + k < self.size, self.u8[np.minimum(pos + k, self.size - 1)], 0).astype(np.uint64)
            out |= byte << np.uint64(8 * (7 - k) if big_endian else 8 * k)
        return out


# serial type → byte size (types ≥ 12 are blobs/text of (t-12)//2 bytes), shift that keeps
# that many bytes of a big-endian 8-byte word, and "not an integer" flags.
_SIZE_LUT = np.array([_SERIAL_SIZE[t] if t < 12 else (t - 12) >> 1 for t in range(256)], dtype=np.int64)
_SHIFT_LUT = np.array([64 - 8 * int(_SERIAL_SIZE[t]) if 1 <= t <= 6 else 0 for t in range(256)], dtype=np.int64)
_BLOCK = 1 << 17  # rows per block of the page reader
_BAD_INT = np.array([t == 7 or t >= 10 for t in range(256)], dtype=bool)
