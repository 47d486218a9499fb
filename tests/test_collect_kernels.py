"""`perfdiff collect` with kernel traces, end to end: the agent in `-- CMD` and an nsys session.

The fake cupti package and the fake `nsys` executable stand in for the GPU tools.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from fakes import fake_cupti
from test_cupti_agent import TARGET

from perfdiff.bundle import MISSING, RunData, load_bundle

pytestmark = pytest.mark.live


def _collect(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfdiff", "collect", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _collect_target(tmp_path: Path, scenario: str, steps: int) -> RunData:
    """`perfdiff collect -- python target.py steps N` with the fake cupti of `scenario` importable."""
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    pkg = fake_cupti.write_package(tmp_path / "pkg", scenario)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")])),
           "TARGET_INFO": str(tmp_path / "info.json")}
    proc = _collect(["--interval", "50ms", "--duration", "20s", "-o", str(tmp_path / "run"), "--",
                     sys.executable, str(script), "steps", str(steps)], env)
    assert proc.returncode == 0, proc.stderr
    return load_bundle(tmp_path / "run")


def test_agent_kernels_land_in_the_bundle(tmp_path: Path) -> None:
    run = _collect_target(tmp_path, "kernels_and_markers", 8)
    k = run.activity[run.activity["kind"] == "kernel"]
    assert len(k) >= 16  # 8 steps × 2 kernels
    assert (k["launch_ns"] != MISSING).all() and (k["launch_ns"] <= k["start_ns"]).all()
    assert set(k["function"].astype(str)) >= {"gemm_bf16_128x128", "rms_norm"}
    assert len(run.markers) >= 8 and (run.markers["source"].astype(str) == "nvtx").any()
    # the kernels sit inside the collection window, on the samples' clock
    s = run.samples
    assert len(s) and k["start_ns"].min() >= s["t_start_ns"].min() - 2_000_000_000
    assert k["end_ns"].max() <= s["t_end_ns"].max() + 2_000_000_000
    assert np.all(k["end_ns"].to_numpy() >= k["start_ns"].to_numpy())


def test_second_subscriber_goes_on_without_traces(tmp_path: Path) -> None:
    run = _collect_target(tmp_path, "second_subscriber", 3)
    assert (run.activity["kind"] == "kernel").sum() == 0
    assert len(run.samples) > 0  # the rest was collected
    reasons = " ".join(str(u.get("reason")) for u in run.manifest["unsupported"])
    assert "MULTIPLE_SUBSCRIBERS" in reasons or "subscriber" in reasons


def test_nsys_session_merges_the_export(tmp_path: Path, real: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fakes' / 'nsys'} \"$@\"\n")
    nsys.chmod(0o755)
    (tmp_path / "nsys-state").mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FAKE_NSYS_STATE": str(tmp_path / "nsys-state"),
           "FAKE_NSYS_EXPORT": str(real / "kmcho2019/Rodinia_3.1_Gaussian/report3.sqlite")}
    proc = _collect(["--nsys", "--interval", "50ms", "--duration", "20s", "-o", str(tmp_path / "run"), "--",
                     sys.executable, "-c", "import time; time.sleep(1.5)"], env)
    assert proc.returncode == 0, proc.stderr
    run = load_bundle(tmp_path / "run")
    assert (run.activity["kind"] == "kernel").sum() == 8190
    assert len(run.samples) > 0
