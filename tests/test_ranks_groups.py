"""The process group of each NCCL kernel, read from a Kineto trace's kernel args: small
literal traces."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from perfdiff.ranks.groups import kineto_groups, match_groups

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _trace(path: Path, events: list[dict]) -> Path:
    data = json.dumps({"distributedInfo": {"rank": 0, "world_size": 4}, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def test_groups_from_kernel_args(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": NCCL, "ts": 30.0, "dur": 5,
         "args": {"Process Group Name": "2", "pg_name": "2", "Process Group Ranks": "[0, 2]", "Group size": 2}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "ts": 10.0, "dur": 5,
         "args": {"Process Group Name": "1", "Process Group Ranks": [1, 0], "Group size": 2}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "ts": 20.0, "dur": 5, "args": {"pg_name": "tp"}},
        # The op that launched it names the group too: not a kernel.
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 9.0, "dur": 5,
         "args": {"Process Group Name": "1", "Process Group Ranks": "[0, 1]"}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 1.0, "dur": 5, "args": {"Process Group Name": "1"}},
    ]
    for name in ("rank-0.json", "rank-0.json.gz"):
        got = kineto_groups(_trace(tmp_path / name, events))
        assert got is not None and got.start_us.tolist() == [10.0, 20.0, 30.0]
        assert got.label == ["1 [0, 1]", "tp", "2 [0, 2]"]
        assert got.members == {"1 [0, 1]": (0, 1), "tp": (), "2 [0, 2]": (0, 2)}
        assert match_groups(got, 3) == got.label
        assert match_groups(got, 4) is None  # some kernels name no group: none is trusted


def test_no_groups_named(tmp_path: Path) -> None:
    path = _trace(tmp_path / "rank-0.json", [{"ph": "X", "cat": "kernel", "name": NCCL, "ts": 1.0, "dur": 5,
                                               "args": {"device": 0}}])
    assert kineto_groups(path) is None and match_groups(None, 1) is None
    assert kineto_groups(tmp_path / "report.sqlite") is None


def test_nsys_communicators_from_nccl_payloads(tmp_path: Path) -> None:
    """NCCL's ncclAllReduce range names the communicator of the kernel launched inside it; a
    launch outside any such range stays unknown; an export without payloads names none."""
    import sqlite3
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import gen_ranks

    traces = gen_ranks.simulate(4, kernels=80, steps=3, collectives=2, seed=1, plant=gen_ranks.Plant(), tp=2)
    path = tmp_path / "report.2.sqlite"
    gen_ranks.write_nsys([traces[2]], [2], 4, path)
    got = kineto_groups(path)
    assert got is None  # not a Kineto trace
    from perfdiff.ranks.groups import nsys_groups

    got = nsys_groups(path)
    assert got is not None and len(got.label) == 9  # 2 tensor-parallel + 1 data-parallel all-reduce a step
    assert got.label[:3] == ["comm 0x1002", "comm 0x1002", "comm 0x1003"]  # rank 2: groups [2, 3], [0, 2]
    con = sqlite3.connect(path)
    first = con.execute("SELECT min(start) FROM NVTX_EVENTS WHERE text = 'ncclAllReduce'").fetchone()[0]
    con.execute("DELETE FROM NVTX_EVENTS WHERE text = 'ncclAllReduce' AND start = ?", (first,))
    con.commit()
    assert nsys_groups(path).label[:2] == ["", "comm 0x1002"]
    con.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
    con.commit()
    con.close()
    assert nsys_groups(path) is None
