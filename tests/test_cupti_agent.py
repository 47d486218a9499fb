"""The CUPTI agent (collectors/cupti/) against the fake cupti-python, in named scenarios.

In-process tests drive the agent and its collector side directly; subprocess tests run real
targets started the way `perfdiff collect -- CMD` starts them (the environment and the
sitecustomize bootstrap), with the fake ``cupti`` package on their PYTHONPATH.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

import fakes.fake_cupti as fake_cupti
from perfdiff.bundle import MISSING, RunData, base_manifest, empty_table, load_bundle, write_bundle
from perfdiff.collectors.cupti import agent as ag
from perfdiff.collectors.cupti import binding, wire
from perfdiff.collectors.cupti import reader as rd

KERNELS = [("gemm_bf16_128x128", 300_000), ("rms_norm", 60_000)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The agent sets NVTX_INJECTION64_PATH in os.environ, as it must in a target: undo it here.
    for var in (ag.NVTX_ENV, wire.ENV_DIR, wire.ENV_ENABLE):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def short_dir() -> Path:
    """A directory with a short path (Unix socket paths are limited to 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_agent(directory: Path, scenario: str = "kernels_and_markers", *, flush_ns: int = 10**12,
               **options) -> tuple[ag.Agent, object]:
    load, module = fake_cupti.loader(scenario, **options)
    return ag.Agent(str(directory), announced=True, load_cupti=load, flush_ns=flush_ns, handle_signals=False), module


def source(directory: Path, warnings: list[str]) -> rd.AgentTraceSource:
    return rd.AgentTraceSource(str(directory), announced=True, warn=warnings.append)


def kinds(rows: dict[str, pd.DataFrame]) -> dict[str, int]:
    return {str(k): int(v) for k, v in rows["activity"].groupby("kind", observed=True).size().items()}


# ------------------------------------------------------------------------------ in process


def test_kernels_memcpys_and_nvtx_ranges_become_bundle_rows(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path)
    fake = m._fake
    assert agent.start_recording(), agent.reason
    fake.play_steps(6, KERNELS, copy_bytes=1 << 20)
    fake.memset(4096, 8_000)
    fake.synchronize()
    status = agent.stop_recording()
    # what was asked of CUPTI: the five kinds, never KERNEL (it serialises kernels); system tids
    assert fake.enable_calls == list(ag.ENABLED_KINDS) and "KERNEL" not in fake.enable_calls
    assert fake.thread_id_type == fake_cupti.ActivityThreadIdType.SYSTEM
    assert fake.flush_flags[-1] == fake_cupti.ActivityFlag.FLUSH_FORCED
    assert fake.enabled == set()  # disabled again at stop
    assert status["records"] == {"kernel": 12, "memcpy": 6, "memset": 1, "api": 6 * 4 + 1 + 1, "nvtx": 6,
                                 "marks": 0, "other": 0}
    assert status["dropped"] == {"cupti": 0, "agent": 0, "unclosed_ranges": 0}
    assert [a["label"] for a in status["anchors"]] == ["start", "stop"]

    warnings: list[str] = []
    rows = source(tmp_path, warnings).stop()
    assert warnings == []
    act, mk = rows["activity"], rows["markers"]
    assert kinds(rows) == {"kernel": 12, "memcpy": 6, "memset": 1, "api": 26, "cpu": 6}
    k = act[act["kind"] == "kernel"]
    assert set(k["function"].astype(str)) == {n for n, _ in KERNELS}
    assert (k["device"].astype(str) == "GPU 0").all() and (k["stream"] == 7).all()
    assert (k["busy_ns"].isin([d for _, d in KERNELS])).all()
    # launch_ns and tid come from the cudaLaunchKernel record with the same correlation id
    api = act[act["kind"] == "api"].set_index("correlation")
    assert (k["launch_ns"] != MISSING).all() and (k["launch_ns"] < k["start_ns"]).all()
    assert (k["launch_ns"].to_numpy() == api.loc[k["correlation"], "start_ns"].to_numpy()).all()
    assert set(k["tid"]) == {threading.get_native_id()}
    assert set(api["function"].astype(str)) == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                                               "cudaDeviceSynchronize"}
    copies = act[act["kind"] == "memcpy"]
    assert set(copies["function"].astype(str)) == {"Memcpy HtoD (Pinned -> Device)"} and (copies["bytes"] == 1 << 20).all()
    assert act.loc[act["kind"] == "memset", "function"].astype(str).tolist() == ["Memset (Device)"]
    # NVTX ranges: markers (source nvtx) that hold their step's kernels, and cpu rows
    assert len(mk) == 6 and set(mk["name"].astype(str)) == {"step"} and set(mk["source"].astype(str)) == {"nvtx"}
    assert set(mk["tid"]) == {threading.get_native_id()}
    idx = np.searchsorted(mk["start_ns"].to_numpy(), k["start_ns"].to_numpy(), side="right") - 1
    assert (k["end_ns"].to_numpy() <= mk["end_ns"].to_numpy()[idx]).all()
    cpu = act[act["kind"] == "cpu"]
    assert (cpu["busy_ns"] == cpu["end_ns"] - cpu["start_ns"]).all()  # nothing nested inside the steps


