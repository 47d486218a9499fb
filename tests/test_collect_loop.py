"""The collect loop in-process: sampler contract, failures, GPU plug-in, flushing, disk full, targets."""
from __future__ import annotations

import errno
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdiff.bundle import BundleWriter, load_bundle
from perfdiff.bundle import journal_rows, open_writer
from perfdiff.collectors import loop as L
from perfdiff.collectors import targets as T
from perfdiff.collectors.base import RowBuffer, SamplerState
from perfdiff.collectors.run import gpu_sampler
from perfdiff.errors import CollectionError, EXIT_COLLECT

from fakes.fake_host import FakeHost, stat_line

MS = 1_000_000


class StubTargets:
    """A TargetSet stand-in: fixed pids, no /proc."""

    def __init__(self, pids: set[int]):
        self.live = pids
        self.closed = False

    def pids(self) -> set[int]:
        return self.live

    def discover(self, t_ns: int) -> list:
        return []

    def close(self) -> None:
        self.closed = True

    def manifest(self) -> dict:
        return {"children": [], "processes": []}


class CountingSampler:
    """Returns one host-style row per tick as Columns (the cheap form)."""

    name = "counting"

    def __init__(self, interval_ns: int):
        self.interval_ns = interval_ns
        self.ticks: list[int] = []
        self.closed = False
        self.buf = RowBuffer()

    def start(self, t_ns: int) -> None:
        self.t_prev = t_ns

    def sample(self, t_ns: int) -> dict:
        self.ticks.append(t_ns)
        self.buf.activity("oncpu", "host", "Host", self.t_prev, t_ns, t_ns - self.t_prev)
        self.buf.sample("host_cpu_usage", "Host", self.t_prev, t_ns, 50.0)
        self.t_prev = t_ns
        return self.buf.take()

    def manifest(self) -> dict:
        return {"collector": {"name": self.name, "interval_ns": self.interval_ns}}

    def close(self) -> None:
        self.closed = True


class FakeGpuSampler:
    """GPU-style: DataFrames, a NaN it must never store, a manifest fragment, fails on tick 3."""

    name = "gpu"

    def __init__(self, target_pids, *, gpus, interval_ns, warn):
        self.target_pids, self.gpus, self.interval_ns = target_pids, gpus, interval_ns
        self.state = SamplerState()
        self.calls = 0

    def start(self, t_ns: int) -> None:
        self.state.mark_unsupported("GPU 1", "gpu_sm_util", "GPM needs Hopper", t_ns)

    def sample(self, t_ns: int) -> dict:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("NVML hiccup")
        assert self.target_pids() == {4242}
        return {"samples": pd.DataFrame({"metric": ["gpu_usage", "gpu_usage"], "device": ["GPU 0", "GPU 1"],
                                         "t_start_ns": [t_ns, t_ns], "t_end_ns": [t_ns, t_ns],
                                         "value": [75.0, np.nan]})}

    def manifest(self) -> dict:
        return {"collector": {"name": "gpu", "driver": "fake"}, "unsupported": self.state.unsupported_list(),
                "gpus": [{"index": 0, "name": "Fake H100"}], "events": [{"t_ns": 1, "device": "GPU 1", "event": "xid"}]}

    def close(self) -> None:
        pass


class BrokenSampler:
    name = "broken"
    interval_ns = 0

    def start(self, t_ns: int) -> None:
        pass

    def sample(self, t_ns: int) -> dict:
        raise ValueError("bug in a sampler")

    def manifest(self) -> dict:
        raise KeyError("and in its manifest")

    def close(self) -> None:
        raise OSError("and in close")


def make_run(tmp_path: Path, samplers: list, *, interval_ms: int = 10, duration_ms: int | None = 200,
             poll_exit=lambda: None, pids: set[int] | None = None):
    writer = open_writer(tmp_path / "run", {"target": {"pid": 4242}})
    warnings: list[str] = []
    run = L.Collection(writer, StubTargets(pids or {4242}), samplers, interval_ns=interval_ms * MS,
                       duration_ns=duration_ms * MS if duration_ms else None, markers=None,
                       poll_exit=poll_exit, warn=warnings.append)
    return run, writer, warnings


