"""Which rank each process of one nsys export holding several processes is.

An export records, per source and most trusted first:

- the launcher variables (`RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID` …) of a
  process nsys started or attached to, as `PROCESS_n:ENVIRONMENT_VARIABLE` rows of
  META_DATA_CAPTURE tied to that process by its `PROCESS_n:PID` row.  nsys records the
  environment of the processes it launched, not of their children: a job started as
  `nsys profile torchrun …` has none for its ranks;
- the rank NCCL gave each process: NCCL (2.19 and later, with NVTX on) annotates
  `ncclCommInitRank*` with an NVTX range whose extended payload holds the communicator id, the
  number of ranks and the rank.  Exports made with `--include-blobs=true` carry it in
  NVTX_EVENTS.binaryData (a 32-byte header: domain, schema, payload size, payload offset, each a
  little-endian u64), decoded by NVTX_PAYLOAD_SCHEMA_ENTRIES (name, offset); some exports give
  it as JSON in jsonText.  The communicator with the most ranks is the world's;
- the GPU each process ran its kernels on (CUPTI_ACTIVITY_KIND_KERNEL.deviceId), when each
  process used one GPU and no two the same: ranks in device order (one node's local ranks);
- else pid order, said so.

Only metadata and these few rows are read, never the trace's events.
"""
from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass

from perfdiff.ranks.records import MAX_RANK, IdentitySource

__all__ = ["ProcessRanks", "decode_payload", "nccl_ranges", "payload_fields", "process_ranks"]

_HEADER_BYTES = 32
_INIT = re.compile(r"^ncclCommInitRank")
_PROCESS_KEY = re.compile(r"^PROCESS_(\d+):(PID|ENVIRONMENT_VARIABLE)$")


@dataclass(frozen=True)
class ProcessRanks:
    """pid → rank for every process given, where the numbers came from, and the world size
    the source declares (None: not declared)."""

    ranks: dict[int, int]
    source: IdentitySource
    world_size: int | None = None


def tables_of(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def columns_of(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def _valid(ranks: dict[int, int], pids: list[int]) -> bool:
    """Every pid has a rank within any job's world (else the source is not believed), and no
    two the same."""
    return (set(ranks) >= set(pids) and len({ranks[p] for p in pids}) == len(pids)
            and all(0 <= ranks[p] <= MAX_RANK for p in pids))


def _from_environment(con: sqlite3.Connection, pids: list[int]) -> ProcessRanks | None:
    from perfdiff.importers.nsys.manifest import launcher_vars, rank_and_size

    if "META_DATA_CAPTURE" not in tables_of(con):
        return None
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
    ranks: dict[int, int] = {}
    sizes = []
    for n, pid in pid_of.items():
        declared = rank_and_size(launcher_vars(env.get(n, [])))
        if declared.get("rank", -1) >= 0:
            ranks[pid] = declared["rank"]
        sizes += [declared["world_size"]] if "world_size" in declared else []
    if not _valid(ranks, pids):
        return None
    return ProcessRanks({p: ranks[p] for p in pids}, IdentitySource.ENVIRONMENT, max(sizes) if sizes else None)


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
    tables = tables_of(con)
    table = next((t for t in ("NVTX_EVENTS", "NVTX_EVENTS_V3", "NVTX_EVENTS_V2") if t in tables), None)
    if table is None:
        return []
    cols = columns_of(con, table)
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


def _from_nccl(con: sqlite3.Connection, pids: list[int]) -> ProcessRanks | None:
    best: dict[int, tuple[int, int]] = {}  # pid → (ranks in the communicator, rank)
    for pid, _tid, _start, _end, name, values in nccl_ranges(con, "ncclCommInitRank%"):
        if not _INIT.match(name):
            continue
        rank, size = values.get("Rank"), values.get("No. of ranks")
        if isinstance(rank, int) and isinstance(size, int) and 0 <= rank < size:
            if int(pid) not in best or size > best[int(pid)][0]:
                best[int(pid)] = (size, rank)
    ranks = {p: r for p, (_, r) in best.items()}
    if not _valid(ranks, pids):
        return None
    return ProcessRanks({p: ranks[p] for p in pids}, IdentitySource.NCCL, max(best[p][0] for p in pids))


def _from_devices(con: sqlite3.Connection, pids: list[int]) -> ProcessRanks | None:
    rows = con.execute("SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    devices: dict[int, set[int]] = {}
    for pid, dev in rows:
        if pid is not None and dev is not None:
            devices.setdefault(int(pid), set()).add(int(dev))
    if any(len(devices.get(p, ())) != 1 for p in pids):
        return None
    dev = {p: next(iter(devices[p])) for p in pids}
    if len(set(dev.values())) != len(pids):
        return None
    order = sorted(pids, key=lambda p: dev[p])
    return ProcessRanks({p: i for i, p in enumerate(order)}, IdentitySource.DEVICE)


def process_ranks(con: sqlite3.Connection, pids: list[int]) -> ProcessRanks:
    """The rank of each of `pids` (the processes that ran kernels) from the best source the
    export has (see the module docstring); pid order when none names every process apart."""
    for source in (_from_environment, _from_nccl, _from_devices):
        try:
            found = source(con, pids)
        except sqlite3.Error:
            found = None
        if found is not None:
            return found
    return ProcessRanks({p: i for i, p in enumerate(sorted(pids))}, IdentitySource.PROCESS)
