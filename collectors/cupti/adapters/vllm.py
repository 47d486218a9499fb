"""vLLM V1: each engine step is a cycle, its scheduler and executor calls are phases.

Wrapped (docs/PROFILING_LLM_SERVERS.md lists the versions read and what differs between them):

* ``vllm.v1.engine.core.EngineCore.step`` and ``step_with_batch_queue`` (the busy loop of the
  engine-core process calls ``step`` itself, or the one of them it bound as ``step_fn``):
  one cycle per call, named after it; a call in which nothing was scheduled (no requests, an
  idle data-parallel rank) is no cycle.
  On its first recorded call on an engine the phases are wrapped on that engine's own objects
  (whatever scheduler and executor classes the configuration chose):
  ``Scheduler.schedule``, ``Scheduler.update_from_output``, ``Executor.execute_model`` and,
  where the version has it, ``Executor.sample_tokens``.  A non-blocking executor returns a
  Future: the time its ``result()`` blocks is the phase ``Executor.execute_model (wait)``
  (``… sample_tokens (wait)``), where the engine waits for the GPU workers.
* ``vllm.v1.engine.output_processor.OutputProcessor.process_outputs`` or, in the versions
  before it existed, ``vllm.v1.engine.detokenizer.Detokenizer.step``: the API server's output
  processing and detokenisation, a phase of that process.

The step's load comes from the ``SchedulerOutput`` that ``schedule`` returned in it
(``scheduler_load``).  With data parallelism only rank 0's engine writes cycles and loads
(ranks step concurrently; overlapping cycles cannot be compared); every rank writes phases.
"""
from __future__ import annotations

import sys
from concurrent.futures import Future
from typing import Any

from .record import Load, Recorder, live_instances

FRAMEWORK = "vllm"


def version() -> str:
    return str(getattr(sys.modules.get("vllm"), "__version__", "unknown"))


def scheduler_load(out: Any) -> Load:
    """(requests, tokens, prefill tokens, decode tokens) of a vLLM ``SchedulerOutput``.

    A request is decoding when it is not new and was scheduled at most 1 + its speculative
    tokens; every other scheduled token is prefill (a new request, or a chunk of a long
    prompt).  Without speculative tokens the split is counted in C (decode requests are the
    entries equal to 1), not in a Python loop over the requests.
    """
    per_req = getattr(out, "num_scheduled_tokens", None)
    total = getattr(out, "total_num_scheduled_tokens", None)
    if not isinstance(per_req, dict):
        return (None, total, None, None)
    tokens = total if isinstance(total, int) else sum(per_req.values())
    spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
    new_ids = [getattr(r, "req_id", None) for r in (getattr(out, "scheduled_new_reqs", None) or ())]
    if spec:
        decode = 0
        new = set(new_ids)
        for rid, n in per_req.items():
            if rid not in new and n <= 1 + len(spec.get(rid, ())):
                decode += n
    else:
        decode = list(per_req.values()).count(1) - sum(1 for rid in new_ids if per_req.get(rid) == 1)
    return (len(per_req), tokens, tokens - decode, decode)


def patch_core(module: Any, rec: Recorder) -> list[str]:
    """Wrap ``EngineCore.step`` / ``step_with_batch_queue``; the names not found (then nothing)."""
    cls = getattr(module, "EngineCore", None)
    if cls is None or not callable(getattr(cls, "step", None)):
        return ["EngineCore.step"]
    wrappers = {}
    for meth in ("step", "step_with_batch_queue"):
        fn = vars(cls).get(meth)
        if callable(fn):
            wrappers[fn] = rec.cycle(f"EngineCore.{meth}", fn, primary=_primary, setup=lambda engine: _setup(rec, engine),
                                     drop_empty=True)
            rec.patch(FRAMEWORK, cls, meth, wrappers[fn])
    if rec.late:
        _rebind_running(rec, cls, wrappers)
    return []


