"""PyTorch training: each optimizer step (or profiler step) ends a cycle.

* ``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``…_post_hook`` (PyTorch 2.0
  and later; global hooks every optimizer's ``step`` calls): the time between them is the
  phase ``Optimizer.step``, and each post hook ends the cycle ``Optimizer.step`` that the
  previous one began (one training iteration: forward, backward, step).  The first step
  only begins a cycle.
* ``torch.profiler.profile.step``: where a profiler runs, its steps are the cycle boundaries
  instead (cycle ``profiler.step``); optimizer steps then stay phases only.  No hook on the
  profiler changes what it records.

In a distributed job (``RANK`` set by torchrun) only rank 0 writes cycles; every rank writes
its ``Optimizer.step`` phases.

In a process of an inference server the server's adapter is in charge of the cycles: where
the vLLM or SGLang adapter wrapped something in this process, or the process is one of their
GPU workers (``vllm.v1.worker`` or ``sglang.srt.managers.tp_worker`` imported), PyTorch's
boundaries write no cycles (``import torch`` loads torch.optim and torch.profiler in every
such process, and vLLM's own torch profiler steps would otherwise be cycles beside the
engine's steps); the status says ``defers_to``.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from .record import Recorder

FRAMEWORK = "pytorch"
SERVERS = ("vllm", "sglang")  # adapters that own the cycles of their processes
WORKER_MODULES = {"vllm.v1.worker": "vllm", "sglang.srt.managers.tp_worker": "sglang"}


def serving(rec: Recorder) -> str | None:
    """The inference server in charge of this process's cycles, if any (see the docstring)."""
    for fw in SERVERS:
        if rec.frameworks.get(fw, {}).get("state") == "wrapped":
            return fw
    for module, fw in WORKER_MODULES.items():
        if module in sys.modules:
            return fw
    return None


class _Training:
    """Per-process state: the open cycle and which boundary source is in charge."""

    def __init__(self, rec: Recorder):
        self.rec = rec
        self.primary = os.environ.get("RANK", "0") == "0"
        self.profiler_seen = False
        self.t0 = 0
        self.step_name = rec.name("Optimizer.step")
        self.prof_name = rec.name("profiler.step")

    def boundary(self, name: bytes) -> None:
        server = serving(self.rec)
        if server is not None:
            if self.t0:
                self.rec.close_cycle(self.t0, name, keep=False)
                self.t0 = 0
            state = self.rec.frameworks.get(FRAMEWORK)
            if state is not None and state.get("defers_to") != server:
                state["defers_to"] = server
            return
        if self.t0:
            self.rec.close_cycle(self.t0, name, primary=self.primary)
        self.t0 = self.rec.open_cycle()

    def pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self.rec.tls.step_t0 = self.rec.enter()
        except Exception as exc:  # noqa: BLE001
            self.rec.fault("optimizer pre hook", exc)

    def post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            t0 = self.rec.tls.__dict__.pop("step_t0", 0)
            if t0:
                self.rec.leave(self.step_name, t0)
            if not self.profiler_seen:
                self.boundary(self.step_name)
        except Exception as exc:  # noqa: BLE001
            self.rec.fault("optimizer post hook", exc)


_STATE: dict[int, _Training] = {}


def _training(rec: Recorder) -> _Training:
    st = _STATE.get(id(rec))
    if st is None:
        st = _STATE[id(rec)] = _Training(rec)
    return st


def patch_optimizer(module: Any, rec: Recorder) -> list[str]:
    """Register the global optimizer step hooks; the names not found (then nothing)."""
    pre = getattr(module, "register_optimizer_step_pre_hook", None)
    post = getattr(module, "register_optimizer_step_post_hook", None)
    if not (callable(pre) and callable(post)):
        return ["torch.optim.optimizer.register_optimizer_step_pre_hook / register_optimizer_step_post_hook"]
    st = _training(rec)
    for handle in (pre(st.pre), post(st.post)):
        remove = getattr(handle, "remove", None)
        if callable(remove):
            rec.on_undo(FRAMEWORK, remove)
    state = rec.frameworks.setdefault(FRAMEWORK, {"state": "wrapped", "wrapped": []})
    state["state"] = "wrapped"
    if "optimizer step hooks" not in state["wrapped"]:
        state["wrapped"].append("optimizer step hooks")
    return []


def patch_profiler(module: Any, rec: Recorder) -> list[str]:
    """Wrap ``torch.profiler.profile.step``; the names not found (then nothing)."""
    cls = getattr(module, "profile", None)
    fn = getattr(cls, "step", None) if cls is not None else None
    if not callable(fn):
        return ["torch.profiler.profile.step"]
    st = _training(rec)

    def step(prof: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(prof, *args, **kwargs)
        try:
            if not st.profiler_seen:
                st.profiler_seen = True
                if st.t0:
                    rec.close_cycle(st.t0, st.step_name, keep=False)  # an optimizer-bounded cycle is open
                st.t0 = 0
            st.boundary(st.prof_name)
        except Exception as exc:  # noqa: BLE001
            rec.fault("profiler step", exc)
        return result

    step.__perfdiff_wrapped__ = fn  # type: ignore[attr-defined]
    rec.patch(FRAMEWORK, cls, "step", step)
    return []
