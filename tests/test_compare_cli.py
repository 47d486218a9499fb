"""`perfdiff compare` end to end: the example's story, bad input, options, escaping."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import EXAMPLES, ROOT, run_cli

from generate_cpufreq import REGRESSED, generate_run
from perfdiff.bundle import empty_table, load_bundle, normalize_table, write_bundle


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("pair")
    return (generate_run(d / "normal", scenario="normal", seed=11, n_cycles=80),
            generate_run(d / "abnormal", scenario="abnormal", seed=12, n_cycles=40))


def _one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("perfdiff: ")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_example_story(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    code, _, err = run_cli(["compare", *pair, "-o", out, "--json", js], capsys)
    assert code == 0, err
    rep = json.loads(js.read_text())
    kinds = [f["code"] for f in rep["findings"]]
    # the host-side cause, named in words
    causes = [f for f in rep["findings"] if f["code"] == "cause"]
    cause_names = [f["function"] for f in causes]
    assert "Scheduler.get_next_batch_to_run" in cause_names
    assert any(f["code"] == "resource" and f["evidence"]["metric"] == "cpu_frequency"
               and f["evidence"]["mean_a"] < f["evidence"]["mean_n"] for f in rep["findings"])
    assert "Resource: **cpu\\_frequency** on Host fell from" in out.read_text()
    # the common-mode shift on the GPU, about ×0.3
    cm = [c for c in rep["common_modes"] if c["triggered"]]
    assert len(cm) == 1 and cm[0]["device"] == "GPU 0" and 0.2 < cm[0]["ratio"] < 0.45
    assert "common-mode" in kinds
    # the regressed kernel is a cause; the kernels that only moved with the common factor are not
    assert REGRESSED in cause_names
    details = rep["details"]
    rank = {rep["functions"][d["func"]]["name"]: i for i, d in reversed(list(enumerate(details)))}
    innocent = [f["name"] for f in rep["functions"] if f["kind"] == "kernel" and f["name"] != REGRESSED]
    assert all(rank[REGRESSED] < rank[k] for k in innocent)
    for k in innocent:
        f = next(x for x in rep["functions"] if x["name"] == k)
        assert f["q_t"] > 0.05 and abs(f["tau_pp"]) < 0.2  # own time unchanged
        assert f["beta_a"] < 0.5 * f["beta_n"]  # yet β fell
    # the wait is a symptom, not a cause
    assert "cudaStreamSynchronize" not in cause_names
    assert any(f["code"] == "symptom" and f["function"] == "cudaStreamSynchronize" for f in rep["findings"])
    md = out.read_text()
    for section in ("## 1. High-Level Performance Summary", "## 2. Cycle Duration Distribution Comparison",
                    "## 3. In-depth Core Metric Comparison", "### Overview", "### Key Findings:",
                    "### Detailed comparison table", "### Context metrics",
                    "## 4. Run comparability and data quality", "## 5. Legend"):
        assert section in md
    assert (tmp_path / "r.cycles.csv").read_text().startswith("rank,normal_us,abnormal_us\n1,")
    # aliases merge, constants leave the tables, scopes follow the sampling interval
    assert rep["aliases"]["gpu_frequency@GPU 0"] == ["gpu_sm_frequency"]
    assert rep["aliases"]["gpu_usage@GPU 0"] == ["process_gpu_usage"]
    assert "gpu_mem_frequency@GPU 0" in rep["constants"]
    assert {c["metric"] for c in rep["context"]}.isdisjoint({"gpu_sm_frequency", "gpu_mem_frequency"})
    assert rep["scope"]["gpu_sm_util@GPU 0"] == "func" and rep["scope"]["cpu_frequency@Host"] == "ctx"
    assert any(d["mu"] is not None and rep["mu"][d["mu"]]["metric"] == "gpu_sm_util" for d in rep["details"])
    assert "Constant in both runs (left out of the tables): gpu\\_mem\\_frequency@GPU 0" in md
    # every number is finite or null, never NaN, in the JSON
    assert "NaN" not in js.read_text()


def test_report_to_stdout(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["compare", *pair, "--top", "3"], capsys)
    assert code == 0
    assert out.startswith("# Cross Performance Comparison")
    assert "Top 3 of" in out


def test_missing_path(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", tmp_path / "nope", pair[1]], capsys)
    _one_line_error(code, err, f"{tmp_path / 'nope'}: no such file or directory")


def test_empty_directory(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["compare", pair[0], tmp_path / "empty"], capsys)
    _one_line_error(code, err, "empty directory")


def test_corrupt_part(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(pair[1], bad)
    part = next((bad / "activity").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    code, _, err = run_cli(["compare", pair[0], bad], capsys)
    _one_line_error(code, err, "corrupt or truncated Parquet")
    assert str(part) in err


def test_unknown_file(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "trace.txt"
    f.write_text("hello")
    code, _, err = run_cli(["compare", f, pair[1]], capsys)
    _one_line_error(code, err, "unknown input")


def _bundle_with_markers(path: Path, n_markers: int) -> Path:
    src = load_bundle(EXAMPLES / "cpufreq" / "normal")
    m = src.markers.iloc[:n_markers]
    src.markers = normalize_table("markers", pd.DataFrame(m)) if n_markers else empty_table("markers")
    if n_markers == 0:
        src.activity = empty_table("activity")
        src.samples = empty_table("samples")
    return write_bundle(path, src)


def test_zero_cycles(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = _bundle_with_markers(tmp_path / "zero", 0)
    code, _, err = run_cli(["compare", pair[0], b], capsys)
    _one_line_error(code, err, "no cycles found")
    assert str(b) in err


def test_single_cycle(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = load_bundle(pair[0])
    src.markers = normalize_table("markers", pd.DataFrame(src.markers.iloc[:1]))
    first_end = int(src.markers["end_ns"].iloc[0])
    src.activity = src.activity[src.activity["start_ns"] < first_end].reset_index(drop=True)
    b = write_bundle(tmp_path / "one", src)
    # one marker, and not enough activity for a fallback either
    code, _, err = run_cli(["compare", pair[0], b, "--cycle", "^step$"], capsys)
    _one_line_error(code, err, "only 1 cycle found")


def test_usage_errors(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", pair[0]], capsys)
    _one_line_error(code, err, "the following arguments are required: abnormal")
    code, _, err = run_cli(["compare", *pair, "--alpha", "2"], capsys)
    _one_line_error(code, err, "must be between 0 and 1")
    code, _, err = run_cli(["compare", *pair, "--window", "fast"], capsys)
    _one_line_error(code, err, "bad duration 'fast'")
    code, _, err = run_cli(["compare", *pair, "--cycle", "("], capsys)
    _one_line_error(code, err, "bad --cycle regular expression")
    code, _, err = run_cli(["frobnicate"], capsys)
    _one_line_error(code, err, "invalid choice")


def test_unwritable_output(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", *pair, "-o", tmp_path / "no" / "such" / "r.md"], capsys)
    _one_line_error(code, err, "output folder does not exist")
    # Every output is checked before any is written: the report once stayed behind, exit 2.
    code, _, err = run_cli(["compare", *pair, "-o", tmp_path / "r.md", "--json", tmp_path / "no" / "r.json"], capsys)
    _one_line_error(code, err, "output folder does not exist")
    assert not (tmp_path / "r.md").exists()


def test_outputs_never_replace_an_input(pair: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`-o`, `--json`, the cycles CSV beside the report, and the tree's CSV once replaced an
    input trace with a report (exit 0); a report inside an input folder would be read back as
    part of it.  Each is one line, exit 2, and the inputs keep their bytes."""
    trace = tmp_path / "a.json"
    trace.write_text('{"traceEvents": []}')
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    before = trace.read_bytes()
    cases = [
        (["compare", trace, pair[1], "-o", trace], "refusing to overwrite an input"),
        (["compare", trace, pair[1], "--json", trace], "refusing to overwrite an input"),
        (["compare", *pair, "-o", tmp_path / "a.md", "--json", tmp_path / "x.json"], None),
        (["compare", tmp_path / "a.cycles.csv", pair[1], "-o", tmp_path / "a.md"], "refusing to overwrite an input"),
        (["compare", *pair, "-o", pair[0] / "report.md"], "refusing to write inside the input folder"),
        (["compare", ranks, pair[1], "--json", ranks / "r.json"], "refusing to write inside the input folder"),
        (["tree", trace, pair[1], "--csv", trace], "refusing to overwrite an input"),
        (["tree", tmp_path / "t.csv", pair[1], "-o", tmp_path / "t.md"], "refusing to overwrite an input"),
    ]
    (tmp_path / "a.cycles.csv").write_text("x")
    (tmp_path / "t.csv").write_text("x")
    for argv, needle in cases:
        code, _, err = run_cli(argv, capsys)
        if needle is None:
            assert code == 0, err
        else:
            _one_line_error(code, err, needle)
    assert trace.read_bytes() == before and (tmp_path / "a.cycles.csv").read_text() != "x"
    assert not list(ranks.iterdir()) and not (pair[0] / "report.md").exists()


