"""`perfdiff compare` on bundles with GPU samples from the fake-NVML scenarios."""
from __future__ import annotations

import re

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
    res = [f for f in rep["findings"] if f["code"] == "resource"]
    throttle = [f for f in res if f["evidence"]["metric"] == "gpu_throttle_power"]
    assert throttle and throttle[0]["evidence"]["mean_a"] > throttle[0]["evidence"]["mean_n"] and throttle[0]["q"] <= 0.05
    clock = [f for f in res if f["evidence"]["metric"] in ("gpu_frequency", "gpu_sm_frequency")]
    assert clock and clock[0]["evidence"]["mean_a"] < clock[0]["evidence"]["mean_n"]
    md = (tmp_path / "r.md").read_text()
    assert re.search(r"Resource: \*\*gpu\\_throttle\\_power\*\*.* rose from", md)
    assert re.search(r"Resource: \*\*gpu\\_(sm\\_)?frequency\*\*.* fell from [0-9.,]+ MHz", md)
    units = {c["metric"]: c["unit"] for c in rep["context"]}
    assert units["gpu_throttle_power"] == "% of window" and units["gpu_power"] == "W"
    assert all(rep["scope"][k] in ("func", "ctx") for k in rep["scope"])
    assert "% of window" in md


def test_competing_process_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _compare(tmp_path, "competing_process", capsys)
    assert any(f["code"] == "resource" and f["evidence"]["metric"] == "other_process_gpu_usage"
               and f["evidence"]["mean_a"] > f["evidence"]["mean_n"] for f in rep["findings"])
    ev = [f for f in rep["findings"] if f["code"] == "event"]
    assert ev and ev[0]["evidence"]["pid"] == 5555 and "gpu_burn" in ev[0]["evidence"]["name"]
    md = (tmp_path / "r.md").read_text()
    assert "Resource: **other\\_process\\_gpu\\_usage**" in md
    assert re.search(r"another process on the GPU on GPU \d: pid 5555 \(gpu\\_burn", md)
