"""SGLang: each scheduler loop iteration that ran or finished a batch is a cycle.

``Scheduler.event_loop_normal`` / ``event_loop_overlap`` (``sglang.srt.managers.scheduler``)
never return, so the loop itself cannot be timed per call.  Every ``Scheduler.event_loop_*``
method is wrapped instead (the pipeline-parallel and disaggregation loops too); on entry it
wraps, on that scheduler object, the calls each iteration makes:

* ``recv_requests`` (a Scheduler method up to 0.5.12; from 0.5.13 a method of
  ``Scheduler.request_receiver``, which ``Scheduler.ingest_requests`` calls from 0.5.20)
  begins an iteration: the previous one is closed there, and written as a cycle named
  ``Scheduler.iteration`` when it ran ``run_batch`` or ``process_batch_result`` (idle
  iterations are dropped with their phases); the pipeline-parallel loops receive once per
  micro-batch, so there an iteration is one micro-batch;
* ``get_next_batch_to_run``, ``run_batch``, ``process_batch_result``, ``recv_requests``
  itself and, where the version has them, the disaggregation loops' own
  ``get_next_disagg_prefill_batch_to_run``, ``get_next_disagg_decode_batch_to_run`` and
  ``process_batch_result_disagg_prefill`` are phases (``Scheduler.<name>``).

The iteration's load is the ``ScheduleBatch`` given to ``run_batch`` (``batch_load``).
With tensor, pipeline or data parallelism every rank runs a scheduler: only the rank with
tp_rank, pp_rank and dp_rank 0 writes cycles and loads (the ranks step together); every rank
writes phases.  The ranks are read once per loop (``ranks``).  In the other processes:
``TokenizerManager._handle_batch_output`` (a coroutine from 0.5.11) and
``DetokenizerManager.handle_batch_token_id_out`` are phases.
"""
from __future__ import annotations

import sys
from typing import Any

from .record import Load, Recorder, live_instances

FRAMEWORK = "sglang"
PHASES = ("get_next_batch_to_run", "run_batch", "process_batch_result")
DISAGG_PHASES = ("get_next_disagg_prefill_batch_to_run", "get_next_disagg_decode_batch_to_run",
                 "process_batch_result_disagg_prefill")
RANKS = ("tp_rank", "pp_rank", "dp_rank")
CYCLE = "Scheduler.iteration"
ACTIVE = "_perfdiff_iteration"  # set on a scheduler while its loop runs wrapped


def version() -> str:
    return str(getattr(sys.modules.get("sglang"), "__version__", "unknown"))


def batch_load(batch: Any) -> Load:
    """(requests, tokens, prefill tokens, decode tokens) of an SGLang ``ScheduleBatch``:
    a decode batch computes one token per request; an extend (prefill) batch its
    ``extend_num_tokens``; a mixed batch (a prefill mixed with the running decodes) its
    ``extend_num_tokens``, which count one token for each of its ``decoding_reqs``."""
    reqs = getattr(batch, "reqs", None)
    n = len(reqs) if reqs is not None else None
    mode = getattr(batch, "forward_mode", None)
    if mode is None:
        return (n, None, None, None)
    if _is(mode, "is_idle"):
        return (0, 0, 0, 0)
    if _is(mode, "is_decode"):
        return (n, n, 0, n)
    tokens = getattr(batch, "extend_num_tokens", None)
    tokens = tokens if isinstance(tokens, int) else None
    if _is(mode, "is_mixed"):
        dec = getattr(batch, "decoding_reqs", None)
        d = len(dec) if dec is not None and tokens is not None and len(dec) <= tokens else None
        return (n, tokens, None if d is None else tokens - d, d)
    if _is(mode, "is_extend"):
        return (n, tokens, tokens, 0)
    return (n, None, None, None)


def _is(mode: Any, test: str) -> bool:
    fn = getattr(mode, test, None)
    return bool(fn()) if callable(fn) else False


def ranks(sched: Any) -> tuple[Any, ...]:
    """The scheduler's (tp_rank, pp_rank, dp_rank), None where unknown: attributes of the
    scheduler (up to 0.5.12), of its ``ps`` (0.5.13 to 0.5.20), or of
    ``sglang.srt.runtime_context.get_parallel()`` (from 0.5.16), the first that has any."""
    for source in (sched, getattr(sched, "ps", None), _parallel()):
        if source is None:
            continue
        found = tuple(_attr(source, a) for a in RANKS)
        if any(v is not None for v in found):
            return found
    return (None,) * len(RANKS)


def _parallel() -> Any:
    get = getattr(sys.modules.get("sglang.srt.runtime_context"), "get_parallel", None)
    try:
        return get() if callable(get) else None
    except Exception:  # noqa: BLE001 - not set up in this process
        return None


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - get_parallel() raises for a rank not yet published
        return None


