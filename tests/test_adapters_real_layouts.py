"""The adapters on the layouts of the released vLLM, SGLang and PyTorch (tests/fakes/frameworks
follows them): SGLang's frozen request receiver, heaps frozen by the frameworks, the PyTorch
adapter beside a server's adapter, and an adapter whose install fails."""
from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from perfdiff import marker
from perfdiff.collectors.cupti.adapters import record, sglang
from test_adapters import (FRAMEWORKS, SGLANG_ENV, VLLM_ENV, agent_warnings, expected_vllm_steps, phases,
                           run_under_agent)


def fake_marker() -> types.SimpleNamespace:
    return types.SimpleNamespace(active=lambda: True, emit=lambda data: True, encode_name=marker.encode_name,
                                 cycle_line=marker.cycle_line, range_line=marker.range_line,
                                 load_line=marker.load_line)


def test_sglang_0_5_23_layout_frozen_receiver_and_ingest_requests(tmp_path: Path) -> None:
    """0.5.20 on: the loop calls Scheduler.ingest_requests, which calls the frozen receiver's
    recv_requests; both are phases, iterations are cycles, no warning, and the scheduler's heap
    was frozen by the warm-up's /freeze_gc on the way."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_sglang.py")], FAKE_SGLANG_VERSION="0.5.23",
                                  **SGLANG_ENV)
    assert agent_warnings(err) == [], err
    p = phases(tables)
    n = len(tables["markers"]["name"])
    assert n == p["Scheduler.run_batch"] >= 6
    assert p["Scheduler.ingest_requests"] >= n and p["Scheduler.recv_requests"] == p["Scheduler.ingest_requests"]


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> Any:
    """tests/fakes/frameworks importable in this process, its modules forgotten afterwards."""
    monkeypatch.syspath_prepend(str(FRAMEWORKS))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("sglang", "vllm", "torch")]:
        del sys.modules[name]


def test_sglang_frozen_receiver_gets_a_dispatching_wrapper(stand_ins: Any) -> None:
    """Setting an attribute on the receiver raises (as SGLang's dataclass does); its class gets
    one wrapper that serves only the receivers registered, and undo puts the method back."""
    from sglang.srt.managers.scheduler_components.request_receiver import SchedulerRequestReceiver

    calls: list[str] = []
    mine = SchedulerRequestReceiver(recv_from_tokenizer=lambda: calls.append("mine") or [], recv_from_rpc=None,
                                    max_recv_per_poll=-1, get_last_batch=lambda: None)
    other = SchedulerRequestReceiver(recv_from_tokenizer=lambda: calls.append("other") or [], recv_from_rpc=None,
                                     max_recv_per_poll=-1, get_last_batch=lambda: None)
    try:
        mine.recv_requests = None  # type: ignore[misc]
        raise AssertionError("the stand-in's receiver must refuse attributes, as SGLang's does")
    except (dataclasses.FrozenInstanceError, AttributeError, TypeError):
        pass
    original = vars(SchedulerRequestReceiver)["recv_requests"]
    rec = record.Recorder(fake_marker(), warn_out=lambda line: None)
    it = sglang._Iteration(rec, True)  # noqa: SLF001
    it._set(mine, "recv_requests", lambda *a, **k: calls.append("wrapped") or [])  # noqa: SLF001
    mine.recv_requests()
    other.recv_requests()
    assert calls == ["wrapped", "other"]
    it.remove()
    mine.recv_requests()
    assert calls[-1] == "mine"
    rec.undo()
    assert vars(SchedulerRequestReceiver)["recv_requests"] is original


def test_failed_install_is_one_warning_and_never_wrapped() -> None:
    """A scheduler whose per-iteration calls cannot be wrapped: one warning line, the state
    'failed' with the reason in the status, no wrapper left, the loop runs unchanged."""
    class Locked:
        def __setattr__(self, name: str, value: Any) -> None:
            raise RuntimeError("locked")

    class Scheduler(Locked):
        def event_loop_normal(self) -> str:
            return "ran"

        def recv_requests(self) -> list:
            return []

        def get_next_batch_to_run(self) -> None:
            return None

        def run_batch(self, batch: Any) -> None:
            return None

        def process_batch_result(self, batch: Any, result: Any) -> None:
            return None

    lines: list[str] = []
    rec = record.Recorder(fake_marker(), warn_out=lines.append)
    module = types.SimpleNamespace(Scheduler=Scheduler)
    assert sglang.patch_scheduler(module, rec) == []
    assert Scheduler().event_loop_normal() == "ran"
    st = rec.status()["frameworks"]["sglang"]
    assert st["state"] == "failed" and "RuntimeError: locked" in st["error"], st
    assert len(lines) == 1 and "left unwrapped" in lines[0] and "\n" not in lines[0]
    assert not hasattr(Scheduler.event_loop_normal, record.WRAPPED)  # removed again
    rec.patch("sglang", types.SimpleNamespace(), "x", 1)  # a later wrapper does not say "wrapped" again
    assert rec.status()["frameworks"]["sglang"]["state"] == "failed"


FROZEN = """
import gc, threading, time
from vllm.v1.engine.core import EngineCore
engine = EngineCore()
assert gc.get_freeze_count() > 0 and engine not in gc.get_referrers(EngineCore)  # the heap is frozen
from perfdiff.collectors.cupti.adapters.record import live_instances
def loop(core):
    while not stop:
        time.sleep(0.001)
stop = False
t = threading.Thread(target=loop, args=(EngineCore(),))
t.start()
found = live_instances(EngineCore)
stop = True
t.join()
print(len(found), any(o is engine for o in found))
"""


def test_live_instances_finds_engines_in_a_frozen_heap(tmp_path: Path) -> None:
    """vLLM 0.11.1 on freezes the heap in EngineCore.__init__: the engines are found from the
    modules' globals and the threads' frame locals."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "FAKE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(FRAMEWORKS), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", FROZEN], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "True"], out.stderr


WORKER = """
import torch
import vllm.v1.worker.gpu_worker  # a vLLM GPU worker process
prof = torch.profiler.profile()
opt = torch.optim.SGD([torch.zeros(2)], lr=0.1)
for _ in range(6):
    opt.step()
    prof.step()
"""


def test_pytorch_defers_in_a_vllm_worker(tmp_path: Path) -> None:
    """A vLLM worker steps vLLM's torch profiler: no profiler.step cycles beside the engine's."""
    tables, err = run_under_agent(tmp_path, ["-c", WORKER])
    assert agent_warnings(err) == [], err
    assert "markers" not in tables
    assert phases(tables) == {"Optimizer.step": 6}  # its phases stay


def test_pytorch_defers_to_the_engine_in_its_process(tmp_path: Path) -> None:
    """vLLM's torch profiler stepped inside the engine's step (an in-process worker): the
    engine's steps stay the only cycles, every one of them."""
    tables, err = run_under_agent(tmp_path, [str(FRAMEWORKS / "serve_vllm.py"), "6"],
                                  VLLM_TORCH_PROFILER_DIR=str(tmp_path / "prof"), **VLLM_ENV)
    assert agent_warnings(err) == [], err
    assert tables["markers"]["name"] == ["EngineCore.step"] * len(expected_vllm_steps())


def test_status_of_a_deferring_pytorch_adapter(tmp_path: Path) -> None:
    code = WORKER + ("\nfrom perfdiff.collectors.cupti import adapters\nimport json\n"
                     "print(json.dumps(adapters.status()['frameworks']['pytorch']))\n")
    env_out = tmp_path / "o"
    env_out.mkdir()
    _, err = run_under_agent(env_out, ["-c", code + "import sys; sys.stderr.write('STATUS' + json.dumps("
                                       "adapters.status()['frameworks']['pytorch']) + '\\n')\n"])
    line = next(x for x in err.splitlines() if x.startswith("STATUS"))
    assert json.loads(line[len("STATUS"):])["defers_to"] == "vllm"


def test_a_failed_adapter_is_a_warning_of_the_collection(tmp_path: Path) -> None:
    """The agent's status says an adapter failed: the collector warns once (the bundle's
    warnings) and the manifest keeps the adapter's state."""
    from perfdiff.collectors.cupti import reader as rd

    status = {"state": "recording", "anchors": [], "adapters": {"frameworks": {"sglang": {
        "state": "failed", "error": "SGLang 0.5.23 scheduler loop: wrapping its calls failed: TypeError: x",
        "wrapped": []}}}}
    (tmp_path / "4242.status.json").write_text(json.dumps(status))
    warnings: list[str] = []
    src = rd.AgentTraceSource(str(tmp_path), announced=True, warn=warnings.append)
    src.sample(1)
    src.sample(2)
    assert warnings == ["sglang adapter failed in pid 4242: SGLang 0.5.23 scheduler loop: wrapping its calls "
                        "failed: TypeError: x; no steps from it"]
    (agent,) = src.manifest()["collector"]["agents"]
    assert agent["adapters"]["frameworks"]["sglang"]["state"] == "failed"
