"""Malformed and hostile inputs give one line and exit 2; a bug gives one line and exit 70
(its traceback with --debug or PERFDIFF_DEBUG=1); values out of range follow the rules of
docs/FORMATS.md (refuse the file naming the first bad row, or drop the rows and say so)."""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from conftest import EXAMPLES, run_cli
from test_import_nsys import make_export

from perfdiff.errors import EXIT_GATE, EXIT_INPUT, EXIT_INTERNAL, InputError
from perfdiff.importers.kineto import import_kineto
from perfdiff.importers.nsys import import_nsys


def kineto(path: Path, events: list[dict], **header: object) -> Path:
    path.write_text(json.dumps({**header, "traceEvents": events}))
    return path


def kernel(ts: object = 100, dur: object = 5, name: str = "k", **more: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": 1}, **more}


def one_line(code: int, err: str, expected: int) -> None:
    assert code == expected, err
    assert err.count("\n") == 1 and err.startswith("perfdiff: ") and "Traceback" not in err, err


def test_the_four_hostile_inputs_give_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big_ts = kineto(tmp_path / "big_ts.json", [kernel(ts=1e30)])
    dur_abc = kineto(tmp_path / "dur_abc.json", [kernel(dur="abc"), kernel(ts=200)])
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000)
    text_start = make_export(tmp_path / "text_start.sqlite")
    con = sqlite3.connect(text_start)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 3")
    con.commit()
    con.close()
    for path, says in ((big_ts, r"traceEvents\[0\] \(\"k\"\): ts 1E\+30 µs is beyond the int64 ns range"),
                       (dur_abc, r"traceEvents\[0\] \(\"k\"\): dur is not a number: \"abc\""),
                       (nested, "nested too deeply"),
                       (text_start, r"CUPTI_ACTIVITY_KIND_KERNEL\.start row 3: 'abc' is not an integer")):
        code, _, err = run_cli(["import", path, "-o", tmp_path / f"out-{path.stem}"], capsys)
        one_line(code, err, EXIT_INPUT)
        assert path.name in err
        assert re.search(says, err), err


def test_a_bug_is_one_line_exit_70_naming_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    trace = kineto(tmp_path / "fine.json", [kernel()])

    def planted(*args: object, **kwargs: object) -> None:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr("perfdiff.importers.kineto.import_kineto", planted)
    code, _, err = run_cli(["import", trace, "-o", tmp_path / "out"], capsys)
    one_line(code, err, EXIT_INTERNAL)
    assert err == (f"perfdiff: internal error while reading {trace}: OverflowError: Python int too large to "
                   "convert to C long; rerun with --debug for the traceback\n")
    assert code != EXIT_GATE
    for argv, env in ((["--debug", "import", trace, "-o", tmp_path / "o2"], None),
                      (["import", trace, "-o", tmp_path / "o3", "--debug"], None),
                      (["import", trace, "-o", tmp_path / "o4"], "1")):
        if env:
            monkeypatch.setenv("PERFDIFF_DEBUG", env)
        code, _, err = run_cli(argv, capsys)
        assert code == EXIT_INTERNAL
        assert err.startswith("Traceback (most recent call last)") and "in planted" in err, err
        assert err.splitlines()[-1] == f"perfdiff: internal error while reading {trace}: OverflowError: Python int " \
                                       "too large to convert to C long"


