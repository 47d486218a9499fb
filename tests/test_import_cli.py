"""`perfdiff import` and traces on the command line: round trip, bad traces."""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli

from perfdiff.bundle import load_bundle

RODINIA = "kmcho2019/Rodinia_3.1_Gaussian/report3.sqlite"
NW4 = "pytorch/kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def _one_line(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err, err


@pytest.mark.real
@pytest.mark.parametrize("trace", [RODINIA, NW4], ids=["nsys", "kineto"])
def test_import_round_trip(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str) -> None:
    src = tmp_path / Path(trace).name
    shutil.copy(real / trace, src)
    before = src.read_bytes()
    code, out, err = run_cli(["import", src, "-o", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "wrote" in out
    assert src.read_bytes() == before  # never modify inputs
    run = load_bundle(tmp_path / "run")
    assert (run.activity["kind"] == "kernel").sum() > 1000
    # the bundle and the trace give the same comparison
    for side, arg in (("b", tmp_path / "run"), ("t", src)):
        code, _, err = run_cli(["compare", arg, arg, "-o", tmp_path / f"{side}.md", "--json", tmp_path / f"{side}.json"], capsys)
        assert code == 0, err
    jb, jt = (json.loads((tmp_path / f"{s}.json").read_text()) for s in ("b", "t"))
    assert [jb["functions"][d["func"]]["name"] for d in jb["details"]] == [jt["functions"][d["func"]]["name"]
                                                                     for d in jt["details"]]
    assert jb["normal"]["n_cycles"] == jt["normal"]["n_cycles"]
    code, _, err = run_cli(["import", src, "-o", tmp_path / "run"], capsys)
    _one_line(code, err, "not an empty directory")


@pytest.mark.real
def test_directory_holding_one_trace(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").mkdir()
    shutil.copy(real / RODINIA, tmp_path / "a" / "trace.sqlite")
    code, _, err = run_cli(["compare", tmp_path / "a", tmp_path / "a", "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err


def test_truncated_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}] * 500}).encode())
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    code, _, err = run_cli(["compare", bad, bad], capsys)
    _one_line(code, err, str(bad))


def test_invalid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": ')
    code, _, err = run_cli(["import", bad, "-o", tmp_path / "o"], capsys)
    _one_line(code, err, str(bad))


def test_sqlite_that_is_not_nsys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "other.sqlite"
    with sqlite3.connect(bad) as db:
        db.execute("create table t (x int)")
    code, _, err = run_cli(["compare", bad, bad], capsys)
    _one_line(code, err, str(bad))


def test_export_without_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "nokernels.sqlite"
    with sqlite3.connect(bad) as db:
        db.execute("create table StringIds (id integer primary key, value text)")
        db.execute("create table TARGET_INFO_SESSION_START_TIME (utcEpochNs int)")
        db.execute("insert into TARGET_INFO_SESSION_START_TIME values (1700000000000000000)")
        db.execute("create table NVTX_EVENTS (start int, end int, eventType int, text text, globalTid int)")
    code, _, err = run_cli(["compare", bad, bad], capsys)
    _one_line(code, err, "kernel")


def test_trace_without_cycles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    code, _, err = run_cli(["compare", empty, empty], capsys)
    _one_line(code, err, str(empty))


def test_nsys_rep_without_nsys(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"\0" * 16)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run_cli(["compare", rep, rep], capsys)
    _one_line(code, err, "nsys export --type sqlite")