def test_records_are_copied_in_the_callback_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Buffers of 4 records, each handed over on the launching thread as it fills; the fake frees a
    # record's fields when the callback returns, so an agent keeping records would fail here.
    monkeypatch.setattr(ag, "BUFFER_BYTES", 4 * fake_cupti.RECORD_BYTES)
    agent, m = make_agent(tmp_path)
    assert agent.start_recording()
    m._fake.play_steps(5, KERNELS)
    assert m._fake.buffers_delivered >= 5 and agent.callback_records == m._fake.records_delivered
    status = agent.stop_recording()
    assert status["records"]["kernel"] == 10 and status["errors"] == []
    rec = Path(agent.path("rec")).read_bytes()
    assert len(rec) % wire.REC.size == 0 and len(rec) // wire.REC.size == sum(
        v for k, v in status["records"].items() if k not in ("marks", "other"))


def test_periodic_flush_hands_records_over_while_the_target_runs(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path, flush_ns=40_000_000)
    assert agent.start_recording()
    src = source(tmp_path, [])
    m._fake.play_steps(3, KERNELS)
    deadline = time.monotonic() + 5
    rows: dict[str, pd.DataFrame] = {}
    while time.monotonic() < deadline and "activity" not in rows:
        time.sleep(0.05)
        rows = src.sample(time.time_ns())
    assert "activity" in rows and kinds(rows)["kernel"] == 6  # before any stop
    assert 0 in m._fake.flush_flags and agent.flushes >= 1
    agent.stop_recording()
    assert "kernel" not in kinds(src.stop())  # nothing twice


def test_dropped_records_are_counted_and_said_once(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path, "dropped_records")  # CUPTI holds 50 records between flushes
    assert agent.start_recording()
    m._fake.play_steps(20, KERNELS)  # 20 × (2 launches + sync) API + kernel + range records
    status = agent.stop_recording()
    assert status["dropped"]["cupti"] == m._fake.dropped_total > 0
    warnings: list[str] = []
    src = source(tmp_path, warnings)
    src.stop()
    assert len(warnings) == 1 and f"{m._fake.dropped_total:,} kernel-trace records dropped" in warnings[0]
    assert src.manifest()["dropped"]["kernel-trace cupti"] == m._fake.dropped_total


def test_unfinished_kernels_at_a_forced_flush_are_counted_not_written(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path)
    assert agent.start_recording()
    m._fake.launch("long_kernel", 5_000_000_000)  # still running when the agent stops
    agent.stop_recording()
    src = source(tmp_path, [])
    rows = src.stop()
    assert "kernel" not in kinds(rows)
    entry = src.manifest()["collector"]["agents"][0]
    assert entry["invalid"] == 1 and src.manifest()["dropped"]["kernel-trace incomplete records"] == 1


