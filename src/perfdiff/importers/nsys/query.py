"""Narrow queries of an nsys export for perfdiff.ranks, which reads a few rows of an export
to tell its processes apart and name each NCCL kernel's communicator, never its events:

- `kernel_pids`, `kernel_devices`, `collective_pids`: the processes that launched kernels,
  each one's GPUs, and those that ran collective kernels (CUPTI_ACTIVITY_KIND_KERNEL.globalPid,
  deviceId, the kernel's name);
- `gpu_work`, `kernel_names`, `process_names`, `cuda_pids`: for an export whose processes are
  not ranks, each process's GPU activities per GPU (the kernel, memcpy and memset tables), the
  names of its kernels, its name (PROCESSES.name) and the processes that made CUDA calls
  (CUPTI_ACTIVITY_KIND_RUNTIME.globalTid);
- `process_environments`, `launcher_environment`: the environment nsys recorded of the
  processes it started (PROCESS_n:ENVIRONMENT_VARIABLE rows of META_DATA_CAPTURE, tied to a
  process by its PROCESS_n:PID row);
- `nccl_ranges`: NCCL's NVTX ranges with the integers of their extended payloads: exports
  made with `--include-blobs=true` carry it in NVTX_EVENTS.binaryData (a 32-byte header:
  domain, schema, payload size, payload offset, each a little-endian u64), decoded by
  NVTX_PAYLOAD_SCHEMA_ENTRIES (name, offset); some exports give it as JSON in jsonText;
- `nccl_launches`: each NCCL kernel with the CUDA call that launched it (the same
  correlationId in CUPTI_ACTIVITY_KIND_RUNTIME).

Open an export with `open_export` (read-only); a damaged one raises one of EXPORT_ERRORS.
"""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from perfdiff.model.cuda_names import is_collective_kernel

__all__ = ["EXPORT_ERRORS", "Connection", "QueryError", "collective_pids", "cuda_pids", "decode_payload", "gpu_work",
           "has_kernel_table", "has_launch_tables", "kernel_devices", "kernel_names", "kernel_pids",
           "launcher_environment", "nccl_launches", "nccl_ranges", "open_export", "payload_fields",
           "process_environments", "process_names"]

Connection = sqlite3.Connection  # an open export (open_export)
QueryError = sqlite3.Error  # what a query of a damaged or unexpected export raises
EXPORT_ERRORS = (sqlite3.Error, UnicodeDecodeError)  # and of an export whose schema text is damaged

_HEADER_BYTES = 32
_PROCESS_KEY = re.compile(r"^PROCESS_(\d+):(PID|ENVIRONMENT_VARIABLE)$")
_PID = "(({col} >> 24) & 16777215)"  # the pid in a globalPid / globalTid


def open_export(p: Path) -> sqlite3.Connection:
    """The nsys export at `p`, read-only (the importer's way); EXPORT_ERRORS pass through."""
    from perfdiff.importers.nsys.db import open_readonly  # pandas: not imported before an export is read

    return open_readonly(p)


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def has_kernel_table(con: sqlite3.Connection) -> bool:
    """Whether the export has a kernel table (CUPTI_ACTIVITY_KIND_KERNEL)."""
    return "CUPTI_ACTIVITY_KIND_KERNEL" in _tables(con)


