"""`collect --nsys`: the nsys session flow (collectors/nsys_session.py) against a fake `nsys`
executable on PATH (tests/fakes/nsys) that hands back a real export from ../shared/data/real."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from perfdiff.bundle import MISSING, RunData, base_manifest, empty_table, load_bundle, normalize_table, write_bundle
from perfdiff.collectors import nsys_session as ns
from perfdiff.collectors.host import HostSampler
from perfdiff.errors import CollectionError, InputError

FAKES = Path(__file__).resolve().parent / "fakes"
REPORT3 = "kmcho2019/Rodinia_3.1_Gaussian/report3.sqlite"  # nsys 2022.4.2, schema 3.0.0, 8190 kernels


@pytest.fixture
def fake_nsys(tmp_path: Path, real: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `nsys` on PATH (the fake, run by this Python) serving the Rodinia report3 export."""
    bin_dir, state = tmp_path / "bin", tmp_path / "nsys-state"
    bin_dir.mkdir()
    state.mkdir()
    script = (FAKES / "nsys").read_text().split("\n", 1)[1]
    exe = bin_dir / "nsys"
    exe.write_text(f"#!{sys.executable}\n{script}")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NSYS_STATE", str(state))
    monkeypatch.setenv("FAKE_NSYS_EXPORT", str(real / REPORT3))
    for var in ("FAKE_NSYS_START_FAILURES", "FAKE_NSYS_NO_REPORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ns, "ARM_SETTLE_S", 0.05)
    return state


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in (state / "calls.jsonl").read_text().splitlines()]


def session(tmp_path: Path, warnings: list[str]) -> ns.NsysSession:
    return ns.NsysSession(tmp_path / "bundle" / "nsys", warn=warnings.append, session="S1")


def test_nsys_missing_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CollectionError) as exc:
        ns.NsysSession(tmp_path / "out", warn=print)
    assert str(exc.value).startswith("nsys (NVIDIA Nsight Systems) is not on PATH: install Nsight Systems")
    assert "\n" not in str(exc.value)


def test_collect_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    p = argparse.ArgumentParser()
    ns.add_collect_options(p)
    args = p.parse_args(["--nsys"])
    assert (args.nsys, args.nsys_trace, args.no_kernel_trace) == (True, "cuda,nvtx,osrt", False)
    with pytest.raises(InputError, match="--nsys needs a command to start"):
        ns.check_collect_options(args, [])
    with pytest.raises(InputError, match="bad --nsys-trace"):
        ns.check_collect_options(p.parse_args(["--nsys", "--nsys-trace", "cuda,,nvtx"]), ["x"])
    with pytest.raises(InputError, match="contradict"):
        ns.check_collect_options(p.parse_args(["--nsys", "--no-kernel-trace"]), ["x"])
    monkeypatch.setenv("PATH", str(tmp_path))  # --nsys without nsys: refused before anything starts
    with pytest.raises(CollectionError, match="is not on PATH"):
        ns.check_collect_options(args, ["python", "serve.py"])
    ns.check_collect_options(p.parse_args([]), [])  # no --nsys: nothing to check


