"""`perfdiff collect` end to end on live processes: children, markers, signals, kill -9, errors."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from perfdiff.bundle import load_bundle
from perfdiff.collectors import targets as T
from perfdiff.collectors.host import HOST_FUNCTIONS
from perfdiff.errors import CollectionError

from test_collect_faults import live_host_lock  # noqa: E402

pytestmark = pytest.mark.live  # timing-sensitive: run apart from the parallel tests (Makefile)

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workload.py"
PY = sys.executable
MS = 1_000_000


@pytest.fixture(autouse=True)
def _beside_no_injected_faults():
    """Live collections here must not run while test_collect_faults injects its faults."""
    with live_host_lock(exclusive=False):
        yield


def assert_samplers_healthy(manifest: dict) -> None:
    """No sampler failed or was switched off: a collection that quietly lost a sampler passes
    every other check here."""
    trouble = [e for e in manifest["events"] if e["event"] in ("sampler-error", "sampler-disabled")]
    assert not trouble, trouble


def collect_argv(*args: object) -> list[str]:
    return [PY, "-m", "perfdiff", "collect", *map(str, args)]


def start_workload(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PY, str(WORKLOAD), *map(str, args)], stderr=subprocess.DEVNULL)


def wait_until(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def sample_flushes(out: Path) -> int:
    """How many times the collector has flushed samples so far: the records in the samples
    journals (an Arrow batch per flush) plus the sealed parts after the first."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    n = max(0, len(list((out / "samples").glob("part-*.parquet"))) - 1)
    for journal in (out / "samples").glob(".part-*.arrows"):
        try:
            reader = ipc.open_stream(pa.memory_map(str(journal)))
            while True:
                reader.read_next_batch()
                n += 1
        except (StopIteration, pa.ArrowException, OSError):
            pass
    return n


def cycles_reported(stderr: str) -> dict[int, int]:
    return {int(p): int(n) for p, n in re.findall(r"workload (\d+): (\d+) cycles", stderr)}


