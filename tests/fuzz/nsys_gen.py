"""Random Nsight Systems SQLite exports: random mixes of kernels, copies, runtime calls, NVTX
ranges, OS runtime calls, scheduling events and GPU metrics, in the layouts of several export
schema versions (metadata table names, kernel name columns, CUDA device tables), with NULLs,
large values, non-ASCII names, rows ending before they start, and tables large enough to span
many B-tree pages."""
from __future__ import annotations

import random
import sqlite3
from pathlib import Path

_NAMES = ["Fan1(float *)", "Fan1", "void gemm<float, 128>(float*, int)", "gemm", "cudaLaunchKernel_v7000",
          "cudaStreamSynchronize_v3020", "cudaMemcpyAsync_v3020", "read", "poll", "ioctl", "step", "naïve ü",
          "核函数", "🚀", "", "a" * 300, "x\x00y", "esc \x1b[0m", "nonchar \ufffe\ufdd0",
          "lone surrogate"]
# What Python writes into a TEXT cell for a str holding a lone surrogate (surrogatepass): bytes
# that are not UTF-8; the StringIds entry "lone surrogate" holds them.
_LONE_SURROGATE = "\ud800 lone \udc00".encode("utf-8", "surrogatepass")
_VERSIONS = [("EXPORT_META_DATA", "2.9.1", "2021.5.1"), ("META_DATA_EXPORT", "3.0.0", "2022.4.2"),
             ("META_DATA_EXPORT", "3.11.0", "2024.2.1")]


def _rows(r: random.Random) -> int:
    return r.choice([0, 1, 2, 5, 20, 60]) if r.random() < 0.9 else r.randint(500, 3000)


def nsys_export(r: random.Random, path: Path) -> None:
    """Write a random export to `path` (a new file)."""
    con = sqlite3.connect(path)
    t0 = r.choice([1_700_000_000_000_000_000, 1_600_000_000_123_456_789])
    strings = {i + 1: s for i, s in enumerate(_NAMES)}
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE value = 'lone surrogate'", (_LONE_SURROGATE,))
    meta, schema, product = r.choice(_VERSIONS)
    con.execute(f"CREATE TABLE {meta} (name TEXT, value TEXT)")
    con.executemany(f"INSERT INTO {meta} VALUES (?, ?)", [("EXPORT_SCHEMA_VERSION", schema),
                                                          ("EXPORT_PRODUCT_VERSION", product)])
    if r.random() < 0.9:
        con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (t0,))
    if r.random() < 0.5:
        con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER, "
                    "clockRate INTEGER, cuDevice INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (5, 'Fake GPU', 'uuid-1', 80, 1500000000, 0)")
    else:
        con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER, clockRate INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (5, 'Fake GPU', 'uuid-1', 80, 1500000000)")
        con.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (5, 0, 111)")
    pids = [111, 222] if r.random() < 0.4 else [111]
    threads = [(p << 24) | (p + k) for p in pids for k in (1, 2)]

    def interval(base_max: int = 10_000_000) -> tuple[int, int]:
        s = r.randrange(0, base_max)
        e = s + r.choice([0, 1, 50, 1000, 123_456])
        if r.random() < 0.02:
            e = s - r.randint(1, 100)  # ends before it starts
        return s, e

    def maybe(v: object, p: float = 0.05) -> object:
        return None if r.random() < p else v

    corr = list(range(1, 4000))
    if r.random() < 0.95:
        name_cols = r.choice([["demangledName", "shortName", "mangledName"], ["shortName", "demangledName"],
                              ["demangledName"], ["shortName"], ["name"]])
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                    "globalPid INTEGER, " + ", ".join(f"{c} INTEGER" for c in name_cols) + ")")
        rows = []
        for _ in range(_rows(r)):
            s, e = interval()
            rows.append((s, e, r.choice([0, 0, 1]), 1, maybe(r.choice([7, 13])), maybe(r.choice(corr)),
                         r.choice(pids) << 24, *[r.choice(list(strings)) for _ in name_cols]))
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * (7 + len(name_cols)))})", rows)
        if r.random() < 0.7:
            con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                        "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
                        "copyKind INTEGER, srcKind INTEGER, dstKind INTEGER)")
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (*interval(), 0, 7, r.choice(corr), r.choice(pids) << 24, r.choice([0, 64, 1 << 40]),
                 r.randint(0, 12), maybe(r.randint(0, 5)), maybe(r.randint(0, 5))) for _ in range(_rows(r))])
        if r.random() < 0.5:
            con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                        "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, "
                        "bytes INTEGER" + (", memKind INTEGER" if r.random() < 0.5 else "") + ")")
            ncol = len([c for c in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_MEMSET)")])
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES ({','.join('?' * ncol)})", [
                (*interval(), 0, 7, r.choice(corr), r.choice(pids) << 24, 0, 128, r.randint(0, 4))[:ncol]
                for _ in range(_rows(r))])
    if r.random() < 0.85:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, "
                    "returnValue INTEGER)")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)", [
            (*interval(), r.choice([0, 1, 67]), r.choice(threads), r.choice(corr), r.choice(list(strings)), 0)
            for _ in range(_rows(r))])
    if r.random() < 0.7:
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                    "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                    "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")
        rows = []
        for _ in range(_rows(r)):
            s, e = interval()
            etype = r.choice([59, 59, 60, 70, 71, 34, 75])
            text = r.choice(_NAMES) if r.random() < 0.7 else None
            rows.append((s, maybe(e, 0.1), etype, None, None, None, text, maybe(r.choice(threads)), None,
                         None if text is not None else maybe(r.choice(list(strings))), r.choice([0, 0, 3])))
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    if r.random() < 0.5:
        con.execute("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, "
                    "globalTid INTEGER, nameId INTEGER, returnValue INTEGER, nestingLevel INTEGER, "
                    "callchainId INTEGER)")
        con.executemany("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)", [
            (*interval(), r.choice([27, 27, 31]), r.choice(threads), r.choice(list(strings)), 0, 0, 0)
            for _ in range(_rows(r))])
    if r.random() < 0.5:
        con.execute("CREATE TABLE SCHED_EVENTS (start INTEGER NOT NULL, cpu INTEGER, isSchedIn INTEGER, "
                    "globalTid INTEGER)")
        con.executemany("INSERT INTO SCHED_EVENTS VALUES (?,?,?,?)", [
            (r.randrange(0, 10_000_000), r.randint(0, 7), r.randint(0, 1), r.choice(threads))
            for _ in range(_rows(r))])
    if r.random() < 0.4:
        con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, metricId INTEGER, metricName TEXT)")
        con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?,?,?)", [
            (0x105, 1, "GPC Clock Frequency [MHz]"), (0x105, 2, "SMs Active [Throughput %]")])
        con.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER)")
        con.executemany("INSERT INTO GPU_METRICS VALUES (?,?,?,?)", [
            (r.randrange(0, 10_000_000), 0x105, r.choice([1, 2]), r.randint(0, 2000)) for _ in range(_rows(r))])
    con.commit()
    con.close()