def test_cycle_and_window_options_at_their_edges(pair: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A pattern with a group printed pandas' warning; a repetition too large and a window
    beyond int64 ended in an internal error (exit 70); a 1 ns window ran out of memory; a
    window longer than the run said "no markers, no activity"."""
    code, _, err = run_cli(["compare", *pair, "--cycle", "(.+)", "-o", tmp_path / "g.md"], capsys)
    assert code == 0 and err == "", err
    for argv, needle in [
        (["--cycle", "a{99999999999}"], "bad --cycle regular expression 'a{99999999999}'"),
        (["--window", "99999999999999999999s"], "at most 30 days"),
        (["--window", "1ns"], "into more than 1,000,000 cycles: choose a window of at least"),
        (["--window", "1000s"], "no cycles found: its activity spans"),
        # the window was used and the pattern dropped without a word
        (["--cycle", "step", "--window", "5ms"], "--cycle and --window both choose the cycles: give one of them"),
    ]:
        code, _, err = run_cli(["compare", *pair, *argv, "-o", tmp_path / "w.md"], capsys)
        _one_line_error(code, err, needle)


def test_json_to_standard_output(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json -` wrote a file named "-"; it is standard output, for one output at most."""
    code, out, err = run_cli(["compare", *pair, "-o", tmp_path / "r.md", "--json", "-"], capsys)
    assert code == 0, err
    assert json.loads(out)["format"] == "perfdiff-comparison" and not Path("-").exists()
    code, _, err = run_cli(["compare", *pair, "--json", "-"], capsys)
    _one_line_error(code, err, "only one output can go to standard output ('-')")


def test_pid_on_inputs_that_hold_one_process(pair: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--pid picks a process of an nsys export; on bundles (or PyTorch-profiler traces) it was
    ignored without a word, and the report was of whatever the inputs held."""
    for cmd in ("compare", "tree"):
        code, _, err = run_cli([cmd, *pair, "--pid", "5", "-o", tmp_path / "p.md"], capsys)
        _one_line_error(code, err, "--pid 5 picks one process of an nsys export; these inputs are not nsys exports")


def test_window_option_and_inputs_untouched(pair: tuple[Path, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: p.stat().st_mtime_ns for p in pair[0].rglob("*")}
    code, _, err = run_cli(["compare", *pair, "--window", "50ms", "--json", tmp_path / "w.json",
                            "-o", tmp_path / "w.md"], capsys)
    assert code == 0, err
    rep = json.loads((tmp_path / "w.json").read_text())
    assert rep["normal"]["cycle_source"] == "window"
    assert "fixed windows of 50 ms" in rep["normal"]["cycle_detail"]
    assert {p: p.stat().st_mtime_ns for p in pair[0].rglob("*")} == before


def test_python_dash_m(pair: tuple[Path, Path], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "perfdiff", "compare", str(pair[0]), str(tmp_path / "x")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no such file or directory" in proc.stderr


def test_the_command_and_python_dash_m_leave_alike() -> None:
    """The installed `perfdiff` and `python -m perfdiff` are one entry, cli.run: main's exit
    code with the outputs flushed, and no teardown of the interpreter after it (freeing a
    comparison's objects one by one; ~0.3 s after a multi-rank one, docs/PERFORMANCE.md)."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="perfdiff")
    assert script.value == "perfdiff.cli:run"
    code = ("import atexit, sys; atexit.register(print, 'torn down'); print('before', end=''); "
            "sys.argv = ['perfdiff', 'compare', 'no-such-run', 'nor-this']; from perfdiff.cli import run; run()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert (proc.returncode, proc.stdout) == (2, "before")
    assert proc.stderr.count("\n") == 1 and "no such file or directory" in proc.stderr


def test_fail_on_gate(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default gate (the mean cycle and the P95) trips on a regression; faster is no
    regression, yet 40 cycles are too few for the P95's interval: cannot judge, exit 4, unless
    the median alone is gated (tests/test_gate.py has the gate's cases)."""
    code, _, err = run_cli(["compare", *pair, "-o", tmp_path / "g.md", "--fail-on", "10"], capsys)
    assert code == 1 and "mean cycle 11.9 ms → 37 ms (+211.5%" in err
    code, _, _ = run_cli(["compare", *pair, "-o", tmp_path / "g.md", "--fail-on", "1000"], capsys)
    assert code == 4  # the mean passes; the P95 cannot be judged on 80 and 40 cycles
    code, _, _ = run_cli(["compare", *pair, "-o", tmp_path / "g.md", "--fail-on", "1000", "--gate-on", "median"],
                         capsys)
    assert code == 0
    code, _, err = run_cli(["compare", pair[1], pair[0], "-o", tmp_path / "g.md", "--fail-on", "10"], capsys)
    assert code == 4 and "too few cycles for the test (40 and 80 cycles; it needs at least 92 a run)" in err
    code, _, _ = run_cli(["compare", pair[1], pair[0], "-o", tmp_path / "g.md", "--fail-on", "10", "--gate-on",
                          "median"], capsys)
    assert code == 0  # faster is not a regression


def test_cycles_csv_ranks_both_runs_slowest_first_and_pads_the_shorter() -> None:
    import numpy as np

    from perfdiff.render import cycles_csv

    text = cycles_csv(np.array([1_500, 250_001, 3], np.int64), np.array([7_000_000, 2_000], np.int64)).decode()
    assert text == "rank,normal_us,abnormal_us\n1,250.001,7000\n2,1.5,2\n3,0.003,\n"


def test_paths_import_only_what_they_use(tmp_path: Path) -> None:
    """A pair compared without pictures imports neither matplotlib nor scipy.stats (nor
    statsmodels), and `perfdiff --help` none of numpy, pandas, SciPy, matplotlib, Jinja2 or
    Arrow: each would add its import time (0.1-0.5 s) to a command that does not use it."""
    ex = EXAMPLES / "cpufreq"
    code = ("import sys, io, contextlib; from perfdiff.cli import main\n"
            f"main(['compare', {str(ex / 'normal')!r}, {str(ex / 'abnormal')!r}, '-o', {str(tmp_path / 'r.md')!r}, "
            "'--no-plots'])\n"
            "print([m for m in ('matplotlib', 'scipy.stats', 'statsmodels') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]"]
    code = ("import sys, io, contextlib; from perfdiff.cli import main\n"
            "try:\n    with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\nexcept SystemExit: pass\n"
            "print([m for m in ('numpy', 'pandas', 'scipy', 'matplotlib', 'jinja2', 'pyarrow') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]"]