def patch_scheduler(module: Any, rec: Recorder) -> list[str]:
    """Wrap every ``Scheduler.event_loop_*``; the names not found (then nothing)."""
    cls = getattr(module, "Scheduler", None)
    if cls is None:
        return ["Scheduler"]
    loops = [n for n in dir(cls) if n.startswith("event_loop_") and callable(getattr(cls, n, None))]
    missing = [] if {"event_loop_normal", "event_loop_overlap"} & set(loops) else ["Scheduler.event_loop_normal"]
    missing += [f"Scheduler.{p}" for p in PHASES if not callable(getattr(cls, p, None))]
    if missing:
        return missing
    for name in loops:
        rec.patch(FRAMEWORK, cls, name, _loop(rec, getattr(cls, name)))
    if rec.late:
        _wrap_running(rec, cls)
    return []


def _wrap_running(rec: Recorder, cls: type) -> None:
    """Schedulers whose loop runs already (the agent loaded into a running server) never enter
    the wrapped loop: their per-iteration calls are wrapped on them now (the loop looks them up
    at every iteration).  Found once through the garbage collector, as in the vLLM adapter."""
    for obj in live_instances(cls):
        try:
            it = _Iteration.install(rec, obj)
        except Exception as exc:  # noqa: BLE001
            rec.failed(FRAMEWORK, f"SGLang {version()} running scheduler: wrapping its calls failed", exc)
            return
        if it is not None:
            rec.on_undo(FRAMEWORK, it.remove)


def patch_tokenizer(module: Any, rec: Recorder) -> list[str]:
    return _phase(module, rec, "TokenizerManager", "_handle_batch_output")


def patch_detokenizer(module: Any, rec: Recorder) -> list[str]:
    return _phase(module, rec, "DetokenizerManager", "handle_batch_token_id_out")


def _phase(module: Any, rec: Recorder, cls_name: str, meth: str) -> list[str]:
    cls = getattr(module, cls_name, None)
    fn = getattr(cls, meth, None) if cls is not None else None
    if not callable(fn):
        return [f"{cls_name}.{meth}"]
    rec.patch(FRAMEWORK, cls, meth, rec.phase(f"{cls_name}.{meth}", fn, standalone=True))
    return []


def _loop(rec: Recorder, loop: Any) -> Any:
    def event_loop(sched: Any, *args: Any, **kwargs: Any) -> Any:
        it = None
        try:
            it = _Iteration.install(rec, sched)
        except Exception as exc:  # noqa: BLE001
            rec.failed(FRAMEWORK, f"SGLang {version()} scheduler loop: wrapping its calls failed", exc)
        try:
            return loop(sched, *args, **kwargs)
        finally:
            if it is not None:
                it.remove()

    event_loop.__perfdiff_wrapped__ = loop  # type: ignore[attr-defined]
    return event_loop


# Per-iteration wrappers of objects that refuse instance attributes (SGLang's request receiver
# is a frozen, slotted dataclass from 0.5.13): the class gets one dispatching wrapper per
# method, which calls the wrapper registered for that object (by id) or the method itself.
_ON_OBJECT: dict[tuple[int, str], Any] = {}


def _dispatch(rec: Recorder, cls: type, attr: str) -> None:
    """Put the dispatching wrapper of `attr` on `cls` (once; removed with the others on undo)."""
    fn = vars(cls).get(attr)
    if fn is None or getattr(fn, "__perfdiff_dispatch__", False):
        return
    table = _ON_OBJECT

    def dispatch(obj: Any, *args: Any, **kwargs: Any) -> Any:
        wrapper = table.get((id(obj), attr))
        if wrapper is None:
            return fn(obj, *args, **kwargs)
        return wrapper(*args, **kwargs)

    dispatch.__perfdiff_wrapped__ = fn  # type: ignore[attr-defined]
    dispatch.__perfdiff_dispatch__ = True  # type: ignore[attr-defined]
    dispatch.__name__ = getattr(fn, "__name__", attr)
    rec.patch(FRAMEWORK, cls, attr, dispatch)


def _method(obj: Any, attr: str) -> Any:
    """`obj.attr`, bound to the method under a dispatching wrapper where its class has one
    (a second loop on the same receiver class must not call the dispatcher from its wrapper)."""
    fn = getattr(type(obj), attr, None)
    if getattr(fn, "__perfdiff_dispatch__", False):
        return fn.__perfdiff_wrapped__.__get__(obj, type(obj))
    return getattr(obj, attr, None)


