"""Golden report of the shipped example pair (UPDATE_GOLDEN=1 rewrites; a mismatch writes *.new)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT

from perfdiff.cli import main

GOLDEN = ROOT / "tests" / "golden"


def _check(name: str, text: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1" or not golden.exists():
        golden.write_text(text, encoding="utf-8")
        if os.environ.get("UPDATE_GOLDEN") != "1":
            pytest.fail(f"golden {golden} was missing and has been written: review and commit it")
        return
    expected = golden.read_text(encoding="utf-8")
    if text != expected:
        new = golden.with_name(golden.name + ".new")
        new.write_text(text, encoding="utf-8")
        pytest.fail(f"report differs from {golden}; new output in {new} (diff them; UPDATE_GOLDEN=1 accepts)")


def test_example_report_is_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the report names the runs by the paths given
    out, js = tmp_path / "report.md", tmp_path / "report.json"
    code = main(["compare", "examples/cpufreq/normal", "examples/cpufreq/abnormal", "-o", str(out),
                 "--json", str(js)])
    assert code == 0
    _check("cpufreq-report.md", out.read_text(encoding="utf-8"))
    data = _round(json.loads(js.read_text()))
    _check("cpufreq-report.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def _round(x: object) -> object:
    """Floats to 9 significant digits: the golden pins the numbers, not the summation order."""
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


@pytest.mark.parametrize("example", ["cpufreq", "contention"])
def test_shipped_example_report_is_current(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/*/report.md is what `perfdiff compare` writes for the shipped pair today."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "report.md"
    assert main(["compare", f"examples/{example}/normal", f"examples/{example}/abnormal", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (ROOT / "examples" / example / "report.md").read_text(encoding="utf-8")
