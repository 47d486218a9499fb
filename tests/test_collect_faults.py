"""Collect examples/workload.py normally and under injected faults, then prove it.

Faults (each injected on a live workload while `perfdiff collect --pid` samples it):
(a) CPU contention: three busy processes pinned to the workload's CPU;
(b) a throttled CPU: the workload SIGSTOPped and SIGCONTed on a duty cycle;
(c) I/O pressure: three processes writing 4 MiB blocks (O_DIRECT, fsync) while the workload
    makes its own 1 MiB fsync'd write each cycle.

The bundles are checked on their own first (the collectors are right whatever compare does),
then through `perfdiff compare --json`.  One test runs them all (~30 s on 2 cores), once.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    pytest.mark.live,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one for the workload, one for the collector"),
]

LOCK = Path(tempfile.gettempdir()) / "perfdiff-live-collect-tests.lock"


@contextmanager
def live_host_lock(exclusive: bool) -> Iterator[None]:
    """Injected faults must not run beside other live-collection tests (pytest -n 2, or a
    second session on the same machine): they hold this lock exclusively, the others shared."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


HOG = "while True: pass"
FSYNC_WRITER = """
import mmap, os, sys
# O_DIRECT: the disk is kept busy without copying through the page cache, so the fault costs
# little CPU (it must show as I/O waits in the workload, not as run-queue wait).
path = sys.argv[1]
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
except OSError:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.unlink(path)
block = mmap.mmap(-1, 4 << 20)  # page-aligned, as O_DIRECT wants
block.write(os.urandom(4 << 20))
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
            self.procs = [subprocess.Popen([PY, "-c", HOG], preexec_fn=_pin({self.cpu})) for _ in range(3)]
        elif self.kind == "sigstop":
            self.thread = threading.Thread(target=self._duty_cycle, daemon=True)
            self.thread.start()
        elif self.kind == "io":
            others = set(os.sched_getaffinity(0)) - {self.cpu}
            self.procs = [subprocess.Popen([PY, "-c", FSYNC_WRITER, str(self.tmp / f"pressure{i}.bin")],
                                           preexec_fn=_pin(others)) for i in range(3)]
        time.sleep(0.2)  # the fault is on before the collection starts
        return self

    def _duty_cycle(self, stopped_s: float = 0.006, running_s: float = 0.003) -> None:
        """Stop the workload two thirds of the time it computes (not while it sleeps): its CPU
        work takes three times as long, as under a clock cut to a third, while its waits stay
        as they were."""
        pid = self.workload.pid
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            while not self.stop.is_set():
                raw = os.pread(fd, 512, 0)
                if raw[raw.rindex(b")") + 2:][:1] != b"R":
                    time.sleep(0.0005)
                    continue
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stopped_s)
                os.kill(pid, signal.SIGCONT)
                time.sleep(running_s)
        finally:
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            os.kill(self.workload.pid, signal.SIGCONT)
        for p in self.procs:
            p.kill()
            p.wait()


def start_workload(name: str, cpu: int, tmp: Path) -> subprocess.Popen[bytes]:
    io_dir = tmp / f"io-{name}"
    io_dir.mkdir()
    return subprocess.Popen([PY, str(WORKLOAD), "--seconds", "60", "--cpu", str(cpu), "--work", "50000",
                             "--wait-ms", "10", "--io-kb", "1024", "--io-dir", str(io_dir)],
                            stderr=subprocess.DEVNULL)


def start_collector(pid: int, out: Path, cpus: set[int]) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "perfdiff", "collect", "--pid", str(pid), "--duration", DURATION,
                             "--interval", INTERVAL, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_pin(cpus))


def wait_collectors(collectors: list[subprocess.Popen[str]]) -> None:
    for c in collectors:
        _, err = c.communicate(timeout=120)
        assert c.returncode == 0, err


def stop(workloads: list[subprocess.Popen[bytes]]) -> None:
    for w in workloads:
        w.kill()
        w.wait()


def collect_run(name: str, fault: str | None, tmp: Path) -> Path:
    """Start the workload on the last CPU, inject `fault`, collect 3 s at 100 Hz.

    Every run pins the workload alone to the last CPU, and the collector (and the I/O
    writers) to the others: then nothing of the test itself competes with the workload for
    its CPU, except the contention run's hogs, pinned to it on purpose.
    """
    cpus = sorted(os.sched_getaffinity(0))
    work_cpu, other = cpus[-1], set(cpus[:-1])
    w = start_workload(name, work_cpu, tmp)
    try:
        with Fault(fault or "none", w, work_cpu, tmp):
            wait_collectors([start_collector(w.pid, tmp / name, other)])
    finally:
        stop([w])
    return tmp / name


def collect_twins(names: tuple[str, str], tmp: Path) -> None:
    """Two normal runs at the same time, both workloads on the last CPU.

    Run one after the other, two normal runs on a shared machine do differ (another job's
    CPU time shows up, rightly, as run-queue wait in one of them); run together, whatever the
    machine does hits both alike, which is what "compare finds nothing" needs.
    """
    cpus = sorted(os.sched_getaffinity(0))
    work_cpu, other = cpus[-1], set(cpus[:-1])
    ws = [start_workload(n, work_cpu, tmp) for n in names]
    try:
        wait_collectors([start_collector(w.pid, tmp / n, other) for w, n in zip(ws, names, strict=True)])
    finally:
        stop(ws)


def collect_all(tmp: Path) -> dict[str, Path]:
    out = {name: collect_run(name, fault, tmp) for name, fault in
           [("normal", None), ("contention", "contention"), ("sigstop", "sigstop"), ("io", "io")]}
    collect_twins(("twin_a", "twin_b"), tmp)
    return {**out, "twin_a": tmp / "twin_a", "twin_b": tmp / "twin_b"}


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


def load_cycles(runs: dict[str, Path]) -> dict[str, pd.DataFrame]:
    out = {}
    for name, path in runs.items():
        b = load_bundle(path)
        assert b.manifest["status"] == "complete"
        assert len(b.markers) > 30, f"{name}: only {len(b.markers)} marks"
        out[name] = per_cycle(b)
    return out


# ------------------------------------------------------------------ the bundles on their own


def check_contention_shows_as_run_queue_wait(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    n, a = cycles["normal"], cycles["contention"]
    assert share(a, "runq") > share(n, "runq") + 0.2, (share(n, "runq"), share(a, "runq"))
    # Less than the hogs' share: the scheduler favours a task that slept (the "GPU wait").
    assert np.median(a["cycle_ns"]) > 1.2 * np.median(n["cycle_ns"])


def check_stop_duty_cycle_lowers_the_on_cpu_share(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    n, b = cycles["normal"], cycles["sigstop"]
    assert np.median(b["cycle_ns"]) > 1.3 * np.median(n["cycle_ns"])
    # The same CPU work per cycle, so a smaller share of a longer cycle ...
    assert 0.75 < b["oncpu"].mean() / n["oncpu"].mean() < 1.33, (n["oncpu"].mean(), b["oncpu"].mean())
    assert share(b, "oncpu") < share(n, "oncpu"), (share(n, "oncpu"), share(b, "oncpu"))
    # ... and the stopped time is in no host state: it is the part of the cycle none explains.
    fns = [c for c in b.columns if c != "cycle_ns"]
    unexplained_n = np.median(n["cycle_ns"] - n[fns].sum(axis=1))
    unexplained_b = np.median(b["cycle_ns"] - b[fns].sum(axis=1))
    assert unexplained_b > unexplained_n + 3e6, (unexplained_n, unexplained_b)


def check_io_pressure_shows_as_io_waits(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    n, c = cycles["normal"], cycles["io"]
    # States are sampled (one look per tick), so compare means over the run, not medians.
    io_n = float(np.mean(n["iowait"] + n["write"]))
    io_c = float(np.mean(c["iowait"] + c["write"]))
    assert io_c > 2 * io_n and io_c > io_n + 0.5e6, (io_n, io_c)


def check_twin_normal_runs_agree(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    n1, n2 = cycles["twin_a"], cycles["twin_b"]
    for fn in ("runq", "oncpu", "blocked"):
        assert abs(share(n1, fn) - share(n2, fn)) < 0.1, (fn, share(n1, fn), share(n2, fn))
    assert np.median(n1["cycle_ns"]) == pytest.approx(np.median(n2["cycle_ns"]), rel=0.2)


# ------------------------------------------------------------------ through perfdiff compare


def compare(runs: dict[str, Path], normal: str, abnormal: str, tmp: Path) -> dict:
    from perfdiff.cli import main

    report, js = tmp / f"{normal}-{abnormal}.md", tmp / f"{normal}-{abnormal}.json"
    assert main(["compare", str(runs[normal]), str(runs[abnormal]), "-o", str(report), "--json", str(js)]) == 0
    return json.loads(js.read_text())


def lead_cause(result: dict) -> dict:
    """The host function the report's findings name first as a cause, with its statistics."""
    funcs = {(f["name"], f["device"]): f for f in result["functions"]}
    for f in result["findings"]:
        if f["code"] == "cause" and f["device"] == "Host":
            return funcs[(f["function"], f["device"])]
    raise AssertionError(f"no host cause in the findings: {[(f['code'], f['function']) for f in result['findings']]}")


