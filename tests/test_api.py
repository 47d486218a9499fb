"""The Python API: perfdiff.compare / load, the Comparison's tables and records, the CLI on
top of it, and the versioned JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import EXAMPLES, run_cli

import perfdiff
from perfdiff.analyze import FindingCode, Notice, NoticeCode
from perfdiff.errors import InputError
from perfdiff.render import FORMAT, FORMAT_VERSION, read_comparison_json

PAIR = (EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")


@pytest.fixture(scope="module")
def comparison() -> perfdiff.Comparison:
    return perfdiff.compare(*PAIR)


def test_compare_from_python_gives_tables_and_typed_records(comparison: perfdiff.Comparison) -> None:
    c = comparison
    f = c.functions
    assert isinstance(f, pd.DataFrame) and {"name", "device", "kind", "tau_pp", "q_t", "t_z"} <= set(f.columns)
    assert "Scheduler.get_next_batch_to_run" in set(f["name"])
    assert set(c.metrics["scope"]) <= {"func", "ctx"} and "cpu_frequency" in set(c.metrics["metric"])
    cyc = c.cycles
    assert list(cyc["run"].unique()) == ["normal", "abnormal"]
    assert (cyc["dur_us"] > 0).all() and (cyc["end_ns"] > cyc["start_ns"]).all()
    assert c.findings[0].code == FindingCode.CYCLE_TIME
    causes = [x for x in c.findings if x.code == FindingCode.CAUSE]
    assert causes and all(x.function and x.func is not None for x in causes)
    assert all(isinstance(w, Notice) for w in c.warnings)
    assert [w.code for w in c.warnings] == [NoticeCode.CYCLE_RATIO]
    assert c.cycle_time_change_pct > 100
    with pytest.raises(AttributeError):  # the records are frozen
        c.findings[0].q = 0.0  # type: ignore[misc]


def test_cli_writes_what_the_api_renders(comparison: perfdiff.Comparison, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    code, _, err = run_cli(["compare", *PAIR, "-o", out, "--json", js], capsys)
    assert code == 0, err
    assert out.read_text() == comparison.to_markdown(cycles_csv="r.cycles.csv",
                                                     plots=["r.cycles.png", "r.timeline.png",
                                                            "r.suspects.png", "r.context.png"])
    assert json.loads(js.read_text()) == json.loads(json.dumps(comparison.to_json()))
    assert (tmp_path / "r.cycles.csv").read_bytes() == comparison.cycles_csv()


def test_json_is_versioned_and_carries_records(comparison: perfdiff.Comparison, tmp_path: Path) -> None:
    data = comparison.to_json()
    assert data["format"] == FORMAT == "perfdiff-comparison" and data["format_version"] == FORMAT_VERSION
    assert [f["code"] for f in data["findings"]][0] == "cycle-time"
    assert all("text" not in f for f in data["findings"])  # wording is the renderer's
    assert data["warnings"][0]["code"] == "cycle-ratio" and data["warnings"][0]["detail"]["ratio"] > 2
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    assert read_comparison_json(path)["normal"]["n_cycles"] == comparison.analysis.normal.n_cycles
    for bad, why in (({**data, "format_version": FORMAT_VERSION + 1}, "version"), ({**data, "format": "x"}, "format"),
                     ([1, 2], "format")):
        path.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=why):
            read_comparison_json(path)


def test_load_and_bad_input_from_python(tmp_path: Path) -> None:
    run = perfdiff.load(PAIR[0])
    assert isinstance(run, perfdiff.Run) and len(run.activity) > 0
    with pytest.raises(InputError, match="no such file"):
        perfdiff.load(tmp_path / "missing")
    with pytest.raises(InputError, match="alpha"):
        perfdiff.compare(*PAIR, alpha=1.5)


def test_import_perfdiff_stays_light() -> None:
    """A target imports perfdiff for its markers: that must not pull in the analysis."""
    import subprocess
    import sys

    code = ("import sys, perfdiff; perfdiff.cycle; "
            "print(sorted(m for m in ('numpy', 'pandas', 'scipy', 'perfdiff.api') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """README's "From Python" block, on the shipped example pair."""
    import re

    from conftest import ROOT

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## From Python\n\n```python\n(.*?)```", text, re.S).group(1)
    code = code.replace('"normal/"', repr(str(PAIR[0]))).replace('"abnormal/"', repr(str(PAIR[1])))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "report.md").read_text().startswith("# Cross Performance Comparison")
    assert "Scheduler.get_next_batch_to_run" in capsys.readouterr().out


def test_identical_inputs_say_so_and_name_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(PAIR[0], copy)
    for other in (PAIR[0], copy):  # the same path, and a copy of the same bytes
        c = perfdiff.compare(PAIR[0], other)
        assert [f.code for f in c.findings] == [FindingCode.IDENTICAL]
        assert "Identical inputs" in c.to_markdown()
    code, _, err = run_cli(["compare", PAIR[0], copy, "-o", tmp_path / "r.md"], capsys)
    assert code == 0 and err.strip().startswith("perfdiff: identical inputs:") and err.count("\n") == 1
    (copy / "manifest.json").write_text((copy / "manifest.json").read_text().replace('"', '"', 1) + " ")
    assert [f.code for f in perfdiff.compare(PAIR[0], copy).findings] != [FindingCode.IDENTICAL]


def test_runs_with_nothing_in_common_are_refused_unless_forced(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from test_segment_attribute import k, run_of

    from perfdiff.bundle import write_bundle

    for name, kernel in (("a", "gemm"), ("b", "conv")):
        write_bundle(tmp_path / name, run_of([k(kernel, i * 10_000_000, i * 10_000_000 + 5_000_000) for i in range(50)]))
    code, _, err = run_cli(["compare", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "r.md"], capsys)
    assert code == 2 and "have nothing in common (no function runs in both)" in err and err.count("\n") == 1
    assert "--force" in err and not (tmp_path / "r.md").exists()
    code, _, err = run_cli(["compare", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "r.md", "--force"], capsys)
    assert code == 0, err
