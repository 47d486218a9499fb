"""`perfdiff compare` on bundles with GPU samples from the fake-NVML scenarios (issue 5, item 5)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from fakes import make_scenario_bundle


def _compare(tmp_path: Path, scenario: str, capsys: pytest.CaptureFixture[str]) -> dict:
    n, a = make_scenario_bundle(scenario, tmp_path / scenario, seed=3)
    code, _, err = run_cli(["compare", n, a, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    return json.loads((tmp_path / "r.json").read_text())


def test_power_cap_names_throttle_reason_and_clock_drop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _compare(tmp_path, "power_cap", capsys)
    res = [f for f in rep["findings"] if f["kind"] == "resource"]
    throttle = [f for f in res if "gpu\\_throttle\\_power" in f["text"]]
    assert throttle and "rose" in throttle[0]["text"] and throttle[0]["q"] <= 0.05
    clock = [f for f in res if "gpu\\_frequency" in f["text"] or "gpu\\_sm\\_frequency" in f["text"]]
    assert clock and "fell" in clock[0]["text"] and "MHz" in clock[0]["text"]
    units = {c["metric"]: c["unit"] for c in rep["context"]}
    assert units["gpu_throttle_power"] == "% of window" and units["gpu_power"] == "W"
    assert all(rep["scope"][k] in ("func", "ctx") for k in rep["scope"])
    md = (tmp_path / "r.md").read_text()
    assert "% of window" in md


def test_competing_process_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _compare(tmp_path, "competing_process", capsys)
    texts = [f["text"] for f in rep["findings"]]
    assert any("other\\_process\\_gpu\\_usage" in t and "rose" in t for t in texts)
    ev = [f for f in rep["findings"] if f["kind"] == "event"]
    assert ev and "pid 5555" in ev[0]["text"] and "gpu\\_burn" in ev[0]["text"]