def kernel_pids(con: sqlite3.Connection) -> list[int]:
    """The pids of the processes that launched GPU kernels, in order.  The usual export holds
    one: a scan that stops at the first row of another globalPid tells so, without a DISTINCT
    over millions of rows (a third less time); only an export with another globalPid is read
    for all of them."""
    first = con.execute(f"SELECT globalPid, {_PID.format(col='globalPid')} FROM CUPTI_ACTIVITY_KIND_KERNEL "
                        "WHERE globalPid IS NOT NULL LIMIT 1").fetchone()
    if first is None:
        return []
    if con.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid != ? LIMIT 1", (first[0],)).fetchone() is None:
        return [int(first[1])]  # every row with a globalPid has this one
    rows = con.execute(f"SELECT DISTINCT {_PID.format(col='globalPid')} FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    return sorted(int(r[0]) for r in rows if r[0] is not None)


def kernel_devices(con: sqlite3.Connection) -> dict[int, set[int]]:
    """pid → the GPU device ids its kernels ran on."""
    rows = con.execute(f"SELECT DISTINCT {_PID.format(col='globalPid')}, deviceId "
                       "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    devices: dict[int, set[int]] = {}
    for pid, dev in rows:
        if pid is not None and dev is not None:
            devices.setdefault(int(pid), set()).add(int(dev))
    return devices


def collective_pids(con: sqlite3.Connection) -> set[int]:
    """The pids of the processes that ran collective kernels (is_collective_kernel)."""
    cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    if "StringIds" not in _tables(con) or not cols & {"demangledName", "shortName"}:
        return set()
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    # The distinct (process, name) pairs first: a few names, however many kernels.
    rows = con.execute(f"SELECT k.pid, s.value FROM (SELECT DISTINCT {_PID.format(col='globalPid')} AS pid, "
                       f"{name_col} AS name FROM CUPTI_ACTIVITY_KIND_KERNEL) k "
                       "JOIN StringIds s ON s.id = k.name WHERE s.value LIKE '%ccl%Kernel%'").fetchall()
    return {int(pid) for pid, name in rows if pid is not None and is_collective_kernel(str(name or ""))}


GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def gpu_work(con: sqlite3.Connection) -> dict[int, dict[int, int]]:
    """pid → {GPU device id → its GPU activities there (kernels, memcpys, memsets)}; -1 for
    rows that name no device.  The rows the import counts when it picks a process."""
    tables = _tables(con)
    out: dict[int, dict[int, int]] = {}
    for table in GPU_TABLES:
        cols = _columns(con, table) if table in tables else set()
        if "globalPid" not in cols:
            continue
        dev = "deviceId" if "deviceId" in cols else "-1"
        for pid, d, n in con.execute(f"SELECT {_PID.format(col='globalPid')}, {dev}, COUNT(*) FROM {table} "
                                     "GROUP BY 1, 2"):
            if pid is None:
                continue
            per = out.setdefault(int(pid), {})
            key = int(d) if d is not None else -1
            per[key] = per.get(key, 0) + int(n)
    return out


def kernel_names(con: sqlite3.Connection) -> dict[int, set[str]]:
    """pid → the names of the kernels it launched (demangled where the export has them)."""
    cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") if has_kernel_table(con) else set()
    if "StringIds" not in _tables(con) or "globalPid" not in cols or not cols & {"demangledName", "shortName"}:
        return {}
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    rows = con.execute(f"SELECT k.pid, s.value FROM (SELECT DISTINCT {_PID.format(col='globalPid')} AS pid, "
                       f"{name_col} AS name FROM CUPTI_ACTIVITY_KIND_KERNEL) k "
                       "JOIN StringIds s ON s.id = k.name").fetchall()
    out: dict[int, set[str]] = {}
    for pid, name in rows:
        if pid is not None:
            out.setdefault(int(pid), set()).add(str(name or ""))
    return out


def process_names(con: sqlite3.Connection) -> dict[int, str]:
    """pid → the process's name as nsys recorded it (PROCESSES.name); {} without that table."""
    if "PROCESSES" not in _tables(con) or not {"pid", "name"} <= _columns(con, "PROCESSES"):
        return {}
    return {int(pid): str(name) for pid, name in con.execute("SELECT pid, name FROM PROCESSES")
            if pid is not None and name is not None}


def cuda_pids(con: sqlite3.Connection) -> set[int]:
    """The pids of the processes that made CUDA runtime calls (whether or not they launched
    GPU work)."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in _tables(con) \
            or "globalTid" not in _columns(con, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        return set()
    rows = con.execute(f"SELECT DISTINCT {_PID.format(col='globalTid')} FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    return {int(r[0]) for r in rows if r[0] is not None}


def process_environments(con: sqlite3.Connection) -> list[tuple[int, list[object]]]:
    """(pid, its environment entries "NAME=value") of every process nsys recorded a pid of,
    in the order of its process numbers; [] when the export has no capture metadata."""
    if "META_DATA_CAPTURE" not in _tables(con):
        return []
    pid_of: dict[str, int] = {}
    env: dict[str, list[object]] = {}
    for name, value in con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%'"):
        m = _PROCESS_KEY.match(str(name))
        if not m:
            continue
        if m.group(2) == "PID":
            try:
                pid_of[m.group(1)] = int(str(value).strip())
            except ValueError:
                continue
            continue
        env.setdefault(m.group(1), []).append(value)
    return [(pid, env.get(n, [])) for n, pid in pid_of.items()]


def launcher_environment(con: sqlite3.Connection) -> list[object]:
    """Every environment entry "NAME=value" nsys recorded, of any process."""
    rows = con.execute("SELECT value FROM META_DATA_CAPTURE "
                       "WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'").fetchall()
    return [value for (value,) in rows]


def payload_fields(con: sqlite3.Connection, tables: set[str]) -> dict[tuple[int, int], list[tuple[str, int, int]]]:
    """(domain, schema) → [(entry name, byte offset, byte width)], from the payload schema tables."""
    if not {"NVTX_PAYLOAD_SCHEMA_ENTRIES", "NVTX_PAYLOAD_SCHEMAS"} <= tables:
        return {}
    sizes = {(int(d), int(s)): int(n) for d, s, n in con.execute(
        "SELECT domainId, schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS") if n is not None}
    rows = con.execute("SELECT domainId, schemaId, idx, name, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
                       "ORDER BY domainId, schemaId, idx").fetchall()
    out: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
    for d, s, _, name, off in rows:
        if off is not None:
            out.setdefault((int(d), int(s)), []).append((str(name), int(off), 0))
    for key, entries in out.items():
        entries.sort(key=lambda e: e[1])
        ends = [e[1] for e in entries[1:]] + [sizes.get(key, entries[-1][1] + 8)]
        out[key] = [(n, off, end - off) for (n, off, _), end in zip(entries, ends, strict=True)]
    return out


def decode_payload(blob: object, fields: dict[tuple[int, int], list[tuple[str, int, int]]]) -> dict[str, int]:
    """The integer entries of one NVTX extended payload blob, by entry name ({} when unreadable)."""
    try:
        raw = bytes.fromhex(blob) if isinstance(blob, str) else bytes(blob)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    if len(raw) < _HEADER_BYTES:
        return {}
    domain, schema, size, offset = (int.from_bytes(raw[i:i + 8], "little") for i in range(0, _HEADER_BYTES, 8))
    body = raw[offset:offset + size]
    out = {}
    for name, off, width in fields.get((domain, schema), []):
        if width in (1, 2, 4, 8) and off + width <= len(body):
            out[name] = int.from_bytes(body[off:off + width], "little", signed=width < 8)
    return out


def nccl_ranges(con: sqlite3.Connection, like: str, pid: int | None = None) -> list[tuple]:
    """NCCL's NVTX ranges whose name is LIKE `like` (of process `pid`; None: all), each
    (pid, globalTid, start, end, name, {payload entry: int}); [] when the export has none."""
    tables = _tables(con)
    table = next((t for t in ("NVTX_EVENTS", "NVTX_EVENTS_V3", "NVTX_EVENTS_V2") if t in tables), None)
    if table is None:
        return []
    cols = _columns(con, table)
    payload_cols = [c for c in ("binaryData", "jsonText") if c in cols]
    if not payload_cols or "globalTid" not in cols:
        return []
    text = "COALESCE(n.text, s.value)" if "textId" in cols and "StringIds" in tables else "n.text"
    join = "LEFT JOIN StringIds s ON s.id = n.textId" if text != "n.text" else ""
    where = f"{text} LIKE ?" + ("" if pid is None else " AND ((n.globalTid >> 24) & 16777215) = ?")
    rows = con.execute(f"SELECT (n.globalTid >> 24) & 16777215, n.globalTid, n.start, n.end, {text}, "
                       f"{', '.join('n.' + c for c in payload_cols)} FROM {table} n {join} WHERE {where}",
                       (like,) if pid is None else (like, pid)).fetchall()
    fields = payload_fields(con, tables) if rows and "binaryData" in payload_cols else {}
    out = []
    for p, tid, start, end, name, *payloads in rows:
        values: dict = {}
        for col, v in zip(payload_cols, payloads, strict=True):
            if v is None:
                continue
            if col == "jsonText":
                try:
                    doc = json.loads(v)
                except (TypeError, ValueError):
                    continue
                values.update({k: x for k, x in doc.items() if isinstance(x, int)} if isinstance(doc, dict) else {})
            else:
                values.update(decode_payload(v, fields))
        out.append((int(p), tid, start, end, str(name or ""), values))
    return out


def has_launch_tables(con: sqlite3.Connection) -> bool:
    """Whether the export has the kernel, CUDA-call and string tables `nccl_launches` reads."""
    return {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"} <= _tables(con)


def nccl_launches(con: sqlite3.Connection, pid: int | None = None) -> list[tuple]:
    """Each collective kernel (perfdiff.model.cuda_names.is_collective_kernel: NCCL's, RCCL's)
    of process `pid` (None: all) with the CUDA call that launched it (the same correlation id
    in the same process): (kernel start, the call's globalTid, the call's start, the kernel's
    name).  Needs `has_launch_tables`."""
    name = "COALESCE(d.value, s.value)" if "demangledName" in _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") \
        else "s.value"
    where = "" if pid is None else " AND ((k.globalPid >> 24) & 16777215) = ?"
    rows = con.execute(
        f"SELECT k.start, r.globalTid, r.start, {name} FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215) "
        "LEFT JOIN StringIds s ON s.id = k.shortName "
        + ("LEFT JOIN StringIds d ON d.id = k.demangledName " if name != "s.value" else "")
        + f"WHERE {name} LIKE '%ccl%Kernel%'{where}",
        () if pid is None else (pid,)).fetchall()
    # SQL's LIKE narrows the rows; the one rule of the collective kernels decides.
    return [r for r in rows if is_collective_kernel(str(r[3] or ""))]