@pytest.mark.slow
def test_command_mode_children_markers_and_host_functions(tmp_path: Path) -> None:
    """-- CMD: the command, a child started later and its child; every mark of all three arrives."""
    out = tmp_path / "run"
    r = subprocess.run(collect_argv("--interval", "20ms", "-o", out, "--", PY, WORKLOAD, "--seconds", "2",
                                    "--children", "1", "--depth", "2", "--child-delay", "0.3"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    b = load_bundle(out)
    m = b.manifest
    assert m["status"] == "complete" and m["collection"]["end_reason"] == "command-exited"
    assert m["target"]["exit_code"] == 0 and m["target"]["mode"] == "command"
    cycles = cycles_reported(r.stderr)
    assert len(cycles) == 3, r.stderr
    root = m["target"]["pid"]
    assert set(m["target"]["children"]) == set(cycles) - {root}
    # Every cycle each process ran is one mark, on its own main thread (tid = pid).
    counts = b.markers.groupby("tid").size().to_dict()
    assert counts == cycles
    assert set(b.markers["name"].astype(str)) == {"step"} and set(b.markers["source"].astype(str)) == {"perfdiff"}
    assert (b.markers["end_ns"] > b.markers["start_ns"]).all()
    # One row per interval per host function, covering the collection.
    per_fn = b.activity.groupby("function", observed=True)
    assert set(per_fn.groups) == set(HOST_FUNCTIONS)
    ticks = m["collection"]["ticks"]
    assert (per_fn.size() >= ticks - 3).all()
    busy = per_fn["busy_ns"].sum()
    wall = (m["collection"]["stop_ns"] - m["collection"]["start_ns"])
    assert 0.2 * wall < busy["oncpu"] < 3 * wall  # three processes, about half their time on CPU
    assert busy["blocked"] > 0.1 * wall  # the sleeps standing in for GPU waits
    metrics = set(b.samples["metric"].astype(str))
    assert {"host_cpu_usage", "process_cpu_usage", "process_rss", "context_switches", "host_mem_used",
            "disk_usage", "disk_read", "disk_write"} <= metrics
    assert "cpu_frequency_mhz" in metrics or any(u["metric"] == "cpu_frequency_mhz" for u in m["unsupported"])
    assert all(u["reason"] for u in m["unsupported"])
    pcpu = b.samples[b.samples["metric"] == "process_cpu_usage"]["value"]
    assert 10 < pcpu.mean() < 300  # % of one core, three half-busy processes
    assert [c["name"] for c in m["collectors"]][:2] == ["collect", "host"]
    assert_samplers_healthy(m)


@pytest.mark.slow
def test_pid_mode_until_the_target_exits(tmp_path: Path) -> None:
    w = start_workload("--seconds", "4", "--wait-ms", "5")
    try:
        out = tmp_path / "run"
        r = subprocess.run(collect_argv("--pid", w.pid, "--interval", "50ms", "-o", out),
                           capture_output=True, text=True, timeout=60)
    finally:
        w.wait(10)
    assert r.returncode == 0, r.stderr
    b = load_bundle(out)
    assert b.manifest["status"] == "target-exited"
    assert b.manifest["collection"]["end_reason"] == "target-exited"
    # Attached mode: the target found the file the collector made for it and marked into it.
    assert len(b.markers) > 20 and set(b.markers["tid"]) == {w.pid}
    assert b.manifest["collectors"][-1]["mode"] == "attached"
    assert not list(Path(b.manifest["collectors"][-1]["directory"]).glob(f"{w.pid}.marks"))
    assert_samplers_healthy(b.manifest)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_ends_cleanly_with_status_complete(tmp_path: Path, sig: signal.Signals) -> None:
    w = start_workload("--seconds", "30")
    out = tmp_path / "run"
    c = subprocess.Popen(collect_argv("--pid", w.pid, "--interval", "50ms", "-o", out),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: sample_flushes(out) >= 2, 30, "the first flushes")
        c.send_signal(sig)
        _, err = c.communicate(timeout=20)
    finally:
        w.kill()
        w.wait()
    assert c.returncode == 0, err
    m = load_bundle(out).manifest
    assert m["status"] == "complete"
    assert m["collection"]["end_reason"] == "signal" and m["collection"]["signal"] == sig.name
    assert_samplers_healthy(m)
    assert w.returncode == -signal.SIGKILL  # --pid never touches the target


@pytest.mark.slow
def test_kill_9_loses_at_most_the_last_second(tmp_path: Path) -> None:
    interval = 20 * MS
    w = start_workload("--seconds", "30")
    out = tmp_path / "run"
    c = subprocess.Popen(collect_argv("--pid", w.pid, "--interval", "20ms", "-o", out),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sample_flushes(out) >= 3, 30, "three flushes")
        time.sleep(0.4)  # somewhere between two flushes
        killed_ns = time.time_ns()
        c.kill()
        c.wait()
    finally:
        w.kill()
        w.wait()
    b = load_bundle(out)  # loads, whatever moment the kill came
    assert b.manifest["status"] == "interrupted" and b.notes
    start = int(b.manifest["collection"]["start_ns"])
    # One oncpu row per tick: count them against the ticks that fit before the last one kept.
    ends = np.sort(b.activity.loc[b.activity["function"] == "oncpu", "end_ns"].to_numpy())
    lost_ns = killed_ns - ends[-1]
    assert lost_ns <= 1_000_000_000, f"the last {lost_ns / 1e9:.2f} s were lost"
    expected = (ends[-1] - start) / interval
    assert len(ends) >= 0.9 * expected - 2, (len(ends), expected)  # nothing lost in the middle
    assert np.diff(ends).max() < 20 * interval
    samples_end = b.samples["t_end_ns"].max()
    assert killed_ns - samples_end <= 1_000_000_000
    assert (b.activity.groupby("function", observed=True).size() >= len(ends) - 2).all()


def test_no_such_pid_is_one_line_exit_3(tmp_path: Path) -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    r = subprocess.run(collect_argv("--pid", pid_max + 1, "-o", tmp_path / "run"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [f"perfdiff: no such process: pid {pid_max + 1}"
                                            " (or hidden from this user by a hidepid /proc mount)"]
    assert not (tmp_path / "run").exists()


def test_no_permission_is_one_line_exit_3() -> None:
    """Another user's process: the kernel says EPERM, perfdiff says so in one line."""
    if os.geteuid() != 0:
        with pytest.raises(CollectionError, match="no permission to collect from pid 1"):
            T.check_target(1)
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, then try to collect from the (root-owned) parent
        code = 0
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            T.check_target(os.getppid())
            os.write(w, b"no error")
        except CollectionError as exc:
            os.write(w, f"{exc.code}|{exc}".encode())
        except BaseException as exc:  # noqa: BLE001
            os.write(w, repr(exc).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r) as fh:
        msg = fh.read()
    code, _, text = msg.partition("|")
    assert code == "3", msg
    assert text.startswith(f"no permission to collect from pid {os.getpid()} (owned by uid 0") and "\n" not in text


def test_usage_errors_exit_2_and_bad_command_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfdiff.cli import main

    assert main(["collect", "-o", str(tmp_path / "a")]) == 2
    assert "give either --pid PID or -- CMD" in capsys.readouterr().err
    assert main(["collect", "--pid", "1", "--interval", "10us", "-o", str(tmp_path / "a")]) == 2
    assert "1ms minimum" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    assert main(["collect", "--pid", str(os.getpid()), "-o", str(busy)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert main(["collect", "-o", str(tmp_path / "b"), "--", str(tmp_path / "no-such-program")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot start" in err[0] and "No such file" in err[0]


@pytest.mark.slow
def test_duration_stops_a_started_command(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = subprocess.run(collect_argv("--duration", "1s", "--interval", "50ms", "-o", out, "--",
                                    PY, WORKLOAD, "--seconds", "60"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["collection"]["end_reason"] == "duration"
    assert_samplers_healthy(m)
    assert m["target"]["stopped_by_collector"] and m["target"]["exit_code"] == -signal.SIGTERM
    assert 0.9e9 < m["collection"]["stop_ns"] - m["collection"]["start_ns"] < 3e9