def test_a_bug_in_a_worker_process_is_one_line_exit_70(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """compare loads the two runs in forked workers: the bug crosses back with its input."""
    from perfdiff.parallel import Parallel

    monkeypatch.setattr(Parallel, "pair_min_bytes", 0)
    normal = kineto(tmp_path / "normal.json", [kernel()])
    abnormal = kineto(tmp_path / "abnormal.json", [kernel(ts=300)])

    def planted(path: object, *args: object, **kwargs: object) -> None:
        raise OverflowError("planted")

    monkeypatch.setattr("perfdiff.importers.kineto.import_kineto", planted)
    code, _, err = run_cli(["compare", normal, abnormal, "-o", tmp_path / "r.md"], capsys)
    one_line(code, err, EXIT_INTERNAL)
    assert f"internal error while reading {normal}: OverflowError: planted;" in err
    code, _, err = run_cli(["--debug", "compare", normal, abnormal, "-o", tmp_path / "r.md"], capsys)
    assert code == EXIT_INTERNAL and "Traceback" in err and "in planted" in err


def test_usage_errors_stay_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", str(EXAMPLES / "cpufreq" / "normal"), "--no-such-option"], capsys)
    one_line(code, err, EXIT_INPUT)


@pytest.mark.parametrize("value, says", [
    (float("nan"), "ts NaN µs is not finite"), (float("inf"), "ts Infinity µs is not finite"),
    (-1e20, "is beyond the int64 ns range"), (True, "ts is not a number: true"), (None, "ts is not a number: null"),
    ("100", 'ts is not a number: "100"'), ({"a": 1}, "ts is not a number")])
def test_kineto_ts_not_a_finite_number_refuses_the_file(tmp_path: Path, value: object, says: str) -> None:
    path = kineto(tmp_path / "t.json", [kernel(ts=200), kernel(ts=value, name="bad")])
    with pytest.raises(InputError, match=r"traceEvents\[1\] \(\"bad\"\): ") as info:
        import_kineto(path)
    assert says in str(info.value)


def test_kineto_missing_ts_or_dur_refuses_the_file(tmp_path: Path) -> None:
    for key in ("ts", "dur"):
        event = kernel()
        del event[key]
        with pytest.raises(InputError, match=f"traceEvents\\[0\\] \\(\"k\"\\): has no {key}"):
            import_kineto(kineto(tmp_path / f"no_{key}.json", [event]))


def test_kineto_end_beyond_int64_after_the_base_refuses_the_file(tmp_path: Path) -> None:
    near = (2 ** 63 - 1) // 1000 - 10  # µs: fits alone, not once the base is added
    with pytest.raises(InputError, match="beyond the int64 ns range"):
        import_kineto(kineto(tmp_path / "t.json", [kernel(ts=near)], baseTimeNanoseconds=10 ** 18))
    for base in (1e30, -5, float("nan")):
        with pytest.raises(InputError, match="baseTimeNanoseconds .* is not a time in int64 ns"):
            import_kineto(kineto(tmp_path / "b.json", [kernel()], baseTimeNanoseconds=base))


def test_kineto_negative_durations_are_dropped_and_said(tmp_path: Path) -> None:
    run = import_kineto(kineto(tmp_path / "t.json", [kernel(ts=100, dur=-5), kernel(ts=200), kernel(ts=300, dur=-1)]))
    assert len(run.activity) == 1
    assert "2 events with a negative duration dropped" in run.notes
    assert run.manifest["dropped"]["events with a negative duration"] == 2


def test_nsys_non_integer_values_refuse_the_file_naming_the_row(tmp_path: Path) -> None:
    for table, column, value in (("CUPTI_ACTIVITY_KIND_KERNEL", "start", 1.5),
                                 ("CUPTI_ACTIVITY_KIND_RUNTIME", "end", "x"),
                                 ("NVTX_EVENTS", "start", "soon"),
                                 ("GPU_METRICS", "timestamp", 1e30)):
        path = make_export(tmp_path / f"{table}-{column}.sqlite")
        con = sqlite3.connect(path)
        con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = 2', (value,))
        con.commit()
        con.close()
        with pytest.raises(InputError, match=f"{table}\\.{column} row 2: .* is not an integer"):
            import_nsys(path)


def test_nsys_times_beyond_int64_after_the_session_start_refuse_the_file(tmp_path: Path) -> None:
    path = make_export(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = ? WHERE rowid = 1", (2 ** 63 - 10,))
    con.commit()
    con.close()
    with pytest.raises(InputError, match="beyond the int64 ns range"):
        import_nsys(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'yesterday'")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="utcEpochNs 'yesterday' is not a time in int64 ns"):
        import_nsys(path)


def test_nsys_rows_ending_before_they_start_are_dropped_and_said(tmp_path: Path) -> None:
    run = import_nsys(make_export(tmp_path / "t.sqlite"))  # holds one such kernel
    assert "1 kernel rows that end before they start dropped" in run.notes
    assert run.manifest["dropped"]["kernel: end before start"] == 1


def test_bundle_manifest_nested_too_deeply(tmp_path: Path) -> None:
    from perfdiff.bundle import load_bundle

    (tmp_path / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(InputError, match="nested too deeply"):
        load_bundle(tmp_path)


@pytest.mark.parametrize("name", ["rank#0.sqlite", "what?.sqlite", "100%.sqlite", "a b&c=1.sqlite",
                                  "bad\udcff.sqlite"])  # the byte 0xff: a name that is not UTF-8
def test_an_nsys_export_named_with_uri_characters_is_read_and_nothing_is_created(tmp_path: Path, name: str) -> None:
    """SQLite reads "file:" URIs: a "#" or "?" in the name ended the path there, so SQLite opened
    (creating it, beside the input) the file named by what came before, and the export read
    as "not an Nsight Systems export".  Imported, and for the ranks' readers, as it is."""
    from perfdiff.importers.nsys.reference import reference_tables
    from perfdiff.ranks.discover import rank_inputs
    from perfdiff.ranks.groups import nsys_groups

    folder = tmp_path / "in"
    folder.mkdir()
    path = make_export(folder / name)
    before = sorted(p.name for p in folder.iterdir())
    run = import_nsys(path)
    assert len(run.activity) == len(reference_tables(path)["activity"]) > 0
    assert [r.pid for r in rank_inputs(path, split_processes=True)] != [] and nsys_groups(path) is None
    assert sorted(p.name for p in folder.iterdir()) == before