class _Iteration:
    """The open iteration of one scheduler's loop, and the wrappers on that scheduler."""

    def __init__(self, rec: Recorder, primary: bool):
        self.rec = rec
        self.primary = primary
        self.t0 = 0
        self.worked = False
        self.name = rec.name(CYCLE)
        self.undo: list[tuple[Any, str, bool]] = []

    @classmethod
    def install(cls, rec: Recorder, sched: Any) -> _Iteration | None:
        """Wrap the per-iteration calls on `sched` (None: nothing to do, or a version without
        them, said once).  Where an iteration begins, by version: ``Scheduler.ingest_requests``
        (0.5.20 on), else ``Scheduler.recv_requests`` (up to 0.5.12), else
        ``Scheduler.request_receiver.recv_requests`` (0.5.13 to 0.5.19)."""
        if vars(sched).get(ACTIVE) is not None:
            return None  # an event loop entered from another one: the outer loop's wrappers serve
        receiver = getattr(sched, "request_receiver", None)
        owner = sched if callable(getattr(sched, "recv_requests", None)) else receiver
        ingest = getattr(sched, "ingest_requests", None)
        if not callable(ingest) and not callable(getattr(owner, "recv_requests", None)):
            rec.give_up(FRAMEWORK, f"SGLang {version()}", ["Scheduler.ingest_requests (or recv_requests, or "
                                                          "request_receiver.recv_requests)"])
            return None
        primary = all(r in (0, None) for r in ranks(sched))
        it = cls(rec, primary)
        try:
            it._set(sched, ACTIVE, it)
            recv = _method(owner, "recv_requests")
            if callable(ingest):
                it._set(sched, "ingest_requests", it.receiving(rec.phase("Scheduler.ingest_requests", ingest)))
                if callable(recv):
                    it._set(owner, "recv_requests", rec.phase("Scheduler.recv_requests", recv))
            else:
                it._set(owner, "recv_requests", it.receiving(rec.phase("Scheduler.recv_requests", recv)))
            it._set(sched, "get_next_batch_to_run", rec.phase("Scheduler.get_next_batch_to_run",
                                                              sched.get_next_batch_to_run))
            it._set(sched, "run_batch", rec.phase("Scheduler.run_batch", sched.run_batch, before=it.ran))
            it._set(sched, "process_batch_result", rec.phase("Scheduler.process_batch_result",
                                                             sched.process_batch_result, before=it.processed))
            for name in DISAGG_PHASES:
                fn = getattr(sched, name, None)
                if callable(fn):
                    it._set(sched, name, rec.phase(f"Scheduler.{name}", fn,
                                                   before=it.processed if name.startswith("process") else None))
        except BaseException:
            it.remove()
            raise
        return it

    def _set(self, owner: Any, attr: str, fn: Any) -> None:
        """`owner.attr = fn` for this loop; an object that refuses it (frozen, slotted) gets `fn`
        through its class's dispatching wrapper."""
        try:
            setattr(owner, attr, fn)
        except (AttributeError, TypeError):  # dataclasses.FrozenInstanceError is an AttributeError
            _dispatch(self.rec, type(owner), attr)
            _ON_OBJECT[(id(owner), attr)] = fn
            self.undo.append((owner, attr, True))
            return
        self.undo.append((owner, attr, False))

    def remove(self) -> None:
        """The loop ended: drop the open iteration, take the wrappers off the scheduler."""
        self.rec.close_cycle(self.t0, self.name, keep=False)
        for owner, attr, dispatched in reversed(self.undo):
            if dispatched:
                _ON_OBJECT.pop((id(owner), attr), None)
                continue
            try:
                delattr(owner, attr)
            except AttributeError:
                pass
        self.undo = []

    # `before` hooks of phases: run only while recording; record.phase keeps their exceptions

    def receiving(self, recv: Any) -> Any:
        """`recv` (the timed recv_requests) preceded by the iteration boundary."""
        def recv_requests(*args: Any, **kwargs: Any) -> Any:
            try:
                self.boundary()
            except Exception as exc:  # noqa: BLE001
                self.rec.fault("iteration boundary", exc)
            return recv(*args, **kwargs)

        recv_requests.__perfdiff_wrapped__ = recv  # type: ignore[attr-defined]
        return recv_requests

    def boundary(self) -> None:
        """Close the previous iteration (a cycle if it did work), open the next one."""
        if self.t0:
            self.rec.close_cycle(self.t0, self.name, primary=self.primary, keep=self.worked)
        self.t0 = self.rec.open_cycle()
        self.worked = False

    def ran(self, batch: Any = None, *args: Any, **kwargs: Any) -> None:
        self.worked = True
        self.rec.set_load(batch_load(batch))

    def processed(self, *args: Any, **kwargs: Any) -> None:
        self.worked = True