def test_loop_ticks_on_time_and_writes_a_complete_bundle(tmp_path: Path) -> None:
    s = CountingSampler(10 * MS)
    run, writer, _ = make_run(tmp_path, [s], duration_ms=300)
    t0 = time.monotonic()
    status = run.run()
    run.finish(status)
    wall = time.monotonic() - t0
    assert status == "complete" and run.end_reason == "duration"
    assert wall > 0.28  # it ran its duration (how late it may end is make bench's: jitter)
    b = load_bundle(tmp_path / "run")
    assert b.manifest["status"] == "complete"
    n = len(s.ticks)
    assert 25 <= n + run.stats.overruns <= 31  # ~30 ticks of 10 ms in 300 ms
    assert len(b.activity) == n and len(b.samples) == n
    gaps = np.diff(np.array(s.ticks))
    assert np.median(gaps) == pytest.approx(10 * MS, rel=0.2)
    c = b.manifest["collection"]
    assert c["ticks"] == n and c["jitter_p50_ns"] >= 0 and c["cpu_ns"] > 0
    assert len(b.manifest["clock"]["anchors"]) >= 2
    assert s.closed


def test_sampler_errors_are_recorded_not_fatal(tmp_path: Path) -> None:
    good, bad = CountingSampler(10 * MS), BrokenSampler()
    run, writer, warnings = make_run(tmp_path, [bad, good], duration_ms=200)
    run.finish(run.run())
    b = load_bundle(tmp_path / "run")
    assert len(b.activity) == len(good.ticks) > 10  # the good sampler kept going
    events = [e for e in b.manifest["events"] if e.get("device") == "broken"]
    kinds = [e["event"] for e in events]
    assert kinds.count("sampler-error") >= L.MAX_SAMPLER_ERRORS and "sampler-disabled" in kinds
    assert "ValueError: bug in a sampler" in events[0]["error"] and "test_collect_loop.py" in events[0]["at"]
    broken = [c for c in b.manifest["collectors"] if c["name"] == "broken"][0]
    assert broken["disabled"] and "manifest_error" in broken
    assert len(warnings) == 1 and "broken" in warnings[0]  # one line, not one per tick


class BrokenTicker(BrokenSampler):
    """A buffered sampler whose every tick fails while its take at each flush succeeds."""

    def tick(self, t_ns: int) -> None:
        raise ValueError("bug in a tick")

    def take(self) -> dict:
        return {}


def test_a_buffered_sampler_failing_every_tick_is_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "FLUSH_NS", 20 * MS)  # a good take between fewer than 10 failing ticks
    good, bad = CountingSampler(10 * MS), BrokenTicker()
    run, _, _ = make_run(tmp_path, [bad, good], duration_ms=300)
    run.finish(run.run())
    events = [e["event"] for e in load_bundle(tmp_path / "run").manifest["events"] if e.get("device") == "broken"]
    assert "sampler-disabled" in events


def test_gpu_plugin_gets_live_pids_and_its_manifest_is_merged(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {}

    def open_gpu_sampler(target_pids, *, gpus, interval_ns, nvml=None, warn=print, proc_root="/proc"):
        calls.update(gpus=gpus, interval_ns=interval_ns)
        return FakeGpuSampler(target_pids, gpus=gpus, interval_ns=interval_ns, warn=warn)

    fake_mod = types.ModuleType("perfdiff.collectors.gpu")
    fake_mod.open_gpu_sampler = open_gpu_sampler
    monkeypatch.setitem(sys.modules, "perfdiff.collectors.gpu", fake_mod)
    targets = StubTargets({4242})
    gpu = gpu_sampler(targets.pids, [0, 1], 20 * MS, print)
    assert calls == {"gpus": [0, 1], "interval_ns": 20 * MS}
    run, writer, _ = make_run(tmp_path, [gpu], interval_ms=20, duration_ms=200)
    run.finish(run.run())
    b = load_bundle(tmp_path / "run")
    assert set(b.samples["device"]) == {"GPU 0"}  # the NaN of GPU 1 is unknown: not stored
    assert (b.samples["value"] == 75.0).all() and len(b.samples) == gpu.calls - 1
    m = b.manifest
    assert m["gpus"] == [{"index": 0, "name": "Fake H100"}]
    assert {"device": "GPU 1", "metric": "gpu_sm_util"}.items() <= m["unsupported"][0].items()
    assert any(e["event"] == "xid" for e in m["events"])
    assert any(e["event"] == "sampler-error" and "NVML hiccup" in e["error"] for e in m["events"])
    assert [c["name"] for c in m["collectors"]] == ["collect", "gpu"]


@pytest.mark.parametrize("planted", [None, types.ModuleType("perfdiff.collectors.gpu")],
                         ids=["import-fails", "module-without-the-sampler"])
def test_a_broken_gpu_module_is_a_recorded_sampler_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         planted: types.ModuleType | None) -> None:
    """perfdiff's own GPU module failing to import is a broken install: the collection records
    it (sampler-error with the reason, then sampler-disabled) and warns, never goes on silently."""
    monkeypatch.setitem(sys.modules, "perfdiff.collectors.gpu", planted)  # the import raises ImportError
    gpu = gpu_sampler(lambda: set(), None, MS, print)
    assert gpu is not None
    run, writer, warnings = make_run(tmp_path, [gpu], interval_ms=20, duration_ms=100)
    run.finish(run.run())
    m = load_bundle(tmp_path / "run").manifest
    errors = [e for e in m["events"] if e["event"] == "sampler-error"]
    assert len(errors) == 1 and errors[0]["method"] == "start" and errors[0]["device"] == "nvml"
    assert "ImportError" in errors[0]["error"] and "perfdiff.collectors.gpu" in errors[0]["error"]
    assert [e["event"] for e in m["events"]].count("sampler-disabled") == 1
    assert len(warnings) == 1 and "reinstall" in warnings[0]
    assert m["collectors"][-1]["name"] == "nvml" and "perfdiff.collectors.gpu" in m["collectors"][-1]["import_error"]