@pytest.mark.real
def test_session_flow_merges_the_export_with_samples_taken_alongside(fake_nsys: Path, tmp_path: Path) -> None:
    warnings: list[str] = []
    s = session(tmp_path, warnings)
    cmd = s.wrap([sys.executable, "-c", "import time; time.sleep(3)"])
    assert cmd[1:5] == ["launch", "--session-new=S1", "--trace=cuda,nvtx,osrt", sys.executable]
    child = subprocess.Popen(cmd)
    try:
        host = HostSampler(lambda: {child.pid}, interval_ns=100_000_000)
        t0 = time.time_ns()
        host.start(t0)
        s.start(t0)
        samples = []
        for _ in range(30):  # a few host ticks while the command runs
            time.sleep(0.1)
            rows = host.sample(time.time_ns())
            if "samples" in rows:
                samples.append(pd.DataFrame(rows["samples"]))
            if len(samples) >= 3:
                break
        assert s.sample(time.time_ns()) == {}
        rows = s.stop()  # while the command still runs
    finally:
        child.terminate()
        child.wait(30)
        s.close()
        host.close()
    verbs = [c[0] for c in calls(fake_nsys)]
    # `start` may run before `launch` has registered the session: then it is retried, and the
    # one that succeeds comes after the registration (in the order the changes took effect:
    # the processes' own call log can show a `start` first that only checked afterwards).
    assert verbs[0] == "--version" and verbs[-3:] == ["stop", "export", "shutdown"], verbs
    assert "launch" in verbs and "start" in verbs, verbs
    events = [json.loads(line)["event"] for line in (fake_nsys / "events.jsonl").read_text().splitlines()]
    assert events.index("registered") < events.index("started"), events
    start = next(c for c in calls(fake_nsys) if c[0] == "start")
    assert start == ["start", "--session=S1", f"--output={tmp_path / 'bundle' / 'nsys' / 'report'}",
                     "--force-overwrite=true"]
    act = rows["activity"]
    counts = act.groupby("kind", observed=True).size().to_dict()
    assert counts["kernel"] == 8190 and counts["memcpy"] == 6 and counts["api"] == 16393
    host_fn = act.loc[act["kind"] == "host", "function"].astype(str)
    assert len(host_fn) and host_fn.str.startswith("osrt:").all()  # OS runtime calls, renamed
    man = s.manifest()
    assert man["collector"]["imported"]["oncpu_rows_left_out"] > 0  # the host sampler measures on-CPU time
    assert man["collector"]["version"].startswith("NVIDIA Nsight Systems version 2022.4.2.1")
    k = act[act["kind"] == "kernel"]
    assert {f.split("(")[0] for f in k["function"].astype(str)} == {"Fan1", "Fan2"}
    assert (k["launch_ns"] != MISSING).all()
    # the export is from 2022: its clock is not this collection's, and that is said once
    assert len(warnings) == 1 and "lies outside this collection" in warnings[0], warnings
    assert (tmp_path / "bundle" / "nsys" / "report.nsys-rep").is_file()
    assert (tmp_path / "bundle" / "nsys" / "report.sqlite").is_file()
    # one bundle: the nsys rows beside the host samples taken while the command ran
    bundle = tmp_path / "run"
    run = RunData(manifest=base_manifest(run_name="nsys", collectors=[man["collector"]], unsupported=man["unsupported"]),
                  activity=act, samples=pd.concat([normalize_table("samples", x) for x in samples], ignore_index=True),
                  markers=rows.get("markers", empty_table("markers")))
    loaded = load_bundle(write_bundle(bundle, run))
    assert (loaded.activity["kind"] == "kernel").sum() == 8190 and len(loaded.samples) > 0


@pytest.mark.real
def test_start_is_retried_while_launch_registers_the_session(fake_nsys: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_START_FAILURES", "2")
    s = session(tmp_path, [])
    child = subprocess.Popen(s.wrap([sys.executable, "-c", "import time; time.sleep(2)"]))
    try:
        s.start(time.time_ns())
        assert s.started and [c[0] for c in calls(fake_nsys)].count("start") >= 3
        assert "kernel" in set(s.stop()["activity"]["kind"].astype(str))
    finally:
        child.terminate()
        child.wait(30)
        s.close()


@pytest.mark.real
def test_command_that_ends_first_still_gives_its_report(fake_nsys: Path, tmp_path: Path) -> None:
    warnings: list[str] = []
    s = session(tmp_path, warnings)
    child = subprocess.Popen(s.wrap([sys.executable, "-c", "import time; time.sleep(1)"]))
    s.start(time.time_ns())
    assert s.started and child.wait(30) == 0  # nsys ended the collection itself and wrote the report
    rows = s.stop()
    s.close()
    assert (rows["activity"]["kind"] == "kernel").sum() == 8190
    assert [e["event"] for e in s.manifest()["events"]][0] == "nsys-stop-failed"


@pytest.mark.real
def test_no_report_or_no_session_is_a_warning_not_a_crash(fake_nsys: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ns, "REPORT_WAIT_S", 0.5)
    # START_RETRY_S stays as shipped here: start succeeds as soon as `launch` has registered
    # the session, which on a loaded machine took longer than a shortened retry allowed; the
    # fake registers it late (three refused starts, 0.7 s of retries) to say so.
    monkeypatch.setenv("FAKE_NSYS_START_FAILURES", "3")
    monkeypatch.setenv("FAKE_NSYS_NO_REPORT", "1")
    warnings: list[str] = []
    s = session(tmp_path, warnings)
    child = subprocess.Popen(s.wrap([sys.executable, "-c", "import time; time.sleep(2)"]))
    try:
        s.start(time.time_ns())
        assert s.stop() == {}
    finally:
        child.terminate()
        child.wait(30)
        s.close()
    assert len(warnings) == 1 and warnings[0].startswith("nsys wrote no report: no report.nsys-rep in")
    assert s.manifest()["unsupported"][0]["metric"] == "kernel_trace"
    # a session that was never launched: start fails after its retries, and says why
    monkeypatch.setattr(ns, "START_RETRY_S", 0.5)
    warnings.clear()
    lone = ns.NsysSession(tmp_path / "other", warn=warnings.append, session="never-launched")
    lone.start(time.time_ns())
    assert not lone.started and lone.stop() == {}
    assert len(warnings) == 1 and "nsys start failed (Error: session never-launched does not exist)" in warnings[0]
