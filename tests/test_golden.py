"""Golden report of the shipped example pair (UPDATE_GOLDEN=1 rewrites; a mismatch writes *.new)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT
from golden import check_golden, first_difference

from perfdiff.cli import main

GOLDEN = ROOT / "tests" / "golden"


def _check(name: str, text: str) -> None:
    check_golden(GOLDEN / name, text)


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
    assert first_difference((ROOT / "examples" / example / "report.md").read_text(encoding="utf-8"),
                            out.read_text(encoding="utf-8")) is None


def _perturbed(text: str, key: str, by: float) -> str:
    """The golden JSON text with one number `key` scaled by (1 + by)."""
    data = json.loads(text)

    def walk(x: object) -> bool:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == key and isinstance(v, float) and v != 0:
                    x[k] = v * (1 + by)
                    return True
                if walk(v):
                    return True
        if isinstance(x, list):
            return any(walk(v) for v in x)
        return False

    assert walk(data), key
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def test_golden_numbers_compare_at_the_stated_precision() -> None:
    """A last-bit difference (1e-15 relative, or 2.2e-16 against 0) passes; 1e-3 fails."""
    golden = (GOLDEN / "cpufreq-report.json").read_text(encoding="utf-8")
    assert first_difference(golden, _perturbed(golden, "median_us", 1e-15)) is None
    assert first_difference(golden, _perturbed(golden, "median_us", 1e-3)) is not None
    assert first_difference('{"x": 0.0}', '{"x": 2.22044605e-16}') is None
    assert first_difference('{"x": 0.0}', '{"x": 0.001}') is not None
    assert first_difference("a 1,234.5 µs", "a 1,234.5 ms") is not None  # text still exact
    assert first_difference("a 1,234.5 µs", "a 1,235.5 µs") is not None


def test_the_readmes_first_screen_is_the_shipped_reports() -> None:
    """README shows the first screen of examples/cpufreq/report.md: it must stay that report's."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"The first screen of the shipped example.*?```text\n(.*?)\n```", readme, re.S).group(1)
    report = (ROOT / "examples" / "cpufreq" / "report.md").read_text(encoding="utf-8")
    assert report.startswith(shown + "\n")