@pytest.mark.parametrize(("scenario", "options", "needle"), [
    ("second_subscriber", {}, "another CUPTI client already holds this process: the PyTorch profiler, nsys or "
                              "another tracer (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)"),
    ("second_subscriber", {"subscriber_error_at": "activity_register_callbacks"}, "ERROR_MULTIPLE_SUBSCRIBERS"),
    ("cupti_missing", {}, "cupti-python is not installed in the target's Python"),
    ("libcupti_missing", {}, "CUPTI could not be loaded (DynamicLibNotFoundError"),
    ("no_driver", {}, "CUPTI could not be loaded (NotSupportedError: CUDA driver is not found (libcuda.so.1"),
    ("driver_mismatch", {}, "probably older than this CUPTI: install the cupti-python that matches the driver's "
                            "CUDA version (CUPTI_ERROR_NOT_INITIALIZED)"),
])
def test_failures_are_one_line_and_the_run_goes_on(tmp_path: Path, scenario: str, options: dict,
                                                   needle: str) -> None:
    agent, m = make_agent(tmp_path, scenario, **options)
    assert agent.start_recording() is False  # no exception into the target
    assert agent.state == "unsupported" and needle in agent.reason
    if m is not None:
        assert m._fake.enabled == set()  # nothing left half-enabled
    on_disk = json.loads(Path(agent.path("status.json")).read_text())
    assert on_disk["state"] == "unsupported" and on_disk["reason"] == agent.reason
    warnings: list[str] = []
    src = source(tmp_path, warnings)
    assert src.sample(time.time_ns()) == {}
    assert src.stop() == {}
    assert warnings == [f"no kernel trace from pid {os.getpid()}: {agent.reason}"]
    man = src.manifest()
    assert [u["metric"] for u in man["unsupported"]] == ["kernel_trace"] and needle in man["unsupported"][0]["reason"]
    assert man["collector"]["agents"][0]["state"] == "unsupported"


def test_nvtx_ranges_need_the_injection_before_the_first_nvtx_call(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path)
    m._fake.nvtx_push("too early")  # NVTX initialises now, without NVTX_INJECTION64_PATH
    m._fake.nvtx_pop()
    assert agent.start_recording()
    assert agent.nvtx["set_by"] == "agent" and os.environ[ag.NVTX_ENV].endswith("libcupti.so.13")
    m._fake.play_steps(2, KERNELS)
    assert agent.stop_recording()["records"]["nvtx"] == 0


def test_nvtx_domains_and_nesting(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path)
    f = m._fake
    assert agent.start_recording()
    f.nvtx_push("forward", domain="model")
    f.nvtx_push("attention")
    f.launch("flash_fwd", 100_000)
    f.synchronize()
    f.nvtx_pop()
    f.nvtx_pop()
    f.nvtx_mark("checkpoint")
    status = agent.stop_recording()
    assert status["records"]["marks"] == 1
    rows = source(tmp_path, []).stop()
    mk = rows["markers"].sort_values("start_ns")
    assert mk["name"].astype(str).tolist() == ["model:forward", "attention"]
    cpu = rows["activity"][rows["activity"]["kind"] == "cpu"].set_index(rows["activity"].loc[
        rows["activity"]["kind"] == "cpu", "function"].astype(str))
    outer, inner = cpu.loc["model:forward"], cpu.loc["attention"]
    assert outer["busy_ns"] == (outer["end_ns"] - outer["start_ns"]) - (inner["end_ns"] - inner["start_ns"])


def test_cupti_clock_is_aligned_to_the_wall_clock(tmp_path: Path) -> None:
    agent, m = make_agent(tmp_path, "clock_offset")  # CUPTI on CLOCK_MONOTONIC: hours away
    assert abs(m._fake.clock_offset_ns) > 10**9
    assert agent.start_recording()
    t0 = time.time_ns()
    m._fake.play_steps(3, KERNELS)
    t1 = time.time_ns()
    agent.stop_recording()
    src = source(tmp_path, [])
    act = src.stop()["activity"]
    k = act[act["kind"] == "kernel"]
    assert (k["launch_ns"] >= t0 - 1_000_000).all() and (k["end_ns"] <= t1 + 1_000_000).all()
    clock = src.manifest()["collector"]["agents"][0]["clock"]
    assert clock["applied"] is True and abs(clock["offset_ns_first"] + m._fake.clock_offset_ns) < 1_000_000


