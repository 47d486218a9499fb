"""Run bundle v1: round trip, validation of every way a bundle can be wrong, crash safety."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc  # noqa: F401 (pa.ipc)
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


def gpu_ranges() -> pd.DataFrame:
    return normalize_table("gpu_ranges", pd.DataFrame({
        "name": ["forward", "attn|x"], "device": ["GPU 0", "GPU 0"], "stream": [7, MISSING],
        "start_ns": [1_700_000_000_000_000_001, 1_700_000_000_000_000_002],
        "end_ns": [1_700_000_000_000_000_901, 1_700_000_000_000_000_003]}))


def test_gpu_ranges_are_an_optional_table(tmp_path: Path) -> None:
    """A run's GPU-side ranges round-trip as the table gpu_ranges; a run without any writes no
    such folder, and a bundle without it (an older one) loads with none."""
    run = small_run()
    run.gpu_ranges = gpu_ranges()
    write_bundle(tmp_path / "g", run)
    back = load_bundle(tmp_path / "g")
    g = back.gpu_ranges
    assert g is not None and list(g["name"].astype(str)) == ["forward", "attn|x"]
    assert g["start_ns"].tolist()[0] == 1_700_000_000_000_000_001 and g["stream"].tolist() == [7, MISSING]
    assert pd.read_parquet(tmp_path / "g" / "gpu_ranges")["stream"].isna().tolist() == [False, True]
    assert back.manifest["files"]["gpu_ranges"] == {"parts": 1, "rows": 2}
    for name, r in (("none", small_run()), ("empty", small_run())):
        r.gpu_ranges = None if name == "none" else empty_table("gpu_ranges")
        write_bundle(tmp_path / name, r)
        assert not (tmp_path / name / "gpu_ranges").exists()
        assert set(load_bundle(tmp_path / name).manifest["files"]) == {"activity", "samples", "markers"}
    for p in (tmp_path / "g" / "gpu_ranges").iterdir():
        p.unlink()
    (tmp_path / "g" / "gpu_ranges").rmdir()
    old = load_bundle(tmp_path / "g")
    assert old.gpu_ranges is not None and len(old.gpu_ranges) == 0
    assert list(old.gpu_ranges.columns) == ["name", "device", "stream", "start_ns", "end_ns"]
    assert old.activity.equals(back.activity)


def test_gpu_ranges_are_validated_as_the_other_tables(tmp_path: Path) -> None:
    run = small_run()
    bad = gpu_ranges()
    bad.loc[1, "end_ns"] = 0
    run.gpu_ranges = bad
    write_bundle(tmp_path / "b", run)
    with pytest.raises(InputError, match=r"gpu_ranges: 1 row\(s\) with end_ns < start_ns"):
        load_bundle(tmp_path / "b")


def test_a_collectors_bundle_has_no_optional_table(tmp_path: Path) -> None:
    from perfdiff.bundle import open_writer

    path = open_writer(tmp_path / "c", {"run_name": "c"}).close()
    assert sorted(p.name for p in path.iterdir()) == ["activity", "manifest.json", "markers", "samples"]
    assert set(json.loads((path / "manifest.json").read_text())["files"]) == {"activity", "samples", "markers"}


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


def test_mid_run_manifest_is_compact_and_the_final_one_indented(tmp_path: Path) -> None:
    """A collector's mid-run rewrites are one line (json's C encoder); close indents it.  Both
    load."""
    run = small_run()
    w = BundleWriter(tmp_path / "b", base_manifest(run_name="m"))
    for t in ("activity", "samples", "markers"):
        w.append(t, getattr(run, t) if t != "markers" else empty_table("markers"))
    w.update_manifest(collection={"ticks": 3})
    text = (tmp_path / "b" / "manifest.json").read_text()
    assert "\n" not in text.strip() and '"ticks":3' in text
    back = load_bundle(tmp_path / "b")
    assert back.manifest["collection"] == {"ticks": 3} and back.manifest["status"] == "interrupted"
    w.update_manifest(collection={"ticks": 4})
    w.close("complete")
    text = (tmp_path / "b" / "manifest.json").read_text()
    assert text.count("\n") > 10 and '"ticks": 4' in text
    assert load_bundle(tmp_path / "b").manifest["status"] == "complete"


def test_writer_refuses_non_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("keep me")
    with pytest.raises(InputError, match="not empty"):
        BundleWriter(tmp_path / "b", {})
    assert (tmp_path / "b" / "x").read_text() == "keep me"


# ----------------------------------------------------------------------------- journals


def journaled_writer(tmp_path: Path, batches: int = 3) -> tuple[BundleWriter, Path]:
    """A collector-style writer: empty first parts, then `batches` journal appends of 2 rows."""
    from perfdiff.bundle import columns_to_arrow
    from perfdiff.bundle import open_writer

    w = open_writer(tmp_path / "b", {"run_name": "j"})
    for i in range(batches):
        cols = {"metric": ["gpu_usage", "gpu_usage"], "device": ["GPU 0", "GPU 1"],
                "t_start_ns": [10 * i, 10 * i], "t_end_ns": [10 * i + 5] * 2, "value": [float(i), 1.5]}
        w.journal("samples", columns_to_arrow("samples", [cols]))  # an Arrow table: the .arrows journal
    return w, tmp_path / "b" / "samples" / ".part-000001.arrows"


def test_killed_collector_journal_is_read_whole(tmp_path: Path) -> None:
    w, journal = journaled_writer(tmp_path)
    assert journal.is_file()
    before = journal.read_bytes()
    back = load_bundle(tmp_path / "b")  # no close(): the writer was "killed"
    assert back.samples["value"].tolist() == [0.0, 1.5, 1.0, 1.5, 2.0, 1.5]
    assert back.samples["device"].dtype == "category"
    assert any("6 rows read from the unsealed journal .part-000001.arrows" in n for n in back.notes)
    assert back.manifest["status"] == "interrupted"
    assert journal.read_bytes() == before  # inputs are never modified
    # pandas' one call reads the sealed parts and skips the journal (a dot-file)
    assert len(pd.read_parquet(tmp_path / "b" / "samples")) == 0


def test_torn_last_journal_batch_is_dropped_not_fatal(tmp_path: Path) -> None:
    w, journal = journaled_writer(tmp_path)
    raw = journal.read_bytes()
    journal.write_bytes(raw[:-60])  # the kill came in the middle of the last write
    back = load_bundle(tmp_path / "b")
    assert back.samples["value"].tolist() == [0.0, 1.5, 1.0, 1.5]
    assert any("half-written batch dropped" in n for n in back.notes)
    journal.write_bytes(b"")  # killed before the schema reached the disk: nothing in it
    assert len(load_bundle(tmp_path / "b").samples) == 0
    for cut in (8, 100, 200):  # killed while the schema was being written: no whole record
        journal.write_bytes(raw[:cut])
        back = load_bundle(tmp_path / "b")
        assert len(back.samples) == 0 and any("0 rows" in n and "half-written" in n for n in back.notes)


def test_sealed_journal_left_behind_is_not_read_twice(tmp_path: Path) -> None:
    """Killed between the part's rename and the journal's removal: the rows count once."""
    w, journal = journaled_writer(tmp_path)
    saved = journal.read_bytes()
    w.seal_journal("samples")
    assert not journal.exists() and (journal.parent / "part-000001.parquet").is_file()
    journal.write_bytes(saved)
    back = load_bundle(tmp_path / "b")
    assert len(back.samples) == 6 and not any("journal" in n for n in back.notes)


def test_close_seals_journals_and_append_keeps_their_order(tmp_path: Path) -> None:
    w, journal = journaled_writer(tmp_path, batches=1)
    extra = normalize_table("samples", pd.DataFrame({"metric": ["x"], "device": ["Host"], "t_start_ns": [99],
                                                     "t_end_ns": [99], "value": [9.0]}))
    w.append("samples", extra)  # a direct part seals the journal first: journaled rows stay first
    w.close()
    assert not list((tmp_path / "b").rglob(".part-*"))
    back = load_bundle(tmp_path / "b")
    assert back.samples["value"].tolist() == [0.0, 1.5, 9.0]
    assert back.manifest["files"]["samples"] == {"parts": 3, "rows": 3}
    assert pq.read_schema(tmp_path / "b" / "samples" / "part-000001.parquet").field("metric").type == \
        pa.dictionary(pa.int32(), pa.string())


def columns_writer(tmp_path: Path) -> tuple[BundleWriter, Path]:
    """Collector-style appends of column lists (the host sampler's form): Arrow batches."""
    from perfdiff.bundle import open_writer

    w = open_writer(tmp_path / "b", {"run_name": "j"})
    for i in range(3):
        w.journal("activity", {"function": ["oncpu", "runq|<x>"], "kind": ["host", "host"],
                               "device": ["Host", "Host"], "start_ns": [10 * i] * 2,
                               "end_ns": [10 * i + 10] * 2, "busy_ns": [7, 2], "bytes": [MISSING, 4096]})
    return w, tmp_path / "b" / "activity" / ".part-000001.arrows"


def test_column_rows_journal_as_arrow_batches_and_load_after_a_kill(tmp_path: Path) -> None:
    w, journal = columns_writer(tmp_path)
    with pa.ipc.open_stream(journal.read_bytes()) as reader:
        assert sum(1 for _ in reader) == 3  # one batch per append
    back = load_bundle(tmp_path / "b")
    a = back.activity
    assert list(a["function"].astype(str)) == ["oncpu", "runq|<x>"] * 3
    assert a["bytes"].tolist() == [MISSING, 4096] * 3 and a["tid"].tolist() == [MISSING] * 6
    assert any("6 rows read from the unsealed journal .part-000001.arrows" in n for n in back.notes)
    # a kill in the middle of the last batch: the whole batches are kept
    journal.write_bytes(journal.read_bytes()[:-25])
    back = load_bundle(tmp_path / "b")
    assert len(back.activity) == 4 and any("half-written batch dropped" in n for n in back.notes)


def _packed(code: str, values: list) -> dict:
    """A packed column of an older collector's .jsonl journal (docs/FORMAT.md)."""
    import base64
    from array import array

    raw = array(code, values)
    if sys.byteorder == "big":
        raw.byteswap()
    return {code: base64.b64encode(raw.tobytes()).decode("ascii")}


def test_older_json_lines_journals_still_load(tmp_path: Path) -> None:
    """A bundle of an older collector, killed with `.jsonl` journals of packed columns."""
    from perfdiff.bundle import open_writer

    open_writer(tmp_path / "b", {"run_name": "old"})
    journal = tmp_path / "b" / "activity" / ".part-000001.jsonl"
    line = {"function": ["oncpu", "a\x1fb"], "kind": {"s": "host\x1fhost"}, "device": {"s": "Host\x1fHost"},
            "start_ns": _packed("q", [1, 2**62]), "end_ns": _packed("q", [5, 2**62 + 1]),
            "busy_ns": _packed("q", [7, 2]), "bytes": _packed("q", [MISSING, 4096])}
    journal.write_text((json.dumps(line) + "\n") * 3)
    (tmp_path / "b" / "samples" / ".part-000001.jsonl").write_text(json.dumps(
        {"metric": {"s": "m\x1fm"}, "device": {"s": "Host\x1fCPU 0"}, "t_start_ns": [1, 2], "t_end_ns": [1, 2],
         "value": _packed("d", [1.5, float("nan")])}) + "\n")
    back = load_bundle(tmp_path / "b")
    a = back.activity
    assert list(a["function"].astype(str)) == ["oncpu", "a\x1fb"] * 3
    assert a["start_ns"].tolist() == [1, 2**62] * 3 and a["bytes"].tolist() == [MISSING, 4096] * 3
    assert a["tid"].tolist() == [MISSING] * 6
    assert any("6 rows read from the unsealed journal .part-000001.jsonl" in n for n in back.notes)
    v = back.samples["value"].tolist()
    assert v[0] == 1.5 and math.isnan(v[1])
    # a kill in the middle of the last line: the whole lines are kept
    journal.write_bytes(journal.read_bytes()[:-25])
    back = load_bundle(tmp_path / "b")
    assert len(back.activity) == 4 and any("half-written batch dropped" in n for n in back.notes)
    journal.write_bytes(b'{"function": ["oncpu"]}\n')
    with pytest.raises(InputError, match=r"\.part-000001\.jsonl: corrupt journal \(activity rows lack column 'kind'\)"):
        load_bundle(tmp_path / "b")
    journal.write_bytes(b'{"function": ["x"], "kind": ["host"], "device": ["Host"], "start_ns": ["soon"], '
                        b'"end_ns": [1], "busy_ns": [1]}\n')
    with pytest.raises(InputError, match=r"\.part-000001\.jsonl: corrupt journal"):
        load_bundle(tmp_path / "b")
    journal.write_bytes(b"[1, 2]\n")
    with pytest.raises(InputError, match="line 1 is not an object of columns"):
        load_bundle(tmp_path / "b")
    for bad, why in ((b'{"q": "AAAA"}', "not whole 8-byte values"), (b'{"q": "#!"}', "bad base64"),
                     (b'{"x": "AA"}', "neither a list of values nor a packed column")):
        journal.write_bytes(b'{"function": ["x"], "kind": ["host"], "device": ["Host"], "start_ns": ' + bad
                            + b', "end_ns": [1], "busy_ns": [1]}\n')
        with pytest.raises(InputError, match=f"corrupt journal \\(line 1: .*{why}"):
            load_bundle(tmp_path / "b")


def test_journal_keeps_every_value_as_it_was(tmp_path: Path) -> None:
    """Strings holding U+001F, int64 extremes, MISSING, NaN and -0.0 load back the same."""
    from perfdiff.bundle import open_writer

    w = open_writer(tmp_path / "b", {"run_name": "p"})
    names = ["a\x1fb", "`|<c>`", ""]
    w.journal("activity", {"function": names, "kind": ["host"] * 3, "device": ["Host"] * 3,
                           "start_ns": [1, 2, 2**62], "end_ns": [5, 6, 2**62 + 1], "busy_ns": [0, -1, 7],
                           "bytes": [MISSING, 4096, 2**40]})
    w.journal("samples", {"metric": ["m", "m", "m"], "device": ["Host", "CPU 0", "Host"],
                          "t_start_ns": [1, 2, 3], "t_end_ns": [1, 2, 3], "value": [1.5, float("nan"), -0.0]})
    back = load_bundle(tmp_path / "b")
    a = back.activity
    assert list(a["function"].astype(str)) == names
    assert a["start_ns"].tolist() == [1, 2, 2**62] and a["busy_ns"].tolist() == [0, -1, 7]
    assert a["bytes"].tolist() == [MISSING, 4096, 2**40]
    v = back.samples["value"].tolist()
    assert v[0] == 1.5 and math.isnan(v[1]) and str(v[2]) == "-0.0"


def test_column_and_frame_rows_share_one_journal_and_part(tmp_path: Path) -> None:
    from perfdiff.bundle import journal_rows

    w, journal = columns_writer(tmp_path)
    frame = normalize_table("activity", pd.DataFrame({
        "function": ["k"], "kind": ["kernel"], "device": ["GPU 0"], "start_ns": [5], "end_ns": [9],
        "busy_ns": [4], "launch_ns": [3]}))
    w.journal("activity", journal_rows("activity", [frame])[1])  # a DataFrame chunk
    assert [p.name for p in journal.parent.glob(".part-*")] == [journal.name]
    assert len(load_bundle(tmp_path / "b").activity) == 7  # every row read before sealing
    w.journal("samples", {"metric": ["m"], "device": ["Host"], "t_start_ns": [1], "t_end_ns": [2],
                          "value": [float("nan")]})
    w.close()
    assert not list((tmp_path / "b").rglob(".part-*"))
    back = load_bundle(tmp_path / "b")
    assert sorted(back.activity["function"].astype(str)) == ["k"] + ["oncpu"] * 3 + ["runq|<x>"] * 3
    assert back.activity.loc[back.activity["function"] == "k", "launch_ns"].tolist() == [3]
    assert back.manifest["files"]["activity"] == {"parts": 2, "rows": 7}
