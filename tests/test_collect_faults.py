"""Issue 4, item 7: collect examples/workload.py normally and under injected faults, then prove it.

Faults (each injected on a live workload while `perfdiff collect --pid` samples it):
(a) CPU contention: busy processes pinned to the workload's CPU;
(b) a throttled CPU: the workload SIGSTOPped and SIGCONTed on a duty cycle;
(c) I/O pressure: processes writing and fsync-ing big blocks while the workload makes its own
    small fsync'd writes.

The bundles are checked on their own first (the collectors are right whatever compare does),
then through `perfdiff compare --json`.  All runs share one module fixture (~25 s on 2 cores).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdiff.bundle import RunData, load_bundle

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workload.py"
PY = sys.executable
DURATION = "3s"
INTERVAL = "10ms"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one for the workload, one for the collector"),
]

HOG = "while True: pass"
FSYNC_WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.unlink(sys.argv[1])
block = os.urandom(4 << 20)
i = 0
while True:
    os.pwrite(fd, block, (i % 8) * len(block))
    os.fsync(fd)
    i += 1
"""


def _pin(cpus: set[int]):
    return lambda: os.sched_setaffinity(0, cpus)


class Fault:
    """Starts and stops one injected fault around a collection."""

    def __init__(self, kind: str, workload: subprocess.Popen[bytes], cpu: int, tmp: Path):
        self.kind, self.workload, self.cpu, self.tmp = kind, workload, cpu, tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> "Fault":
        if self.kind == "contention":
            self.procs = [subprocess.Popen([PY, "-c", HOG], preexec_fn=_pin({self.cpu})) for _ in range(2)]
        elif self.kind == "sigstop":
            self.thread = threading.Thread(target=self._duty_cycle, daemon=True)
            self.thread.start()
        elif self.kind == "io":
            self.procs = [subprocess.Popen([PY, "-c", FSYNC_WRITER, str(self.tmp / f"pressure{i}.bin")])
                          for i in range(2)]
        time.sleep(0.2)  # the fault is on before the collection starts
        return self

    def _duty_cycle(self, stopped_s: float = 0.015, running_s: float = 0.015) -> None:
        pid = self.workload.pid
        while not self.stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(running_s)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            os.kill(self.workload.pid, signal.SIGCONT)
        for p in self.procs:
            p.kill()
            p.wait()


def collect_run(name: str, fault: str | None, tmp: Path) -> Path:
    """Start the workload, inject `fault`, collect 3 s at 100 Hz.

    Only the contention run pins the workload (to the last CPU, with the hogs; the collector
    then runs on the others): elsewhere the scheduler may move it off a CPU that something
    else on a shared machine keeps busy, which would add run-queue wait to a normal run.
    """
    cpus = sorted(os.sched_getaffinity(0))
    work_cpu = cpus[-1]
    other = set(cpus[:-1]) if fault == "contention" else set(cpus)
    io_dir = tmp / f"io-{name}"
    io_dir.mkdir()
    pin = ["--cpu", str(work_cpu)] if fault == "contention" else []
    w = subprocess.Popen([PY, str(WORKLOAD), "--seconds", "60", *pin, "--work", "50000",
                          "--wait-ms", "10", "--io-kb", "256", "--io-dir", str(io_dir)],
                         stderr=subprocess.DEVNULL)
    out = tmp / name
    try:
        with Fault(fault or "none", w, work_cpu, tmp):
            r = subprocess.run([PY, "-m", "perfdiff", "collect", "--pid", str(w.pid), "--duration", DURATION,
                                "--interval", INTERVAL, "-o", str(out)],
                               capture_output=True, text=True, timeout=120, preexec_fn=_pin(other))
    finally:
        w.kill()
        w.wait()
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("faults")
    # Normal runs bracket the faulty ones, so slow drift of a shared machine hits both sides.
    order = [("normal", None), ("contention", "contention"), ("sigstop", "sigstop"), ("io", "io"),
             ("normal2", None)]
    return {name: collect_run(name, fault, tmp) for name, fault in order}


def per_cycle(run: RunData) -> pd.DataFrame:
    """Host-function ns per cycle (marker ranges), prorating each interval row by overlap."""
    m = run.markers.sort_values("start_ns")
    cs, ce = m["start_ns"].to_numpy(), m["end_ns"].to_numpy()
    a = run.activity
    out = {}
    for fn, rows in a.groupby("function", observed=True):
        s, e, b = (rows[c].to_numpy().astype(np.float64) for c in ("start_ns", "end_ns", "busy_ns"))
        overlap = np.clip(np.minimum(e[None, :], ce[:, None]) - np.maximum(s[None, :], cs[:, None]), 0, None)
        out[str(fn)] = (overlap / np.maximum(e - s, 1)[None, :] * b[None, :]).sum(axis=1)
    df = pd.DataFrame(out)
    df["cycle_ns"] = ce - cs
    return df.iloc[2:-2]  # the first and last cycles may be cut by the collection window