def _rebind_running(rec: Recorder, cls: type, wrappers: dict[Any, Any]) -> None:
    """Engines that exist already (the agent loaded into a running server) bound ``step_fn``
    to the unwrapped method at construction: bind it to the wrapper.  The instances are found
    once through the garbage collector (instances of heap classes refer to their class)."""
    import types

    for obj in live_instances(cls):
        bound = vars(obj).get("step_fn")
        fn = getattr(bound, "__func__", None)
        if fn in wrappers and getattr(bound, "__self__", None) is obj:
            rec.patch(FRAMEWORK, obj, "step_fn", types.MethodType(wrappers[fn], obj))


def patch_output(module: Any, rec: Recorder) -> list[str]:
    """Wrap ``OutputProcessor.process_outputs`` (API server process)."""
    cls = getattr(module, "OutputProcessor", None)
    fn = vars(cls).get("process_outputs") if cls is not None else None
    if not callable(fn):
        return ["OutputProcessor.process_outputs"]
    rec.patch(FRAMEWORK, cls, "process_outputs", rec.phase("OutputProcessor.process_outputs", fn, standalone=True))
    return []


def patch_detokenizer(module: Any, rec: Recorder) -> list[str]:
    """Wrap ``Detokenizer.step`` (API server process) where the version has it; later versions
    keep only helpers in this module and process outputs in ``OutputProcessor`` (nothing
    missing then)."""
    cls = getattr(module, "Detokenizer", None)
    fn = vars(cls).get("step") if isinstance(cls, type) else None
    if callable(fn):
        rec.patch(FRAMEWORK, cls, "step", rec.phase("Detokenizer.step", fn, standalone=True))
    return []


def _primary(engine: Any) -> bool:
    """Whether this engine is data-parallel rank 0: its ``vllm_config`` (kept on the engine
    from 0.9) or its executor's ``parallel_config`` (every version) says."""
    cfg = (getattr(getattr(engine, "vllm_config", None), "parallel_config", None)
           or getattr(getattr(engine, "model_executor", None), "parallel_config", None))
    return getattr(cfg, "data_parallel_rank", 0) in (0, None)


def _setup(rec: Recorder, engine: Any) -> bool:
    """Wrap the phases on this engine's scheduler and executor; False (and the vLLM wrappers
    removed, one warning) when this version lacks them."""
    sched = getattr(engine, "scheduler", None)
    ex = getattr(engine, "model_executor", None)
    missing = [f"EngineCore.scheduler.{m}" for m in ("schedule", "update_from_output")
               if not callable(getattr(sched, m, None))]
    if not callable(getattr(ex, "execute_model", None)):
        missing.append("EngineCore.model_executor.execute_model")
    if missing:
        rec.give_up(FRAMEWORK, f"vLLM {version()}", missing)
        return False
    rec.patch(FRAMEWORK, sched, "schedule",
              rec.phase("Scheduler.schedule", sched.schedule, on_result=lambda out: rec.set_load(scheduler_load(out))))
    rec.patch(FRAMEWORK, sched, "update_from_output", rec.phase("Scheduler.update_from_output", sched.update_from_output))
    for meth in ("execute_model", "sample_tokens"):
        fn = getattr(ex, meth, None)
        if callable(fn):
            rec.patch(FRAMEWORK, ex, meth, rec.phase(f"Executor.{meth}", fn, on_result=_waiter(rec, f"Executor.{meth} (wait)")))
    return True


def _waiter(rec: Recorder, name: str) -> Any:
    """on_result: a Future returned by a non-blocking call gets its ``result()`` timed as `name`."""
    nb = rec.name(name)
    enter, leave, tls = rec.enter, rec.leave, rec.tls

    def wrap_future(fut: Any) -> None:
        if not isinstance(fut, Future) or "result" in vars(fut):
            return
        result = fut.result

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = enter() if tls.buf is not None else 0
            if not t0:
                return result(*args, **kwargs)
            try:
                value = result(*args, **kwargs)
            except BaseException:
                leave(nb, t0)
                raise
            leave(nb, t0)
            return value

        fut.result = timed  # type: ignore[method-assign]
    return wrap_future
