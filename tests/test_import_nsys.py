"""nsys SQLite import: real exports checked against independent SQL, synthetic schemas, bad input."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import activity_kinds as kinds
from conftest import assert_contract

from perfdiff.bundle import MISSING
from perfdiff.errors import InputError
from perfdiff.importers.common import UNNAMED, canonical
from perfdiff.importers.nsys import import_nsys, pages
from perfdiff.importers.nsys.reference import reference_tables

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
RODINIA = REAL / "kmcho2019" / "Rodinia_3.1_Gaussian"
REAL_EXPORTS = [
    RODINIA / "report3.sqlite",
    RODINIA / "report2.sqlite",
    REAL / "hpcgroup" / "pipit" / "pipit" / "tests" / "data" / "cloverleaf-nsys" / "perlmutter-cloverleaf-cuda.sqlite",
    REAL / "NVIDIA" / "Fuser" / "@ee4fcf30" / "report1.sqlite",
]
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not found at {REAL}")
PID = "((globalPid >> 24) & 16777215)"
TPID = "((globalTid >> 24) & 16777215)"


def sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def has_table(path: Path, table: str) -> bool:
    return bool(sql(path, f"SELECT 1 FROM sqlite_master WHERE type='table' AND name='{table}'"))


# ------------------------------------------------------------------------------ real exports

@needs_real
@pytest.mark.real
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_export_counts_match_sql(path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    run = import_nsys(path)
    assert_contract(run)
    pid = run.manifest["target"]["pid"]
    got = kinds(run)
    n_kernel = sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {PID} = {pid}")[0][0]
    assert got["kernel"] == n_kernel > 0
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        want = sql(path, f"SELECT count(*) FROM {table} WHERE {PID} = {pid}")[0][0] if has_table(path, table) else 0
        assert got.get(kind, 0) == want, kind
    n_api = sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {TPID} = {pid} AND eventClass IN (0, 1)")[0][0]
    assert got["api"] == n_api
    n_nvtx = (sql(path, f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) AND end IS NOT NULL "
                        f"AND {TPID} = {pid}")[0][0] if has_table(path, "NVTX_EVENTS") else 0)
    assert got.get("cpu", 0) == n_nvtx == len(run.markers)
    n_osrt = (sql(path, f"SELECT count(*) FROM OSRT_API WHERE eventClass = 27 AND {TPID} = {pid}")[0][0]
              if has_table(path, "OSRT_API") else 0)
    oncpu = int((run.activity["function"] == "oncpu").sum())
    assert got.get("host", 0) - oncpu == n_osrt
    # launches: kernels whose correlationId has a runtime/driver row of the same process
    joined = sql(path, f"""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN
        (SELECT DISTINCT correlationId AS c, (globalTid & -16777216) AS gp FROM CUPTI_ACTIVITY_KIND_RUNTIME
         WHERE eventClass IN (0, 1)) r ON r.c = k.correlationId AND r.gp = k.globalPid
        WHERE {PID.replace('globalPid', 'k.globalPid')} = {pid}""")[0][0]
    k = run.activity[run.activity["kind"] == "kernel"]
    assert int((k["launch_ns"] != MISSING).sum()) == joined
    launched = k[k["launch_ns"] != MISSING]
    assert (launched["launch_ns"] <= launched["start_ns"]).all()
    # wall clock from the session start, GPU from TARGET_INFO_GPU
    t0 = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    first = sql(path, f"SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {PID} = {pid}")[0][0]
    assert int(k["start_ns"].min()) == t0 + first
    assert run.manifest["clock"]["anchors"][0]["utc_epoch_ns"] == t0
    gpu_names = {r[0] for r in sql(path, "SELECT name FROM TARGET_INFO_GPU")}
    assert {g["name"] for g in run.manifest["gpus"]} == gpu_names
    assert any(g["used"] for g in run.manifest["gpus"])
    assert run.manifest["source"]["kind"] == "nsys" and run.manifest["source"]["schema_version"]
    assert run.manifest["run_name"] == path.stem
    # the capture host's environment never reaches the manifest (values are not printed)
    text = json.dumps(run.manifest, default=str)
    secrets = [v for (v,) in sql(path, "SELECT value FROM TARGET_INFO_SYSTEM_ENV")] if has_table(
        path, "TARGET_INFO_SYSTEM_ENV") else []
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if has_table(path, table):
            secrets += [v for (v,) in sql(path, f"SELECT value FROM {table} WHERE name = 'EXPORT_HOST'")]
    leaked = sum(1 for v in secrets if isinstance(v, str) and len(v) > 6 and v in text)
    assert leaked == 0, f"{leaked} capture-host values in the manifest"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # input untouched


@needs_real
@pytest.mark.real
def test_rodinia_fan2_slows_down() -> None:
    means = {}
    for name in ("report3", "report2"):
        run = import_nsys(RODINIA / f"{name}.sqlite")
        k = run.activity[run.activity["kind"] == "kernel"]
        by = k.groupby(k["function"].astype(str))["busy_ns"].agg(["count", "mean"])
        assert set(by.index) == {"Fan1(float *, float *, int, int)", "Fan2(float *, float *, float *, int, int, int)"}
        assert (by["count"] == 4095).all()
        means[name] = by["mean"] / 1000.0
        assert (k["launch_ns"] != MISSING).all()  # every kernel joins its cudaLaunchKernel
        assert run.markers.empty  # no NVTX in these captures
        api = run.activity[run.activity["kind"] == "api"]["function"].astype(str)
        assert "cudaThreadSynchronize" in set(api) and "cudaLaunchKernel" in set(api)  # version suffixes gone
    fan2 = "Fan2(float *, float *, float *, int, int, int)"
    assert means["report3"][fan2] == pytest.approx(187, rel=0.02)
    assert means["report2"][fan2] == pytest.approx(682.5, rel=0.01)


@needs_real
@pytest.mark.real
def test_for_compare_leaves_the_columns_no_comparison_reads_unknown() -> None:
    from perfdiff.importers.common import COMPARE_UNUSED
    from perfdiff.inputs import open_run

    full = open_run(RODINIA / "report3.sqlite")
    lean = open_run(RODINIA / "report3.sqlite", for_compare=True)
    assert (full.activity["stream"] != MISSING).any() and (full.activity["correlation"] != MISSING).any()
    for col in full.activity.columns:
        if col in COMPARE_UNUSED:
            assert (lean.activity[col] == MISSING).all()
        else:
            pd.testing.assert_series_equal(lean.activity[col], full.activity[col])


@needs_real
@pytest.mark.real
def test_group_short_and_fuser_nvtx() -> None:
    path = REAL_EXPORTS[3]
    full = import_nsys(path)
    short = import_nsys(path, group="short")
    kf = full.activity[full.activity["kind"] == "kernel"]["function"].astype(str)
    ks = short.activity[short.activity["kind"] == "kernel"]["function"].astype(str)
    assert len(kf) == len(ks) == 18
    want = {r[0] for r in sql(path, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName")}
    assert set(ks) == want
    assert ks.str.len().mean() < kf.str.len().mean()
    m = full.markers
    assert set(m["source"].astype(str)) == {"nvtx"}
    assert "FusionCache::get" in set(m["name"].astype(str))
    cpu = full.activity[full.activity["kind"] == "cpu"]
    # self time: never more than the range, strictly less for ranges with children
    dur = cpu["end_ns"] - cpu["start_ns"]
    assert (cpu["busy_ns"] <= dur).all() and (cpu["busy_ns"] < dur).any()
    memset = full.activity[full.activity["kind"] == "memset"]
    assert set(memset["function"].astype(str)) == {"Memset (Device)"} and (memset["bytes"] == 4).all()


@needs_real
@pytest.mark.real
def test_page_reader_agrees_with_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    path = REAL_EXPORTS[2]
    fast = import_nsys(path)
    monkeypatch.setattr(pages.PageReader, "open", classmethod(lambda cls, p: None))
    slow = import_nsys(path)
    for table in ("activity", "markers", "samples"):
        pd.testing.assert_frame_equal(getattr(fast, table).astype(str), getattr(slow, table).astype(str))


# ------------------------------------------------------------------------------ synthetic exports

def make_export(path: Path, *, kernels: bool = True, enums: bool = False, old_meta: bool = True,
                cu_device: bool = True) -> Path:
    """A small nsys-like export: two processes, NVTX (push/pop, start/end, domains, textId),
    OSRT, SCHED, GPU metrics, memcpy/memset, runtime rows with version suffixes."""
    con = sqlite3.connect(path)
    s = {1: "Fan1(float *)", 2: "Fan1", 3: "cudaLaunchKernel_v7000", 4: "cudaStreamSynchronize_v3020",
         5: "read", 6: "registered range", 7: "other(int)", 8: "other", 9: "cudaMemcpyAsync_v3020",
         10: "poll"}
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", s.items())
    meta = "EXPORT_META_DATA" if old_meta else "META_DATA_EXPORT"
    con.execute(f"CREATE TABLE {meta} (name TEXT, value TEXT)")
    con.executemany(f"INSERT INTO {meta} VALUES (?, ?)", [("EXPORT_SCHEMA_VERSION", "2.9.1"),
                                                          ("EXPORT_PRODUCT_VERSION", "2021.5.1")])
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '')")
    if cu_device:
        con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER, "
                    "clockRate INTEGER, cuDevice INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (5, 'Test GPU', 'uuid-1', 80, 1500000000, 0)")
    else:  # older exports: the CUDA ordinal only in TARGET_INFO_CUDA_DEVICE
        con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER, "
                    "clockRate INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (5, 'Test GPU', 'uuid-1', 80, 1500000000)")
        con.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (5, 0, 111)")
    con.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)")
    con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('HOSTNAME', 'secret-host-name-xyz')")
    g1 = (111 << 24)  # globalPid of pid 111; its threads: g1 | tid
    g2 = (222 << 24)
    if kernels:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                    "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER)")
        rows = [(1000 + 100 * i, 1050 + 100 * i, 0, 1, 7, 10 + i, g1, 1, 2, None) for i in range(5)]
        rows += [(5000, 5100, 1, 1, 9, 99, g2, 7, 8, None)]
        rows += [(9000, 8000, 0, 1, 7, 50, g1, 1, 2, None)]  # ends before it starts: dropped
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
                    "copyKind INTEGER, srcKind INTEGER, dstKind INTEGER)")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (600, 700, 0, 7, 5, ?, 4096, 1, 1, 2)", (g1,))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (710, 720, 0, 7, 6, ?, 64, 2, 2, 0)", (g1,))
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, "
                    "bytes INTEGER)")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (730, 740, 0, 7, 7, ?, 0, 128)", (g1,))
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER)")
    rt = [(990 + 100 * i, 995 + 100 * i, 0, g1 | 112, 10 + i, 3, 0) for i in range(5)]
    rt += [(990, 999, 67, g1 | 112, 10, 3, 0)]  # a backtrace row repeating correlation 10: ignored
    rt += [(590, 598, 0, g1 | 111, 5, 9, 0), (705, 706, 0, g1 | 111, 6, 9, 0), (725, 726, 0, g1 | 111, 7, 9, 0),
           (1600, 1700, 0, g1 | 112, 40, 4, 0), (4990, 4995, 0, g2 | 223, 99, 3, 0)]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)", rt)
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")
    nvtx = [(900, 2000, 59, None, None, None, "step", g1 | 112, None, None, 0),
            (950, 1500, 59, None, None, None, "inner", g1 | 112, None, None, 0),
            (1000, 1100, 60, 1, None, None, None, g1 | 112, g1 | 112, 6, 0),  # start/end range, textId
            (1200, 1300, 59, None, None, None, "dom range", g1 | 111, None, None, 3),
            (0, None, 75, None, None, None, "MyDomain", g1 | 111, None, None, 3),  # domain create
            (1400, None, 59, None, None, None, "never closed", g1 | 112, None, None, 0),
            (1450, 1450, 34, None, None, None, "a mark", g1 | 112, None, None, 0),
            (3000, 3100, 59, None, None, None, "other process", g2 | 223, None, None, 0)]
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", nvtx)
    con.execute("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, "
                "globalTid INTEGER, nameId INTEGER, returnValue INTEGER, nestingLevel INTEGER, callchainId INTEGER)")
    con.executemany("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)", [
        (100, 100, 31, g1 | 111, 5, 0, None, 0), (200, 400, 27, g1 | 111, 10, 0, 0, 0),
        (250, 300, 27, g1 | 111, 5, 0, 1, 0), (500, 600, 27, g2 | 223, 5, 0, 0, 0)])
    con.execute("CREATE TABLE SCHED_EVENTS (start INTEGER NOT NULL, cpu INTEGER, isSchedIn INTEGER, globalTid INTEGER)")
    con.executemany("INSERT INTO SCHED_EVENTS VALUES (?,?,?,?)", [
        (50, 1, 0, g1 | 111),  # out first: running since before the capture (unpaired)
        (100, 1, 1, g1 | 111), (300, 1, 0, g1 | 111), (400, 2, 1, g1 | 111), (450, 2, 0, g1 | 111),
        (120, 3, 1, g1 | 112), (220, 3, 0, g1 | 112), (900, 3, 1, g1 | 112),  # last in: unpaired
        (10, 4, 1, g2 | 223), (20, 4, 0, g2 | 223)])
    con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, metricId INTEGER, metricName TEXT)")
    con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?,?,?)", [
        (0x105, 1, "GPC Clock Frequency [MHz]"), (0x105, 2, "DRAM Read Bandwidth [Throughput %]")])
    con.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER)")
    con.executemany("INSERT INTO GPU_METRICS VALUES (?,?,?,?)", [
        (1000, 0x105, 1, 1410), (2000, 0x105, 1, 1200), (1000, 0x105, 2, 30), (2000, 0x105, 2, 40)])
    if enums:
        con.execute("CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER, name TEXT, label TEXT)")
    con.commit()
    con.close()
    return path


def test_synthetic_export(tmp_path: Path) -> None:
    path = make_export(tmp_path / "tiny.sqlite")
    run = import_nsys(path)
    assert_contract(run)
    t0 = 1_700_000_000_000_000_000
    assert run.manifest["target"]["pid"] == 111  # five kernels beat one
    assert run.manifest["source"]["schema_version"] == "2.9.1"
    a = run.activity
    k = a[a["kind"] == "kernel"]
    assert len(k) == 5 and set(k["function"].astype(str)) == {"Fan1(float *)"}
    assert run.manifest["dropped"]["kernel: end before start"] == 1
    assert set(k["device"].astype(str)) == {"GPU 0"} and (k["stream"] == 7).all()
    assert k["launch_ns"].tolist() == [t0 + 990 + 100 * i for i in range(5)]  # class 67 row ignored
    assert (k["tid"] == 112).all() and (k["busy_ns"] == 50).all()
    assert int(k["start_ns"].min()) == t0 + 1000
    mc = a[a["kind"] == "memcpy"].sort_values("start_ns")
    assert mc["function"].astype(str).tolist() == ["Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)"]
    assert mc["bytes"].tolist() == [4096, 64] and (mc["launch_ns"] == [t0 + 590, t0 + 705]).all()
    ms = a[a["kind"] == "memset"]
    assert ms["function"].astype(str).tolist() == ["Memset (Device)"] and ms["bytes"].tolist() == [128]
    api = a[a["kind"] == "api"]
    assert set(api["function"].astype(str)) == {"cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync"}
    assert len(api) == 9  # pid 111, classes 0/1 only
    cpu = a[a["kind"] == "cpu"].set_index(a[a["kind"] == "cpu"]["function"].astype(str))
    assert set(cpu.index) == {"step", "inner", "registered range", "MyDomain:dom range"}
    # Self time less the ranges and the CUDA calls nested directly in a range on its thread:
    # "inner" and the cudaStreamSynchronize 1600-1700 nest in "step"; the start/end range and
    # four 5 ns launches in "inner"; one launch in the start/end range.
    assert cpu.loc["step", "busy_ns"] == 1100 - 550 - 100
    assert cpu.loc["inner", "busy_ns"] == 550 - 100 - 4 * 5
    assert cpu.loc["registered range", "busy_ns"] == 100 - 5
    m = run.markers
    assert set(m["source"].astype(str)) == {"nvtx"} and len(m) == 4
    assert run.manifest["dropped"]["nvtx: ranges never closed"] == 1
    host = a[a["kind"] == "host"]
    osrt = host[host["function"] != "oncpu"].set_index(host[host["function"] != "oncpu"]["function"].astype(str))
    assert osrt.loc["poll", "busy_ns"] == 200 - 50 and osrt.loc["read", "busy_ns"] == 50  # nested read
    oncpu = host[host["function"] == "oncpu"].sort_values("start_ns")
    assert (oncpu["end_ns"] - oncpu["start_ns"]).tolist() == [200, 100, 50]
    assert oncpu["tid"].tolist() == [111, 112, 111]
    samples = run.samples.sort_values(["metric", "t_start_ns"])
    assert set(samples["metric"].astype(str)) == {"gpu_frequency", "nsys:DRAM Read Bandwidth [Throughput %]"}
    assert set(samples["device"].astype(str)) == {"GPU 0"}  # nsys GPU 5 is CUDA device 0
    f = samples[samples["metric"] == "gpu_frequency"]
    assert f["value"].tolist() == [1410.0, 1200.0]
    assert f["t_end_ns"].tolist() == [t0 + 2000, t0 + 2000]  # [t, next t); the last is a point
    gpu = run.manifest["gpus"][0]
    assert gpu["name"] == "Test GPU" and gpu["index"] == 0 and gpu["sm_count"] == 80 and gpu["used"]
    assert "secret-host-name-xyz" not in json.dumps(run.manifest, default=str)


def test_cuda_ordinal_from_cuda_device_table(tmp_path: Path) -> None:
    run = import_nsys(make_export(tmp_path / "old.sqlite", cu_device=False))
    assert run.manifest["gpus"][0]["index"] == 0 and run.manifest["gpus"][0]["used"]
    assert set(run.samples["device"].astype(str)) == {"GPU 0"}


def test_pid_choice(tmp_path: Path) -> None:
    path = make_export(tmp_path / "two.sqlite", old_meta=False, enums=True)
    other = import_nsys(path, pid=222)
    k = other.activity[other.activity["kind"] == "kernel"]
    assert other.manifest["target"]["pid"] == 222 and len(k) == 1
    assert k["function"].astype(str).tolist() == ["other(int)"] and k["device"].astype(str).tolist() == ["GPU 1"]
    assert k["launch_ns"].tolist() == [1_700_000_000_000_000_000 + 4990]
    short = import_nsys(path, pid=222, group="short")
    assert short.activity[short.activity["kind"] == "kernel"]["function"].astype(str).tolist() == ["other"]
    with pytest.raises(InputError, match=r"two\.sqlite.*pid 333.*111.*222"):
        import_nsys(path, pid=333)


def test_page_reader_agrees_on_synthetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_export(tmp_path / "tiny.sqlite")
    fast = import_nsys(path)
    monkeypatch.setattr(pages.PageReader, "open", classmethod(lambda cls, p: None))
    slow = import_nsys(path)
    for table in ("activity", "markers", "samples"):
        pd.testing.assert_frame_equal(getattr(fast, table).astype(str), getattr(slow, table).astype(str))


def test_page_reader_many_rows_and_multibyte_values(tmp_path: Path) -> None:
    """Several B-tree levels, negative and 1..8-byte integers, NULLs, long text before ints."""
    path = tmp_path / "big.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, note TEXT, b INTEGER, c INTEGER)")
    rng = np.random.default_rng(3)
    n = 30_000
    a = rng.integers(-(2**62), 2**62, n)
    a[::7] = rng.integers(-300, 300, len(a[::7]))
    b = rng.integers(0, 2**40, n)
    notes = ["x" * int(k) for k in rng.integers(0, 300, n)]
    rows = [(int(a[i]), notes[i], None if i % 11 == 0 else int(b[i]), i % 3) for i in range(n)]
    con.executemany("INSERT INTO t VALUES (?,?,?,?)", rows)
    con.commit()
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name='t'").fetchone()[0]
    con.close()
    reader = pages.PageReader.open(path)
    got = reader.read_int_columns(root, ["a", "note", "b", "c"], ["a", "b", "c"])
    assert got["a"].tolist() == [r[0] for r in rows]
    assert got["b"].tolist() == [MISSING if r[2] is None else r[2] for r in rows]
    assert got["c"].tolist() == [r[3] for r in rows]


# ------------------------------------------------------------------------------ the plain reference

def assert_same_tables(run, ref: dict[str, pd.DataFrame], name: str) -> None:
    for table in ("activity", "markers", "samples"):
        pd.testing.assert_frame_equal(canonical(getattr(run, table)), canonical(ref[table]), obj=f"{name} {table}")


@needs_real
@pytest.mark.real
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_export_equals_the_plain_reference(path: Path) -> None:
    assert_same_tables(import_nsys(path), reference_tables(path), path.name)
    assert_same_tables(import_nsys(path, group="short"), reference_tables(path, group="short"), path.name)


def test_synthetic_exports_equal_the_plain_reference(tmp_path: Path) -> None:
    cases = {"tiny": ({}, {}), "old": ({"cu_device": False}, {}), "other_pid": ({"old_meta": False, "enums": True},
                                                                                {"pid": 222})}
    for name, (shape, choice) in cases.items():
        path = make_export(tmp_path / f"{name}.sqlite", **shape)
        for group in ("full", "short"):
            assert_same_tables(import_nsys(path, group=group, **choice),
                               reference_tables(path, group=group, **choice), f"{name} {group}")


def test_two_samples_at_one_instant_read_alike_in_both_readers(tmp_path: Path) -> None:
    """Two values of one metric at one timestamp, the larger first in the file: both readers
    order them by value, so the larger holds until the next sample (whatever the rows' order)."""
    path = make_export(tmp_path / "tie.sqlite")
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO GPU_METRICS VALUES (?,?,?,?)", [(1500, 0x105, 1, 1300), (1500, 0x105, 1, 1250)])
    con.commit()
    con.close()
    run = import_nsys(path)
    assert_same_tables(run, reference_tables(path), "tie")
    clock = run.samples[run.samples["metric"] == "gpu_frequency"].sort_values(["t_start_ns", "t_end_ns"])
    assert (clock["t_end_ns"] - clock["t_start_ns"]).tolist()[1:3] == [0, 500]
    assert clock["value"].tolist()[1:3] == [1250.0, 1300.0]


# ------------------------------------------------------------------------------ bad input

def test_not_sqlite(tmp_path: Path) -> None:
    p = tmp_path / "trace.sqlite"
    p.write_text("hello, not a database")
    with pytest.raises(InputError, match=r"trace\.sqlite.*not a SQLite file"):
        import_nsys(p)


def test_sqlite_that_is_not_nsys(tmp_path: Path) -> None:
    p = tmp_path / "app.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match=r"app\.sqlite.*not an Nsight Systems export"):
        import_nsys(p)


def test_export_without_kernel_table_reads_its_nvtx_ranges(tmp_path: Path) -> None:
    """An NVTX-only export (no kernel table): its ranges as CPU-side functions and markers,
    its API calls and host tables, with a note saying so."""
    p = make_export(tmp_path / "cpu_only.sqlite", kernels=False)
    run = import_nsys(p)
    kinds = set(run.activity["kind"].astype(str))
    assert "kernel" not in kinds and "cpu" in kinds and len(run.markers) > 0
    assert any(n.code == "nvtx-only" for n in run.notes)


def test_export_without_kernels_or_ranges_is_refused(tmp_path: Path) -> None:
    p = make_export(tmp_path / "cpu_only.sqlite", kernels=False)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE NVTX_EVENTS")
    con.commit()
    con.close()
    with pytest.raises(InputError, match=r"cpu_only\.sqlite.*neither a CUDA kernel table.*nor NVTX ranges"):
        import_nsys(p)


@pytest.mark.real
def test_nvtx_only_exports_compare(real: Path, tmp_path: Path) -> None:
    """Two NVTX-only exports (a real capture with its GPU tables dropped, in copies; in the
    second, one nested range takes 3x as long) compare: cycles from a range that repeats in
    both, the ranges as functions, and the stretched one slower."""
    import shutil

    import perfdiff

    src = real / "NVIDIA/Fuser/@ee4fcf30/report1.sqlite"
    copies = []
    for name in ("a", "b"):
        dst = tmp_path / f"{name}.sqlite"
        shutil.copy(src, dst)
        con = sqlite3.connect(dst)
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
        if name == "b":
            con.execute("UPDATE NVTX_EVENTS SET start = start - (end - start) * 2 "
                        "WHERE text = 'getTerminatingOutputs'")
        con.commit()
        con.close()
        copies.append(dst)
    c = perfdiff.compare(*copies)
    a = c.analysis
    assert a.plan.source.value == "annotation" and not [f for f in a.functions if f.kind == "kernel"]
    f = next(f for f in a.functions if f.name == "getTerminatingOutputs")
    assert f.kind == "cpu" and f.t_a_us > 2 * f.t_n_us
    assert "getTerminatingOutputs" in c.to_markdown()


def test_missing_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.sqlite.*no such file"):
        import_nsys(tmp_path / "nope.sqlite")
    with pytest.raises(InputError, match="not a file"):
        import_nsys(tmp_path)


@needs_real
@pytest.mark.real
def test_truncated_export(tmp_path: Path) -> None:
    p = tmp_path / "cut.sqlite"
    p.write_bytes((RODINIA / "report3.sqlite").read_bytes()[: 600_000])
    with pytest.raises(InputError, match=r"cut\.sqlite"):
        import_nsys(p)


@pytest.mark.real
def test_two_exports_whose_repeated_ranges_differ_in_count_get_one_plan(real: Path, tmp_path: Path) -> None:
    """Copies of a real export, the second with half of one repeated NVTX range's events
    removed (so each run on its own could prefer another range): both are cut by one plan,
    by one range name, with equal detail on both sides."""
    import shutil

    import perfdiff

    src = real / "NVIDIA/Fuser/@ee4fcf30/report1.sqlite"
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(src, a)
    shutil.copy(src, b)
    con = sqlite3.connect(b)
    con.execute("DELETE FROM NVTX_EVENTS WHERE text = 'registry.cpp::checkCanSchedule<T>' AND rowid % 2 = 0")
    con.commit()
    con.close()
    from test_segment_attribute import segment_cycles

    alone = [segment_cycles(perfdiff.load(p)).detail for p in (a, b)]
    assert alone[0] != alone[1]  # each run on its own would take another range
    c = perfdiff.compare(a, b, force=True)
    plan = c.analysis.plan
    assert plan is not None and plan.source.value == "annotation" and plan.name
    assert plan.name in c.analysis.normal.cycle_detail and plan.name in c.analysis.abnormal.cycle_detail
    assert not [w for w in c.warnings if w.code.value == "cycle-ratio" and not w.detail.same_marked_source]


@pytest.mark.real
def test_rank_and_world_size_from_the_launcher_variables(real: Path) -> None:
    """The CloverLeaf capture ran under a job launcher: nsys recorded PMI_RANK / SLURM_NTASKS
    in META_DATA_CAPTURE; the manifest gets rank 0 of 1 and nothing else of the environment."""
    run = import_nsys(real / "hpcgroup/pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite")
    assert run.manifest["target"]["distributed"] == {"rank": 0, "world_size": 1}


def test_an_empty_string_reads_unnamed_in_both_readers(tmp_path: Path) -> None:
    """A kernel whose name is the empty string left a blank row in the report."""
    path = make_export(tmp_path / "e.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = '' WHERE id IN (1, 2)")  # Fan1(float *), Fan1
    con.commit()
    con.close()
    for group in ("full", "short"):
        run = import_nsys(path, group=group)
        assert_same_tables(run, reference_tables(path, group=group), f"empty {group}")
        names = set(run.activity["function"].astype(str))
        assert UNNAMED in names and "" not in names


def test_nvtx_ranges_without_a_name_read_unnamed_in_both_readers(tmp_path: Path) -> None:
    """An empty inline text left a blank name; a range with no text and no textId read
    "<unnamed range>" where an empty registered string read "<unnamed>"."""
    path = make_export(tmp_path / "n.sqlite")
    con = sqlite3.connect(path)
    g = (111 << 24) | 112
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (1500, 1510, 59, None, None, None, "", g, None, None, 0),  # empty text, no textId
        (1520, 1530, 59, None, None, None, "", g, None, 6, 0),  # empty text, a registered string
        (1540, 1550, 59, None, None, None, None, g, None, None, 0)])  # neither
    con.commit()
    con.close()
    run = import_nsys(path)
    assert_same_tables(run, reference_tables(path), "nameless ranges")
    m = run.markers.sort_values("start_ns")
    names = m["name"].astype(str).tolist()
    assert "" not in names and "<unnamed range>" not in names
    # the three new ranges, in start order: the first and the last have no name at all
    new = m[m["end_ns"] - m["start_ns"] == 10]["name"].astype(str).tolist()
    assert new == [UNNAMED, "registered range", UNNAMED]
