"""Which rank each process of one nsys export holding several processes is: launcher
variables tied to a pid, NCCL's rank in its ncclCommInitRank NVTX payload, the GPU each process
used, else pid order; each says where its numbers came from.  Small exports written here
(bench/gen_ranks.py's writer, then a few literal rows)."""
from __future__ import annotations

import sqlite3
import struct
import sys
from pathlib import Path

from conftest import ROOT
from perfdiff.ranks import IdentitySource
from perfdiff.ranks.discover import rank_inputs

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402

PIDS = [4000, 4001, 4002, 4003]  # gen_ranks: rank r runs as pid 4000 + r on GPU r


def _export(tmp: Path) -> Path:
    traces = gen_ranks.simulate(4, kernels=40, steps=2, collectives=1, seed=1, plant=gen_ranks.Plant())
    path = tmp / "report.sqlite"
    gen_ranks.write_nsys(traces, [0, 1, 2, 3], 4, path)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM META_DATA_CAPTURE")  # the writer's variables are tied to no pid
    con.commit()
    con.close()
    return path


def _sql(path: Path, *statements: tuple[str, list]) -> None:
    con = sqlite3.connect(path)
    for sql, rows in statements:
        con.executemany(sql, rows)
    con.commit()
    con.close()


def _got(path: Path) -> list[tuple[int, int, IdentitySource, int | None]]:
    return [(r.pid, r.rank, r.source, r.world_size) for r in rank_inputs(path, split_processes=True)]


def test_launcher_variables_tied_to_each_pid(tmp_path: Path) -> None:
    path = _export(tmp_path)
    rows = []
    for n, pid in enumerate(PIDS):
        rows += [(f"PROCESS_{n}:PID", str(pid)), (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", f"OMPI_COMM_WORLD_RANK={3 - n}"),
                 (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", "OMPI_COMM_WORLD_SIZE=4"),
                 (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", "LOCAL_RANK=0")]  # a local rank is no rank
    _sql(path, ("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", rows))
    assert _got(path) == [(4003, 0, IdentitySource.ENVIRONMENT, 4), (4002, 1, IdentitySource.ENVIRONMENT, 4),
                          (4001, 2, IdentitySource.ENVIRONMENT, 4), (4000, 3, IdentitySource.ENVIRONMENT, 4)]


def test_launcher_ranks_beyond_any_world_are_not_believed(tmp_path: Path) -> None:
    """RANK=10^12 on one process (a damaged export): the variables are not the ranks' source;
    the GPUs number the processes instead."""
    path = _export(tmp_path)
    rows = []
    for n, pid in enumerate(PIDS):
        rank = 10**12 if n == 2 else n
        rows += [(f"PROCESS_{n}:PID", str(pid)), (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", f"RANK={rank}")]
    _sql(path, ("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", rows))
    assert [(pid, rank, source) for pid, rank, source, _ in _got(path)] == [
        (pid, r, IdentitySource.DEVICE) for r, pid in enumerate(PIDS)]


def test_variables_of_the_launcher_alone_do_not_number_its_children(tmp_path: Path) -> None:
    """`nsys profile torchrun …`: one launched process (PID 0 in the export), its children's
    ranks unknown to nsys: the GPUs number them."""
    path = _export(tmp_path)
    _sql(path, ("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
                [("PROCESS_0:PID", "0"), ("PROCESS_0:ENVIRONMENT_VARIABLE", "RANK=0")]))
    assert [s for _, _, s, _ in _got(path)] == [IdentitySource.DEVICE] * 4


def _nccl_blob(comm: int, nranks: int, rank: int, device: int) -> bytes:
    """An NVTX extended payload as nsys exports it: 32-byte header, then NCCL's
    CommInitRank struct (u64 communicator, int ranks, int rank, int device)."""
    body = struct.pack("<Qiii", comm, nranks, rank, device) + b"\0" * 4
    return struct.pack("<QQQQ", 7, 0x1000, len(body), 32) + body


def test_nccl_rank_from_the_comm_init_payload(tmp_path: Path) -> None:
    path = _export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN binaryData BLOB")
    con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN jsonText TEXT")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, "
                "flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER)")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER, "
                "flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, "
                "offset INTEGER)")
    con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (7, 4096, 'NcclNvtxParamsCommInitRank', 1, 0, 4, 24, 8)")
    con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (7, 4096, ?, 0, 0, ?, NULL, NULL, ?)",
                    [(0, "NCCL communicator ID", 0), (1, "No. of ranks", 8), (2, "Rank", 12), (3, "CUDA device", 16)])
    rows = []
    world = {4000: 2, 4001: 3, 4002: 0, 4003: 1}  # not device order
    for pid, rank in world.items():
        g = (pid << 24) | pid
        rows.append((10, 20, 59, "ncclCommInitRank", g, _nccl_blob(0xAB, 4, rank, pid - 4000), None))
        # A tensor-parallel communicator of 2: its rank is not the world rank.
        rows.append((30, 40, 59, "ncclCommInitRankConfig", g, _nccl_blob(0xCD, 2, rank % 2, pid - 4000), None))
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, binaryData, jsonText) "
                    "VALUES (?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()
    got = _got(path)
    assert {pid: rank for pid, rank, _, _ in got} == world
    assert {(s, w) for _, _, s, w in got} == {(IdentitySource.NCCL, 4)}


def test_nccl_rank_given_as_json(tmp_path: Path) -> None:
    path = _export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN jsonText TEXT")
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, jsonText) VALUES (?,?,?,?,?,?)",
                    [(10, 20, 59, "ncclCommInitRank", (pid << 24) | pid,
                      f'{{"NCCL communicator ID": 1, "No. of ranks": 4, "Rank": {3 - i}, "CUDA device": {i}}}')
                     for i, pid in enumerate(PIDS)])
    con.commit()
    con.close()
    assert [(pid, rank, s) for pid, rank, s, _ in _got(path)] == [
        (4003, 0, IdentitySource.NCCL), (4002, 1, IdentitySource.NCCL), (4001, 2, IdentitySource.NCCL),
        (4000, 3, IdentitySource.NCCL)]


def test_ranks_in_device_order(tmp_path: Path) -> None:
    path = _export(tmp_path)
    _sql(path, ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = ? WHERE (globalPid >> 24) = ?",
                [(7 - i, pid) for i, pid in enumerate(PIDS)]))
    assert _got(path) == [(4003, 0, IdentitySource.DEVICE, 4), (4002, 1, IdentitySource.DEVICE, 4),
                          (4001, 2, IdentitySource.DEVICE, 4), (4000, 3, IdentitySource.DEVICE, 4)]


def test_pid_order_last_and_said_so(tmp_path: Path) -> None:
    """Two processes on one GPU: nothing tells the ranks apart but their pids."""
    from perfdiff.ranks.records import RankAnalysis, RankPair
    from perfdiff.render.ranks import _mapping

    path = _export(tmp_path)
    _sql(path, ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 0", [()]))
    got = rank_inputs(path, split_processes=True)
    assert [(r.pid, r.rank, r.source) for r in got] == [(pid, i, IdentitySource.PROCESS) for i, pid in enumerate(PIDS)]
    analysis = RankAnalysis(pairs=tuple(RankPair(r.rank, r, r) for r in got), world_n=4, world_a=4, plan=None,
                            rows=(), stragglers=(), findings=(), verdict=(), alpha=0.05, workers=1)
    mapping = _mapping(analysis)
    assert "| 2 | 2: report.sqlite (pid 4002) | pid order (nothing in the export names the ranks) |" in mapping[4]