def share(df: pd.DataFrame, fn: str) -> float:
    return float(np.median(df[fn] / df["cycle_ns"]))


@pytest.fixture(scope="module")
def cycles(runs: dict[str, Path]) -> dict[str, pd.DataFrame]:
    out = {}
    for name, path in runs.items():
        b = load_bundle(path)
        assert b.manifest["status"] == "complete"
        assert len(b.markers) > 50, f"{name}: {len(b.markers)} marks"
        out[name] = per_cycle(b)
    return out


# ------------------------------------------------------------------ the bundles on their own


def test_contention_shows_as_run_queue_wait(cycles: dict[str, pd.DataFrame]) -> None:
    n, a = cycles["normal"], cycles["contention"]
    assert share(a, "runq") > share(n, "runq") + 0.2, (share(n, "runq"), share(a, "runq"))
    assert np.median(a["cycle_ns"]) > 1.3 * np.median(n["cycle_ns"])


def test_stop_duty_cycle_lowers_the_on_cpu_share(cycles: dict[str, pd.DataFrame]) -> None:
    n, b = cycles["normal"], cycles["sigstop"]
    assert share(b, "oncpu") < 0.8 * share(n, "oncpu"), (share(n, "oncpu"), share(b, "oncpu"))
    assert np.median(b["cycle_ns"]) > 1.3 * np.median(n["cycle_ns"])
    # Stopped time is no host state: it does not show up as blocked or run-queue time.
    assert share(b, "runq") < share(n, "runq") + 0.15


def test_io_pressure_shows_as_io_waits(cycles: dict[str, pd.DataFrame]) -> None:
    n, c = cycles["normal"], cycles["io"]
    # States are sampled (one look per tick), so compare means over the run, not medians.
    io_n = float(np.mean(n["iowait"] + n["write"]))
    io_c = float(np.mean(c["iowait"] + c["write"]))
    assert io_c > 2 * io_n and io_c > io_n + 0.5e6, (io_n, io_c)


def test_normal_runs_agree(cycles: dict[str, pd.DataFrame]) -> None:
    n1, n2 = cycles["normal"], cycles["normal2"]
    for fn in ("runq", "oncpu"):
        assert abs(share(n1, fn) - share(n2, fn)) < 0.15, (fn, share(n1, fn), share(n2, fn))


# ------------------------------------------------------------------ through perfdiff compare


def compare(runs: dict[str, Path], normal: str, abnormal: str, tmp: Path) -> dict:
    from perfdiff.cli import main

    report, js = tmp / f"{normal}-{abnormal}.md", tmp / f"{normal}-{abnormal}.json"
    assert main(["compare", str(runs[normal]), str(runs[abnormal]), "-o", str(report), "--json", str(js)]) == 0
    return json.loads(js.read_text())


def top_host_function(result: dict) -> dict:
    """The highest-ranked detail row that is a host function, with its statistics."""
    funcs = {(f["name"], f["device"]): f for f in result["functions"]}
    for row in result["details"]:
        if row.get("kind") == "host" and row.get("function"):
            return {**funcs.get((row["function"], row["device"]), {}), "rank_row": row}
    raise AssertionError("no host function in the report")


def significant(f: dict, alpha: float = 0.05) -> bool:
    qs = [q for q in (f.get("q_t"), f.get("q_beta")) if q is not None]
    return bool(qs) and min(qs) <= alpha


def test_compare_puts_runq_on_top_for_contention(runs: dict[str, Path], tmp_path: Path) -> None:
    top = top_host_function(compare(runs, "normal", "contention", tmp_path))
    assert top["name"] == "runq" and significant(top), top


def test_compare_puts_oncpu_share_and_cycle_time_on_top_for_stops(runs: dict[str, Path], tmp_path: Path) -> None:
    result = compare(runs, "normal", "sigstop", tmp_path)
    assert result["cycle_test"]["p_mwu"] <= 0.05 and result["cycle_test"]["median_a"] > result["cycle_test"]["median_n"]
    top = top_host_function(result)
    assert top["name"] == "oncpu" and top["q_beta"] is not None and top["q_beta"] <= 0.05, top
    assert top["d_beta"] < 0


def test_compare_puts_an_io_wait_on_top_for_io_pressure(runs: dict[str, Path], tmp_path: Path) -> None:
    top = top_host_function(compare(runs, "normal", "io", tmp_path))
    assert top["name"] in ("blocked", "iowait", "write") and significant(top), top


def test_compare_two_normal_runs_finds_no_host_cause(runs: dict[str, Path], tmp_path: Path) -> None:
    result = compare(runs, "normal", "normal2", tmp_path)
    causes = [f for f in result["findings"] if f["kind"] == "cause" and f["device"] == "Host"]
    assert causes == [], causes
