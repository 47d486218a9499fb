"""A comparison saved as JSON renders again as it was (`perfdiff render`), and a JSON whose
records do not match this format version is refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from golden import check_golden

from perfdiff.render.json_report import FORMAT_VERSION, schema

EXAMPLE = ("examples/cpufreq/normal", "examples/cpufreq/abnormal")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped example compared once: report.md, its CSV and pictures, report.json."""
    out = tmp_path_factory.mktemp("compared")
    from perfdiff.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # the report names the runs by the paths given
        assert main(["compare", *EXAMPLE, "-o", str(out / "report.md"), "--json", str(out / "report.json")]) == 0
    return out


def test_a_saved_comparison_renders_the_same_report(saved: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Markdown, cycles CSV, pictures and JSON of `render` are byte for byte those of `compare`."""
    again = tmp_path / "report.md"
    code, _, err = run_cli(["render", saved / "report.json", "-o", again, "--json", tmp_path / "report.json"], capsys)
    assert code == 0, err
    for name in ("report.md", "report.cycles.csv", "report.json", "report.cycles.png", "report.suspects.png"):
        assert (tmp_path / name).read_bytes() == (saved / name).read_bytes(), name


def _planted(saved: Path, tmp_path: Path, change) -> Path:
    data = json.loads((saved / "report.json").read_text())
    change(data)
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(data))
    return path


def _rename(d: dict, old: str, new: str) -> None:
    d[new] = d.pop(old)


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d.update(colour="red"), "unknown field 'colour'"),
    (lambda d: d["functions"][0].update(t_n_ms=1.0), "Analysis.functions[0]: unknown field 't_n_ms'"),
    (lambda d: _rename(d["normal"], "median_us", "median_ms"), "Analysis.normal: unknown field 'median_ms'"),
    (lambda d: _rename(d, "verdict", "verdicts"), "unknown field 'verdicts'"),
    (lambda d: d["findings"][0].update(extra=None), "findings[0]: unknown field 'extra'"),
    (lambda d: d["findings"][0].update(code="no-such-code"), "is no FindingCode"),
    (lambda d: d.pop("cycle_times"), "field 'cycle_times' missing"),
    (lambda d: d.update(format_version=1), "comparison format version 1 is not supported by this perfdiff "
                                           f"(it reads version {FORMAT_VERSION})"),
    (lambda d: d.update(format="perfdiff-rank-comparison"), "not a perfdiff comparison"),
])
def test_a_record_that_does_not_match_is_refused_in_one_line(saved: Path, tmp_path: Path, change, said: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _planted(saved, tmp_path, change)
    code, out, err = run_cli(["render", path, "-o", tmp_path / "r.md"], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert said in err and not (tmp_path / "r.md").exists()


def test_the_format_versions_shape_is_pinned() -> None:
    """The records of the comparison JSON and their fields: a change here changes what readers
    of this format version get, so it raises FORMAT_VERSION (and docs/FORMAT.md says what
    changed) before the golden is accepted (UPDATE_GOLDEN=1)."""
    path = ROOT / "tests" / "golden" / "comparison-schema.txt"
    pinned = path.read_text(encoding="utf-8").splitlines()[0] if path.exists() else ""
    now = [f"format_version {FORMAT_VERSION}", *schema()]
    if pinned == now[0] and path.read_text(encoding="utf-8").splitlines() != now:
        pytest.fail("the comparison JSON's records changed: raise FORMAT_VERSION in perfdiff/render/json_report.py, "
                    "say what changed in docs/FORMAT.md, then accept the golden (UPDATE_GOLDEN=1)")
    check_golden(path, "\n".join(now) + "\n")
