"""Run bundle v1: round trip, validation of every way a bundle can be wrong, crash safety."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfdiff.bundle import (MISSING, BundleWriter, RunData, base_manifest, empty_table, load_bundle,
                             normalize_table, write_bundle)
from perfdiff.errors import InputError


def small_run() -> RunData:
    act = normalize_table("activity", pd.DataFrame({
        "function": ["k|1", "k<2>", "oncpu"], "kind": ["kernel", "kernel", "host"],
        "device": ["GPU 0", "GPU 0", "Host"],
        "start_ns": [1_700_000_000_000_000_001, 1_700_000_000_000_000_500, 1_700_000_000_000_000_000],
        "end_ns": [1_700_000_000_000_000_101, 1_700_000_000_000_000_900, 1_700_000_000_000_001_000],
        "busy_ns": [100, 400, 1500], "launch_ns": [1_700_000_000_000_000_000, MISSING, MISSING],
    }))
    samples = normalize_table("samples", pd.DataFrame({
        "metric": ["gpu_usage"], "device": ["GPU 0"], "t_start_ns": [5], "t_end_ns": [5], "value": [np.nan]}))
    return RunData(base_manifest(run_name="r"), act, samples, empty_table("markers"))


def test_round_trip_keeps_ns_precision_and_nulls(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    back = load_bundle(tmp_path / "b")
    a = back.activity
    assert list(a["function"].astype(str)) == ["k|1", "k<2>", "oncpu"]
    # int64 ns survive exactly (a float64 detour would lose the last digits)
    assert a["start_ns"].tolist()[0] == 1_700_000_000_000_000_001
    assert a["launch_ns"].tolist() == [1_700_000_000_000_000_000, MISSING, MISSING]
    assert a["tid"].tolist() == [MISSING] * 3
    assert np.isnan(back.samples["value"].iloc[0])
    # on disk, unknown is null, and one pandas call opens a table
    disk = pd.read_parquet(tmp_path / "b" / "activity")
    assert disk["launch_ns"].isna().tolist() == [False, True, True]
    assert back.manifest["status"] == "complete"
    assert back.manifest["files"]["activity"]["rows"] == 3


def test_unknown_format_version(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    m["format_version"] = 99
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match=r"manifest\.json: unknown format_version 99"):
        load_bundle(tmp_path / "b")


def test_missing_table(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    for p in (tmp_path / "b" / "markers").iterdir():
        p.unlink()
    (tmp_path / "b" / "markers").rmdir()
    with pytest.raises(InputError, match="missing table 'markers'"):
        load_bundle(tmp_path / "b")


def test_wrong_column_type(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    part = next((tmp_path / "b" / "samples").glob("part-*.parquet"))
    t = pq.read_table(part)
    t = t.set_column(t.column_names.index("value"), "value", pa.array(["x"] * t.num_rows))
    pq.write_table(t, part)
    with pytest.raises(InputError, match=r"part-000000\.parquet: column 'value' has type string, expected f8"):
        load_bundle(tmp_path / "b")


def test_end_before_start(tmp_path: Path) -> None:
    run = small_run()
    run.activity.loc[1, "end_ns"] = run.activity.loc[1, "start_ns"] - 1
    write_bundle(tmp_path / "b", run)
    with pytest.raises(InputError, match=r"activity: 1 row\(s\) with end_ns < start_ns"):
        load_bundle(tmp_path / "b")


def test_truncated_part(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    part = next((tmp_path / "b" / "activity").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:40])
    with pytest.raises(InputError, match="corrupt or truncated Parquet"):
        load_bundle(tmp_path / "b")


def test_corrupt_manifest(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", small_run())
    (tmp_path / "b" / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="manifest is not valid JSON"):
        load_bundle(tmp_path / "b")


def test_incremental_writer_survives_a_crash(tmp_path: Path) -> None:
    """A writer that never closes (killed) leaves whole parts and a loadable bundle."""
    run = small_run()
    w = BundleWriter(tmp_path / "b", base_manifest(run_name="crash"))
    w.append("activity", run.activity)
    w.append("activity", run.activity)
    (tmp_path / "b" / "activity" / ".part-000002.parquet.tmp").write_bytes(b"half a file")
    # no close(): samples and markers have no parts yet
    with pytest.raises(InputError, match="missing table 'samples'"):
        load_bundle(tmp_path / "b")
    w.append("samples", run.samples)
    w.append("markers", empty_table("markers"))
    back = load_bundle(tmp_path / "b")
    assert len(back.activity) == 6
    assert back.manifest["status"] == "interrupted"
    assert any("did not finish" in n for n in back.notes)


def test_writer_refuses_non_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("keep me")
    with pytest.raises(InputError, match="not empty"):
        BundleWriter(tmp_path / "b", {})
    assert (tmp_path / "b" / "x").read_text() == "keep me"
