"""The process group of each NCCL kernel: from a Kineto trace's kernel args (per kernel), and
from an nsys export's NCCL payloads; small literal traces."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from perfdiff.inputs import open_run
from perfdiff.ranks.groups import UNKNOWN, collective_labels, nsys_groups
from perfdiff.ranks.part import COLLECTIVE

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _trace(path: Path, events: list[dict]) -> Path:
    data = json.dumps({"distributedInfo": {"rank": 0, "world_size": 4}, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _labels(path: Path) -> list[str]:
    """The label of each NCCL kernel of the trace, in order of start."""
    run = open_run(path, for_compare=True)
    a = run.activity
    rows = np.flatnonzero(a["function"].astype(str).map(lambda n: COLLECTIVE.match(n) is not None).to_numpy())
    rows = rows[np.argsort(a["start_ns"].to_numpy()[rows], kind="stable")]
    return collective_labels(run, rows, path).tolist()


def test_groups_from_kernel_args(tmp_path: Path) -> None:
    """Each NCCL kernel is labelled by its own args: one that names no group is unknown, and
    the others keep theirs."""
    events = [
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 30.0, "dur": 5,
         "args": {"Process Group Name": "2", "pg_name": "2", "Process Group Ranks": "[0, 2]", "Group size": 2}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 10.0, "dur": 5,
         "args": {"Process Group Name": "1", "Process Group Ranks": [1, 0], "Group size": 2}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 20.0, "dur": 5, "args": {"pg_name": "tp"}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 25.0, "dur": 2, "args": {"device": 0}},
        # The op that launched it names the group too: not a kernel.
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 9.0, "dur": 5,
         "args": {"Process Group Name": "1", "Process Group Ranks": "[0, 1]"}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 1.0, "dur": 5,
         "args": {"Process Group Name": "1"}},
    ]
    for name in ("rank-0.json", "rank-0.json.gz"):
        assert _labels(_trace(tmp_path / name, events)) == ["1 [0, 1]", "tp", UNKNOWN, "2 [0, 2]"]


def test_no_groups_named(tmp_path: Path) -> None:
    path = _trace(tmp_path / "rank-0.json", [{"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 1.0,
                                               "dur": 5, "args": {"device": 0}}])
    assert _labels(path) == [UNKNOWN]


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



def test_groups_follow_their_kernels_when_a_comparison_drops_rows(tmp_path: Path) -> None:
    """A comparison keeps only the activity rows of devices with samples: the process groups
    still point at their own kernels afterwards."""
    import dataclasses

    import pandas as pd

    from perfdiff.attribute import CycleMatrix, keep_rows_for_mu

    events = [{"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 1, "tid": 7, "ts": 1.0, "dur": 5},
              {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 10.0, "dur": 5,
               "args": {"Process Group Name": "1", "Process Group Ranks": "[0, 1]"}},
              {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 20.0, "dur": 5}]
    run = open_run(_trace(tmp_path / "rank-0.json", events))
    run = dataclasses.replace(run, samples=pd.DataFrame({"metric": ["sm"], "device": ["GPU 0"], "t_start_ns": [0],
                                                         "t_end_ns": [1], "value": [1.0]}))
    n = len(run.activity)
    matrix = CycleMatrix(pd.DataFrame(), np.zeros((0, 0)), np.zeros(0), np.zeros(0), np.zeros(n, dtype=np.int64),
                         np.zeros(n, dtype=np.int64), 0)
    kept, _ = keep_rows_for_mu(run, matrix)
    assert len(kept.activity) == 2
    assert collective_labels(kept, np.array([0, 1]), kept.path).tolist() == ["1 [0, 1]", UNKNOWN]


def test_named_kernels_after_an_unnamed_one_in_its_cycle_count_unnamed(tmp_path: Path) -> None:
    """The kernel without a group took a place on a communicator not known: the rank's named
    kernels after it in that cycle are unnamed too (their places may be off by one); before it
    and in other cycles they keep their groups."""
    from perfdiff.ranks.part import _collectives
    from perfdiff.ranks.records import IdentitySource, RankInput

    def kernel(ts: float, group: str | None) -> dict:
        args = {"Process Group Name": group, "Process Group Ranks": "[0, 1]"} if group else {"device": 0}
        return {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": ts, "dur": 2, "args": args}

    path = _trace(tmp_path / "rank-0.json", [kernel(10, "1"), kernel(20, None), kernel(30, "1"), kernel(40, "2"),
                                             kernel(50, "1"), kernel(60, "2")])
    run = open_run(path, for_compare=True)
    start = run.activity["start_ns"].to_numpy()
    row_cycle = np.where(start < 50_000, 0, 1)
    cyc, ord_, _, grp, labels, coll_start = _collectives(run, row_cycle, RankInput(0, str(path), IdentitySource.TRACE))
    got = {int(s) // 1000: labels[g] for s, g in zip(coll_start, grp, strict=True)}
    assert got == {10: "1 [0, 1]", 20: UNKNOWN, 30: UNKNOWN, 40: UNKNOWN, 50: "1 [0, 1]", 60: "2 [0, 1]"}