def significant(f: dict, alpha: float = 0.05) -> bool:
    qs = [q for q in (f.get("q_t"), f.get("q_beta")) if q is not None]
    return bool(qs) and min(qs) <= alpha


def host_causes(result: dict) -> list[str]:
    return [f["function"] for f in result["findings"] if f["code"] == "cause" and f["device"] == "Host"]


def check_compare_puts_runq_on_top_for_contention(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    result = compare(runs, "normal", "contention", tmp)
    top = lead_cause(result)
    assert top["name"] == "runq" and top["q_t"] <= 0.05 and top["tau_pp"] > 0, top
    assert result["functions"][result["details"][0]["func"]]["name"] == "runq"  # and first in the detailed table


def check_compare_shows_oncpu_share_and_cycle_time_for_stops(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    """A throttled CPU: cycles longer, on-CPU time per cycle the same, so its share falls.

    (The stopped time is in no host state; on a shared machine other host states may move a
    little too, so only what the fault must do is checked.)
    """
    result = compare(runs, "normal", "sigstop", tmp)
    ct = result["cycle_test"]
    assert ct["p_mwu"] <= 0.05 and ct["median_a"] > 1.2 * ct["median_n"], ct
    oncpu = {f["name"]: f for f in result["functions"] if f["device"] == "Host"}["oncpu"]
    assert oncpu["q_beta"] is not None and oncpu["q_beta"] <= 0.05 and oncpu["d_beta"] < 0, oncpu
    assert "oncpu" not in host_causes(result)  # its own time did not grow


def check_compare_puts_an_io_wait_on_top_for_io_pressure(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    top = lead_cause(compare(runs, "normal", "io", tmp))
    assert top["name"] in ("blocked", "iowait", "write") and significant(top) and top["tau_pp"] > 0, top


def check_compare_two_normal_runs_finds_no_host_cause(runs: dict[str, Path], cycles: dict[str, pd.DataFrame], tmp: Path) -> None:
    result = compare(runs, "twin_a", "twin_b", tmp)
    assert host_causes(result) == [], [(f["code"], f["function"]) for f in result["findings"]]


CHECKS = [check_contention_shows_as_run_queue_wait, check_stop_duty_cycle_lowers_the_on_cpu_share,
          check_io_pressure_shows_as_io_waits, check_twin_normal_runs_agree,
          check_compare_puts_runq_on_top_for_contention, check_compare_shows_oncpu_share_and_cycle_time_for_stops,
          check_compare_puts_an_io_wait_on_top_for_io_pressure, check_compare_two_normal_runs_finds_no_host_cause]


def run_checks(tmp: Path) -> list[str]:
    tmp.mkdir()
    with live_host_lock(exclusive=True):
        runs = collect_all(tmp)
    try:
        cycles = load_cycles(runs)
    except AssertionError as exc:
        return [f"load_cycles: {exc}"]
    failures = []
    for check in CHECKS:
        try:
            check(runs, cycles, tmp)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
    return failures


@pytest.mark.timing
def test_faults_end_to_end(tmp_path: Path) -> None:
    """Every run, then every check; all failures are reported together.

    One test, not one per check: under pytest-xdist a shared fixture would run once per
    worker, and two sets of injected faults at once would spoil each other.  Marked `timing`
    (run by `make test-timing`, not `make test`): each faulted run is compared with a normal
    run taken before it, so another job loading the machine during the normal run is a real
    difference the collector rightly records, and the checks (effect thresholds) fail; only
    the twins run side by side.  It needs a machine otherwise idle, and is run once, never
    retried: a failure names the load average it ran under.
    """
    failures = run_checks(tmp_path / "runs")
    load = os.getloadavg()[0]
    assert not failures, f"load average {load:.1f} on {os.cpu_count()} CPUs:\n  " + "\n  ".join(failures)