def test_control_socket_attached_mode(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # collect --pid: an idle agent in its well-known directory, started and stopped over its socket
    monkeypatch.setattr(rd, "default_agent_dir", lambda uid=None, root="": root + str(short_dir))
    load, m = fake_cupti.loader()
    agent = ag.Agent(str(short_dir), announced=False, load_cupti=load, handle_signals=False)
    try:
        assert agent.serve() and agent.state == "idle"
        assert m._fake.calls == {}  # idle: CUPTI not even loaded
        warnings: list[str] = []
        src = rd.AgentTraceSource.attach(os.getpid(), warnings.append)
        assert warnings == [] and os.getpid() in src.sockets
        src.start(time.time_ns())
        assert agent.state == "recording"
        m._fake.play_steps(4, KERNELS)
        assert wire.request(agent.path("sock"), "flush")["state"] == "recording"
        rows = src.sample(time.time_ns())
        assert kinds(rows)["kernel"] == 8
        rest = src.stop()
        assert agent.state == "stopped" and "kernel" not in kinds(rest)
        assert wire.request(agent.path("sock"), "bogus")["error"] == "unknown command 'bogus'"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:  # valid JSON, not an object
            peer.connect(agent.path("sock"))
            peer.sendall(b"[1]\n")
            assert json.loads(peer.makefile("rb").readline())["error"] == "unknown command None"
        assert wire.request(agent.path("sock"), "status")["state"] == "stopped"  # still answering
        src.close()
        assert not Path(agent.path("rec")).exists()  # the collector removes what it read
        # a later collector attaches to the same agent and gets only what happened since
        again = rd.AgentTraceSource.attach(os.getpid(), warnings.append)
        again.start(time.time_ns())
        m._fake.play_steps(1, KERNELS)
        assert kinds(again.stop())["kernel"] == 2 and agent.state == "stopped"
        again.close()
    finally:
        agent.close_socket()


def _environment_provides() -> str:
    """"records" where cupti-python is installed and a CUDA driver sees a GPU, else "refuses"."""
    import ctypes
    import importlib.util

    if importlib.util.find_spec("cupti") is None:
        return "refuses"
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "refuses"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "refuses"
    return "records"


ENVIRONMENT = _environment_provides()
_REAL_AGENT = ("import json, tempfile; from perfdiff.collectors.cupti import agent as ag; "
               "a = ag.Agent(tempfile.mkdtemp(), announced=True, handle_signals=False); ok = a.start_recording(); "
               "print(json.dumps({'ok': bool(ok), 'state': a.state, 'reason': a.reason, "
               "'cupti_python': a.status()['cupti_python']})); a.stop_recording()")


def _real_agent() -> dict:
    """The agent with the real cupti-python binding (or its absence), in a fresh interpreter
    with no fake cupti on its path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFDIFF_AGENT") and k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", _REAL_AGENT], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(ENVIRONMENT != "records", reason="needs cupti-python and a CUDA driver that sees a GPU")
def test_real_cupti_records() -> None:
    got = _real_agent()
    assert got["ok"] and got["state"] == "recording", got
    assert got["cupti_python"] != "unknown"


@pytest.mark.skipif(ENVIRONMENT != "refuses", reason="cupti-python and a GPU are here: the agent must record")
def test_real_cupti_refuses_in_one_line() -> None:
    """No cupti-python, no driver or no GPU: the agent refuses, saying why in one line."""
    got = _real_agent()
    assert not got["ok"] and got["state"] == "unsupported", got
    assert got["reason"] and "\n" not in got["reason"]


def test_agent_module_and_shim_import_without_cupti() -> None:
    code = ("import sys; import perfdiff.agent as a; "
            "bad = [m for m in ('numpy', 'pandas', 'pyarrow', 'cupti') if m in sys.modules]; "
            "print(bad, a.status())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("PERFDIFF_AGENT")})
    assert out.stdout.strip() == "[] {}"


# ------------------------------------------------------------------------------ real targets

TARGET = textwrap.dedent('''
    import json, os, signal, sys, threading, time
    from cupti import cupti
    fake = cupti._fake
    mode = sys.argv[1]
    info = {"pid": os.getpid(), "tid": threading.get_native_id()}
    kernels = [("gemm_bf16_128x128", 300_000), ("rms_norm", 60_000)]
    if mode == "steps":
        fake.play_steps(int(sys.argv[2]), kernels, copy_bytes=4096)
        import perfdiff.agent
        info["state"] = perfdiff.agent.status().get("state")
        info["loaded_from_file"] = "_perfdiff_cupti_agent" in sys.modules
    elif mode == "sigterm":
        fake.play_steps(3, kernels)
        open(sys.argv[2], "w").close()
        time.sleep(30)
    elif mode == "fork":
        fake.play_steps(3, kernels)
        child = os.fork()
        if child == 0:
            fake.play_steps(2, [("child_kernel", 50_000)])
            sys.exit(0)  # runs the atexit handlers inherited from the parent
        os.waitpid(child, 0)
        info["child"] = child
        fake.play_steps(2, kernels)
    with open(os.environ["TARGET_INFO"], "w") as fh:
        json.dump(info, fh)
''')


@pytest.fixture
def target(tmp_path: Path) -> Path:
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    return script


def start_target(src: rd.AgentTraceSource, script: Path, args: list[str], tmp_path: Path,
                 scenario: str = "kernels_and_markers", **env_over: str) -> subprocess.Popen:
    pkg = fake_cupti.write_package(tmp_path / "pkg", scenario)
    env = {**os.environ, **src.env(), **env_over}
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(pkg)])
    env["TARGET_INFO"] = str(tmp_path / "info.json")
    return subprocess.Popen([sys.executable, str(script), *args], env=env)


def test_collect_command_mode_end_to_end(target: Path, tmp_path: Path) -> None:
    # the environment `collect -- CMD` gives the command: every Python process starts an agent
    chained = tmp_path / "site"
    chained.mkdir()
    (chained / "sitecustomize.py").write_text(f"open({str(tmp_path / 'chained')!r}, 'w').close()\n")
    warnings: list[str] = []
    src = rd.AgentTraceSource.announce(warnings.append)
    try:
        t0 = time.time_ns()
        src.start(t0)
        proc = start_target(src, target, ["steps", "8"], tmp_path,
                            PYTHONPATH=os.pathsep.join([src.env()["PYTHONPATH"], str(chained)]))
        polled = []
        while proc.poll() is None:
            polled.append(src.sample(time.time_ns()))
            time.sleep(0.05)
        assert proc.returncode == 0
        rows = src.stop()
        info = json.loads((tmp_path / "info.json").read_text())
        assert (tmp_path / "chained").exists()  # the sitecustomize the bootstrap shadows still ran
        assert info["state"] == "recording" and info["loaded_from_file"] is False
        act = pd.concat([r["activity"] for r in [*polled, rows] if "activity" in r], ignore_index=True)
        k = act[act["kind"].astype(str) == "kernel"]
        assert len(k) == 16 and (k["launch_ns"] != MISSING).all() and set(k["tid"]) == {info["tid"]}
        assert (k["start_ns"] >= t0).all()
        mk = pd.concat([r["markers"] for r in [*polled, rows] if "markers" in r])
        assert len(mk) == 8 and set(mk["tid"]) == {info["tid"]}
        man = src.manifest()
        (agent,) = man["collector"]["agents"]
        assert agent["pid"] == info["pid"] and agent["state"] == "stopped" and agent["reason"] == "exit"
        assert agent["nvtx"]["set_by"] == "agent" and warnings == []
    finally:
        src.close()
    assert not Path(src.directory).exists()


def test_bootstrap_loads_the_collectors_file_when_versions_differ(target: Path, tmp_path: Path) -> None:
    src = rd.AgentTraceSource.announce(lambda m: None)
    try:
        proc = start_target(src, target, ["steps", "2"], tmp_path, PERFDIFF_AGENT_WIRE="999")
        assert proc.wait(30) == 0
        info = json.loads((tmp_path / "info.json").read_text())
        assert info["loaded_from_file"] is True and info["state"] == "recording"  # one agent, shared by the shim
        assert kinds(src.stop())["kernel"] == 4
    finally:
        src.close()


@pytest.mark.parametrize("rearm", [True, False])
def test_flush_at_exit_and_forked_child_records_its_own(target: Path, tmp_path: Path, rearm: bool) -> None:
    """A forked child keeps none of the parent's records; under `collect -- CMD` it re-arms and
    hands over its own kernels in its own files ($PERFDIFF_AGENT_FORK=0: it stays inert)."""
    src = rd.AgentTraceSource.announce(lambda m: None)
    try:
        proc = start_target(src, target, ["fork"], tmp_path, **({} if rearm else {"PERFDIFF_AGENT_FORK": "0"}))
        assert proc.wait(30) == 0
        info = json.loads((tmp_path / "info.json").read_text())
        files = sorted(p.name for p in Path(src.directory).iterdir() if p.name != "boot")
        assert any(name.startswith(f"{info['child']}.") for name in files) == rearm
        rows = src.stop()  # the parent exited without flushing: its atexit hook wrote everything
        k = rows["activity"][rows["activity"]["kind"] == "kernel"]
        parent, child = k[k["tid"] == info["tid"]], k[k["tid"] == info["child"]]
        assert len(parent) == 10 and "child_kernel" not in set(parent["function"].astype(str))
        assert len(child) == (2 if rearm else 0) and set(child["function"].astype(str)) <= {"child_kernel"}
        assert len(k) == len(parent) + len(child)
        if rearm:
            (agent,) = [a for a in src.manifest()["collector"]["agents"] if a["pid"] == info["child"]]
            assert agent["state"] == "stopped" and agent["reason"] == "exit"
    finally:
        src.close()


def test_sigterm_flushes_before_the_target_dies(target: Path, tmp_path: Path) -> None:
    src = rd.AgentTraceSource.announce(lambda m: None)
    ready = tmp_path / "ready"
    try:
        proc = start_target(src, target, ["sigterm", str(ready)], tmp_path)
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM  # still dies by the signal
        rows = src._collect(final=True)  # noqa: SLF001 - read without asking the dead agent to stop
        assert kinds(rows)["kernel"] == 6
    finally:
        src.close()


SERVER = textwrap.dedent('''
    import os, sys, time
    import perfdiff.agent
    agent = perfdiff.agent.start()  # idle: waits for `collect --pid`
    from cupti import cupti
    fake = cupti._fake
    with open(sys.argv[1] + ".part", "w") as fh:  # whole or not at all: the test polls for it
        fh.write(agent.state)
    os.replace(sys.argv[1] + ".part", sys.argv[1])
    while not os.path.exists(sys.argv[2]):
        fake.play_steps(1, [("attention", 200_000), ("mlp", 300_000)], step_name="request")
        time.sleep(0.005)
''')


def test_collect_pid_mode_with_an_agent_started_by_the_program(tmp_path: Path) -> None:
    script, ready, done = tmp_path / "server.py", tmp_path / "ready", tmp_path / "done"
    script.write_text(SERVER)
    pkg = fake_cupti.write_package(tmp_path / "pkg")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF_AGENT", "NVTX_"))}
    env["PYTHONPATH"] = str(pkg)
    proc = subprocess.Popen([sys.executable, str(script), str(ready), str(done)], env=env)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.read_text() == "idle"
        warnings: list[str] = []
        src = rd.AgentTraceSource.attach(proc.pid, warnings.append)
        assert warnings == []
        src.start(time.time_ns())
        time.sleep(0.6)
        rows = src.stop()
        assert kinds(rows)["kernel"] >= 4 and (rows["activity"]["launch_ns"] != MISSING).any()
        # the idle agent pointed NVTX at libcupti before the program's first NVTX call
        assert len(rows["markers"]) >= 2 and set(rows["markers"]["name"].astype(str)) == {"request"}
        (agent,) = src.manifest()["collector"]["agents"]
        assert agent["nvtx"]["injection"].endswith("nvidia/cu13/lib/libcupti.so.13") and agent["state"] == "stopped"
        src.close()
    finally:
        done.touch()
        proc.wait(30)
    assert proc.returncode == 0


def test_find_libcupti_follows_the_wheel_then_the_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binding, "loaded_library", lambda fragment, maps="": None)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(binding, "CUDA_ROOTS", ())
    assert binding.find_libcupti() is None
    toolkit = tmp_path / "cuda" / "extras" / "CUPTI" / "lib64" / "libcupti.so.12"
    toolkit.parent.mkdir(parents=True)
    toolkit.touch()
    assert binding.find_libcupti() == str(toolkit)
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
    wheel.parent.mkdir(parents=True)
    wheel.touch()
    assert binding.find_libcupti() == str(wheel)


def test_cupti_missing_in_the_target_and_a_program_without_python(target: Path, tmp_path: Path) -> None:
    warnings: list[str] = []
    src = rd.AgentTraceSource.announce(warnings.append)
    try:
        proc = start_target(src, target, ["steps", "1"], tmp_path, scenario="cupti_missing")
        assert proc.wait(30) != 0  # the target itself needs cupti: it fails, the agent did not
        assert src.stop() == {}
        assert len(warnings) == 1 and "cupti-python is not installed in the target's Python" in warnings[0]
    finally:
        src.close()
    warnings.clear()
    src = rd.AgentTraceSource.announce(warnings.append)
    try:
        env = {**os.environ, **src.env()}
        assert subprocess.run(["/bin/sh", "-c", "exit 0"], env=env).returncode == 0
        assert src.stop() == {}
        assert len(warnings) == 1 and warnings[0].startswith("no perfdiff agent started in the command")
        assert src.manifest()["unsupported"][0]["metric"] == "kernel_trace"
    finally:
        src.close()


# ------------------------------------------------------------------------------ to compare


def _run_bundle(directory: Path, out: Path, slow: float, seed: int) -> Path:
    agent, m = make_agent(directory)
    f = m._fake
    rng = np.random.default_rng(seed)
    assert agent.start_recording()
    t0 = time.time_ns()
    for _ in range(40):
        f.nvtx_push("decode_step")
        f.launch("gemm_bf16_128x128", int(400_000 * slow * rng.lognormal(0, 0.03)))
        f.launch("rms_norm", int(80_000 * rng.lognormal(0, 0.03)))
        f.synchronize()
        f.nvtx_pop()
    agent.stop_recording()
    src = source(directory, [])
    src.start(t0)
    rows = src.stop()
    manifest = base_manifest(run_name=out.name, source={"kind": "collect", "fake_cupti": "kernels_and_markers"},
                             collectors=[src.manifest()["collector"]])
    run = RunData(manifest=manifest, activity=rows["activity"], samples=empty_table("samples"), markers=rows["markers"])
    return write_bundle(out, run)


def test_agent_kernels_reach_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    normal = _run_bundle(tmp_path / "a", tmp_path / "normal", 1.0, 1)
    abnormal = _run_bundle(tmp_path / "b", tmp_path / "abnormal", 1.6, 2)
    loaded = load_bundle(abnormal)
    k = loaded.activity[loaded.activity["kind"] == "kernel"]
    assert len(k) == 80 and (k["launch_ns"] != MISSING).all() and len(loaded.markers) == 40
    js = tmp_path / "r.json"
    code, _, err = run_cli(["compare", normal, abnormal, "-o", tmp_path / "r.md", "--json", js], capsys)
    assert code == 0, err
    rep = json.loads(js.read_text())
    # cycles from the NVTX ranges the agent recorded, one start to the next (40 ranges, 39 cycles);
    # the slowed kernel found, its neighbour not
    assert ((rep["normal"]["cycle_source"], rep["normal"]["n_cycles"], rep["abnormal"]["n_cycles"])
            == ("annotation", 39, 39))
    assert "decode_step" in rep["normal"]["cycle_detail"]
    causes = [f["function"] for f in rep["findings"] if f["code"] == "cause"]
    assert "gemm_bf16_128x128" in causes and "rms_norm" not in causes
    assert "gemm\\_bf16\\_128x128" in (tmp_path / "r.md").read_text()
