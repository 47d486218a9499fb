"""The collector side of the CUPTI agent (collectors/cupti/reader.py, wire.py) on literal
hand-off files: the record layout, partial writes, the launch join, the clock mapping, and an
attach that finds no agent.  Agent and reader together are in test_cupti_agent.py."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from perfdiff.bundle import MISSING
from perfdiff.collectors.cupti import reader as rd
from perfdiff.collectors.cupti import wire


@pytest.fixture
def short_dir() -> Path:
    """A directory with a short path (Unix socket paths are limited to 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def source(directory: Path, warnings: list[str]) -> rd.AgentTraceSource:
    return rd.AgentTraceSource(str(directory), announced=True, warn=warnings.append)


def test_rec_layout_is_48_little_endian_bytes() -> None:
    raw = wire.REC.pack(wire.K_MEMCPY, 7, -1, 2, 3, 4, 5, 6, 2**40)
    assert len(raw) == 48 and raw[:1] == b"\x02" and struct.unpack_from("<I", raw, 4) == (7,)
    arr = np.frombuffer(raw, dtype=rd.record_dtype())
    assert (arr["kind"][0], arr["name"][0], arr["start"][0], arr["bytes"][0]) == (2, 7, -1, 2**40)


def test_cupti_to_wall_with_literal_anchors() -> None:
    raw = np.array([1_000, 2_000, 3_000], dtype=np.int64)
    same, info = rd.cupti_to_wall(raw, [{"cupti_ns": 1_000, "realtime_ns": 1_400, "uncertainty_ns": 100}])
    assert (same == raw).all() and info["applied"] is False  # within tolerance: the same clock
    anchors = [{"cupti_ns": 1_000, "realtime_ns": 10**18 + 1_000, "uncertainty_ns": 50},
               {"cupti_ns": 3_000, "realtime_ns": 10**18 + 3_200, "uncertainty_ns": 50}]
    wall, info = rd.cupti_to_wall(raw, anchors)
    assert wall.tolist() == [10**18 + 1_000, 10**18 + 2_100, 10**18 + 3_200]  # exact ints, drift interpolated
    assert info["applied"] and info["drift_ns"] == 200
    none, info = rd.cupti_to_wall(raw, [])
    assert (none == raw).all() and "no clock anchors" in info["why"]


def _write_spool(d: Path, pid: int, names: dict[int, str], recs: list[tuple], anchors: list[dict]) -> None:
    with open(d / f"{pid}.names", "a") as fh:
        fh.writelines(f"{i}\t{n}\n" for i, n in names.items())
    with open(d / f"{pid}.rec", "ab") as fh:
        fh.write(b"".join(wire.REC.pack(*r) for r in recs))
    (d / f"{pid}.status.json").write_text(json.dumps({"state": "recording", "anchors": anchors}))


def test_wire_format_partial_records_and_late_launches(tmp_path: Path) -> None:
    pid, t = 4242, 1_700_000_000_000_000_000
    anchors = [{"cupti_ns": t, "realtime_ns": t, "uncertainty_ns": 100}]
    # poll 1: a kernel whose cudaLaunchKernel record has not arrived yet, and half a record
    _write_spool(tmp_path, pid, {1: "k1"}, [(wire.K_KERNEL, 1, t + 500, t + 900, 77, 3, 1, 0, 0)], anchors)
    with open(tmp_path / f"{pid}.rec", "ab") as fh:
        fh.write(wire.REC.pack(wire.K_API, 2, t + 100, t + 150, 77, 0, 0, 31337, 0)[:20])
    src = source(tmp_path, [])
    assert src.sample(t) == {}  # the kernel waits one poll for its launch; half a record is not read
    # poll 2: the rest of the record (its name written first, as the agent does)
    with open(tmp_path / f"{pid}.names", "a") as fh:
        fh.write("2\tcudaLaunchKernel_v7000\n")
    with open(tmp_path / f"{pid}.rec", "ab") as fh:
        fh.write(wire.REC.pack(wire.K_API, 2, t + 100, t + 150, 77, 0, 0, 31337, 0)[20:])
    act = src.sample(t)["activity"]
    k = act[act["kind"] == "kernel"].iloc[0]
    assert (k["function"], k["device"], k["stream"], k["launch_ns"], k["tid"]) == ("k1", "GPU 1", 3, t + 100, 31337)
    a = act[act["kind"] == "api"].iloc[0]
    assert (a["function"], a["device"], a["launch_ns"], a["stream"]) == ("cudaLaunchKernel", "Host", MISSING, MISSING)
    # a kernel whose launch never comes is written at the next poll without launch_ns
    _write_spool(tmp_path, pid, {3: "k2"}, [(wire.K_KERNEL, 3, t + 1000, t + 1500, 99, 3, 1, 0, 0)], anchors)
    assert src.sample(t) == {}
    act = src.sample(t)["activity"]
    assert act["function"].astype(str).tolist() == ["k2"] and act["launch_ns"].tolist() == [MISSING]
    assert src.manifest()["collector"]["agents"][0]["unjoined_launches"] == 1


def test_attach_without_agent_says_so_plainly(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rd, "default_agent_dir", lambda uid=None, root="": root + str(short_dir))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        warnings: list[str] = []
        src = rd.AgentTraceSource.attach(proc.pid, warnings.append)
        msg = (f"no perfdiff agent in pid {proc.pid}: no kernel trace and no engine steps for that pid; "
               "collecting host and GPU metrics only")
        assert warnings == [msg]
        src.start(time.time_ns())
        assert src.sample(time.time_ns()) == {} and src.stop() == {}
        man = src.manifest()
        assert man["unsupported"][0]["reason"] == msg and man["collector"]["absent"] == msg
    finally:
        proc.kill()
        proc.wait()