def test_target_exit_ends_the_run_with_status_target_exited(tmp_path: Path) -> None:
    s = CountingSampler(10 * MS)
    state = {"n": 0}

    def poll_exit():
        state["n"] += 1
        return "target-exited" if state["n"] >= 5 else None

    run, writer, _ = make_run(tmp_path, [s], duration_ms=None, poll_exit=poll_exit)
    status = run.run()
    run.finish(status)
    assert status == "target-exited" and len(s.ticks) == 5
    assert load_bundle(tmp_path / "run").manifest["status"] == "target-exited"


def test_rows_reach_the_journal_while_running_and_parts_at_each_seal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "FLUSH_NS", 50 * MS)
    monkeypatch.setattr(L, "SEAL_NS", 150 * MS)
    s = CountingSampler(10 * MS)
    run, writer, _ = make_run(tmp_path, [s], duration_ms=400)
    run.run()
    tdir = tmp_path / "run" / "activity"
    parts = sorted(tdir.glob("part-*.parquet"))
    assert len(parts) >= 3  # the empty first part, then a seal every ~150 ms
    # Before `finish` the bundle is unsealed: what was flushed but not sealed is in a journal,
    # and loading reads it (no row written is lost).
    if list(tdir.glob(".part-*.arrows")):
        b = load_bundle(tmp_path / "run")
        assert any("unsealed journal" in n for n in b.notes)
    b = load_bundle(tmp_path / "run")
    assert b.manifest["status"] == "interrupted"
    assert (b.activity["function"] == "oncpu").sum() == len(s.ticks)  # every tick's row, once
    run.finish("complete")
    assert not list(tdir.glob(".part-*"))  # sealed: no journal, no temporary file left
    b = load_bundle(tmp_path / "run")
    assert (b.activity["function"] == "oncpu").sum() == len(s.ticks) and not b.notes
    assert len(pd.read_parquet(tdir)) == len(s.ticks)  # one pandas call reads the table


def test_disk_full_is_one_line_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, writer, _ = make_run(tmp_path, [CountingSampler(10 * MS)], duration_ms=100)

    def full(self, table, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(BundleWriter, "journal", full)
    with pytest.raises(CollectionError) as err:
        run.run()
    assert err.value.code == EXIT_COLLECT
    assert "disk full" in str(err.value) and "\n" not in str(err.value)
    assert str(tmp_path / "run") in str(err.value)


def test_journal_rows_keep_columns_apart_from_frames() -> None:
    from perfdiff.bundle import MISSING, columns_to_arrow

    buf = RowBuffer()
    buf.sample("gpu_usage", "GPU 0", 1, 2, 3.0)
    df = pd.DataFrame({"metric": ["x"], "device": ["Host"], "t_start_ns": [5], "t_end_ns": [6], "value": [7.0]})
    merged, frames = journal_rows("samples", [buf.take()["samples"], df])
    assert merged["metric"] == ["gpu_usage"] and frames.column("metric").to_pylist() == ["x"]
    assert merged["value"] == [3.0] and frames.column("value").to_pylist() == [7.0]
    buf.activity("oncpu", "host", "Host", 1, 2, 3)
    merged, frames = journal_rows("activity", [buf.take()["activity"]])
    assert frames is None and merged["bytes"] == [MISSING] and "tid" not in merged  # one chunk: as it is
    a = columns_to_arrow("activity", [merged])
    assert a.column("bytes").to_pylist() == [None] and a.column("tid").to_pylist() == [None]
    merged, _ = journal_rows("activity", [merged, {**merged, "busy_ns": [4]}])
    assert merged["busy_ns"] == [3, 4] and merged["tid"] == [MISSING, MISSING]  # absent: unknown


def test_target_set_finds_children_recursively_and_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeHost(tmp_path)

    def proc(pid: int, ppid: int, start: int, state: str = "S") -> None:
        fake.write(f"{pid}/stat", stat_line(pid, state, ppid=ppid, start=start))
        fake.write(f"{pid}/cmdline", f"prog\0{pid}\0")
        fake.write(f"{pid}/status", f"Name:\tprog\nNSpid:\t{pid}\t{pid - 90}\n")

    proc(100, 1, 10)
    proc(101, 100, 11)
    proc(102, 101, 12)  # grandchild
    proc(200, 1, 13)  # unrelated
    ts = T.TargetSet(100, procfs=fake.fs(), exclude={os.getpid()})
    assert ts.pids() == {100, 101, 102}
    assert ts.processes[102].cmdline == ["prog", "102"] and ts.processes[102].nspid == 12
    fake.write("loadavg", "0.10 0.20 0.30 1/80 300\n")  # the last pid handed out: 300
    scans = []
    real_listdir = T.os.listdir
    monkeypatch.setattr(T.os, "listdir", lambda d: scans.append(d) or real_listdir(d))
    ts.discover(1)
    assert len(scans) == 1
    assert ts.discover(1) == [] and len(scans) == 1  # no pid handed out since: no scan
    proc(103, 102, 14)  # a great-grandchild starting later ...
    proc(104, 103, 15)  # ... and its child, in the same scan
    fake.write("loadavg", "0.10 0.20 0.30 1/80 302\n")
    assert sorted(p.pid for p in ts.discover(2)) == [103, 104]
    assert ts.pids() == {100, 101, 102, 103, 104}
    import shutil
    shutil.rmtree(fake.proc / "101")
    fake.write("loadavg", "0.10 0.20 0.30 1/80 303\n")
    ts.discover(3)
    assert 101 not in ts.pids() and ts.processes[101].exited_ns == 3
    assert ts.root_alive()
    fake.write("100/stat", stat_line(100, "Z", start=10))
    assert not ts.root_alive()
    assert ts.manifest()["children"] == [101, 102, 103, 104]
    ts.close()


def test_check_target_errors(tmp_path: Path) -> None:
    fake = FakeHost(tmp_path)
    fake.write("300/stat", stat_line(300, "Z"))
    with pytest.raises(CollectionError, match="no such process: pid 999"):
        T.check_target(999, fake.fs())
    with pytest.raises(CollectionError, match="already exited"):
        T.check_target(300, fake.fs())
    with pytest.raises(CollectionError, match="this collector"):
        T.check_target(os.getpid())


def test_only_marks_wholly_inside_the_collection_are_kept(tmp_path: Path) -> None:
    from perfdiff.collectors.markers import MarkerReader

    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    f = marks_dir / "4242.marks"
    f.write_bytes(b"1000 2000 7 before\n")  # a cycle from long before the collection

    class Marking(CountingSampler):
        def sample(self, t_ns: int) -> dict:
            if len(self.ticks) == 3:
                with open(f, "ab") as fh:
                    fh.write(b"%d %d 7 inside\n" % (t_ns - 5 * MS, t_ns - MS))
            return super().sample(t_ns)

    writer = open_writer(tmp_path / "run", {})
    run = L.Collection(writer, StubTargets({4242}), [Marking(10 * MS)], interval_ns=10 * MS,
                       duration_ns=100 * MS, markers=MarkerReader(str(marks_dir), announced=True),
                       poll_exit=lambda: None, warn=print)
    status = run.run()
    with open(f, "ab") as fh:  # ends after the last tick
        fh.write(b"%d %d 7 after\n" % (time.time_ns() - MS, time.time_ns() + 10_000 * MS))
    run.finish(status)
    b = load_bundle(tmp_path / "run")
    assert list(b.markers["name"].astype(str)) == ["inside"]
    assert b.manifest["collection"]["marks_outside"] == 2
    assert not f.exists()  # closing the reader removes the marks file: the target stops writing


def test_the_real_gpu_sampler_on_fake_nvml_runs_in_the_loop(tmp_path: Path) -> None:
    """collectors/gpu/'s sampler (fake H100 driver) under this loop: rows and manifest merge."""
    from fakes import fake_nvml  # both ship with perfdiff: a failing import fails the test

    from perfdiff.collectors import gpu as gpu_mod
    sc = fake_nvml.make_scenario("h100_gpm", t0_ns=time.time_ns(), target_pid=4242)
    sc.fake.set_time(time.time_ns())
    root = sc.write_proc(tmp_path / "proc")
    targets = StubTargets({4242})
    gpu = gpu_mod.open_gpu_sampler(targets.pids, gpus=None, interval_ns=50 * MS, nvml=sc.nvml, proc_root=root)
    assert gpu is not None
    run, writer, warnings = make_run(tmp_path, [gpu], interval_ms=50, duration_ms=400)
    run.finish(run.run())
    b = load_bundle(tmp_path / "run")
    assert b.manifest["status"] == "complete" and not warnings
    gpu_rows = b.samples[b.samples["device"].astype(str).str.startswith("GPU")]
    assert len(gpu_rows) > 0 and np.isfinite(gpu_rows["value"]).all()
    assert len(b.manifest["gpus"]) == 1
    assert not [e for e in b.manifest["events"] if e["event"].startswith("sampler-")]


def test_root_alive_on_a_live_process_sees_the_zombie_as_exited() -> None:
    """On the real /proc, through the pidfd where the kernel has one: alive while it runs,
    exited once it is a zombie (not reaped yet) and after it is reaped."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ts = T.TargetSet(child.pid)
    try:
        assert ts.root_alive() and ts.root_alive()
        assert (ts._pidfd >= 0) == hasattr(os, "pidfd_open")
        child.kill()
        deadline = time.monotonic() + 10
        while ts.root_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ts.root_alive()
        assert child.poll() is not None  # only now reaped: root_alive saw the zombie
        assert not ts.root_alive()
    finally:
        child.kill()
        child.wait()
        ts.close()


def test_the_collect_loop_imports_nothing_after_its_first_tick(tmp_path: Path) -> None:
    """A module imported inside the loop costs a collector ~10 ms of CPU at some tick (once an
    inert kernel-trace source imported the importers' helpers at its first poll: 0.09 % of a
    10 s run at 10 Hz).  A fresh interpreter runs `perfdiff collect --pid` on a sleeping child
    past a flush and lists what was imported between the first tick and the loop's end."""
    import subprocess

    code = r"""
import sys
from perfdiff import cli
from perfdiff.collectors import loop as L
seen = {}
tick, loop = L.Collection._tick, L.Collection._loop
def _tick(self, t_ns):
    seen.setdefault("first", set(sys.modules))
    return tick(self, t_ns)
def _loop(self):
    loop(self)
    seen["end"] = set(sys.modules)
L.Collection._tick, L.Collection._loop = _tick, _loop
rc = cli.main(["collect", "--pid", sys.argv[1], "--duration", "1.2s", "--interval", "50ms", "-o", sys.argv[2]])
print(rc, sorted(seen["end"] - seen["first"]))
"""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = subprocess.run([sys.executable, "-c", code, str(child.pid), str(tmp_path / "run")],
                             capture_output=True, text=True, timeout=60)
    finally:
        child.kill()
        child.wait()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 []", out.stdout


def test_stop_sources_hands_the_host_samplers_last_per_cpu_reading_to_the_bundle(tmp_path: Path) -> None:
    """On 32 (fake) CPUs per-CPU readings come every 320 ms; `stop_sources` after the loop
    adds a last one, and its rows reach the sealed bundle."""
    from perfdiff.collectors.host import HostSampler

    (tmp_path / "host").mkdir()
    fake = FakeHost(tmp_path / "host", cpus=32)
    host = HostSampler(lambda: set(), interval_ns=100 * MS, procfs=fake.fs(), cpu_clock=None)
    run, writer, _ = make_run(tmp_path, [host], interval_ms=100, duration_ms=300)
    status = run.run()
    time.sleep(0.12)  # the end comes over 100 ms after the last per-CPU reading
    run.stop_sources()
    run.finish(status)
    b = load_bundle(tmp_path / "run")
    cpu5 = b.samples[(b.samples["metric"] == "cpu_frequency_mhz") & (b.samples["device"] == "CPU 5")]
    assert len(cpu5) == 2  # the first tick's reading and the last one
    assert int(cpu5["t_end_ns"].max()) > b.manifest["collection"]["stop_ns"]


def test_the_command_the_api_and_the_loop_import_no_numpy_pandas_or_pyarrow() -> None:
    """`perfdiff collect --pid 123` answers "no such process" at once: the data libraries are
    imported with the bundle writer, once the target is known to exist."""
    import subprocess

    code = ("import sys, perfdiff.cli, perfdiff.cli.collect, perfdiff.collectors.run, perfdiff.collectors.loop, "
            "perfdiff.collectors.targets; print(sorted(m for m in ('numpy', 'pandas', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
