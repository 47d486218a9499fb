"""What the framework adapters record, and how: phases, cycles and step loads as marks-file records.

A ``Recorder`` times wrapped framework functions and writes through the marker transport
(perfdiff.marker: ``range_line``, ``cycle_line``, ``load_line``, ``emit``).  While a cycle is
open on a thread its phases are buffered and written with the cycle's own record in one
``write`` when it closes; a phase outside any cycle (an API server's output processing) is
written at once.  With no collector listening a step costs a clock read and a comparison, a phase an
attribute read.

Two rules hold for every wrapper made here:

* the framework's own exceptions propagate unchanged (the wrapped call is never inside our
  ``try``), and its return value is returned as it is;
* an exception in perfdiff's own code is swallowed and counted (``errors``), never raised into
  the target.

Standard library only (this runs inside the target, loaded by path where perfdiff is not
importable).  Times are CLOCK_REALTIME ns.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import zlib
from typing import Any, Callable

_time_ns = time.time_ns
_native_id = threading.get_native_id

CO_COROUTINE = 0x80  # code flag of an `async def` (inspect.CO_COROUTINE)
MAX_ERRORS = 20  # error texts kept in the status
MAX_PHASES = 10_000  # phases one cycle keeps (a cycle never closed must not grow without bound)

Load = tuple  # (requests, tokens, prefill tokens, decode tokens); None where unknown
WRAPPED = "__perfdiff_wrapped__"  # attribute of a wrapper: the function it wraps


class _Thread(threading.local):
    """Per-thread state; class attributes are the defaults each thread starts with."""

    buf: list | None = None  # the open cycle's phases, (start, end, own ns, name) each
    load: Load | None = None  # the open cycle's load
    stack: list[int] | None = None  # ns of nested phases, per phase open on this thread
    tid = 0


class Recorder:
    """Phases and cycles of the frameworks in this process, written through `marker`.

    `marker` is the perfdiff.marker module (or its copy loaded by path); `warn_out` takes the
    one-line warnings (stderr).  ``patch`` / ``undo`` replace attributes and put them back.
    """

    def __init__(self, marker: Any, warn_out: Callable[[str], None] | None = None):
        self.marker = marker
        self._active = marker.active
        self._emit = marker.emit
        self._range = marker.range_line
        self.tls = _Thread()
        self.enabled = True
        self.late = False  # adapting modules imported before the adapters were installed (an attach)
        self.errors = 0
        self.error_texts: list[str] = []
        self.warnings: list[str] = []
        self.steps = 0  # cycles written
        self.frameworks: dict[str, dict[str, Any]] = {}  # name → state, version, wrapped, missing
        self._names: dict[str, bytes] = {}
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._warn_out = warn_out or _stderr

    # ------------------------------------------------------------------ bookkeeping

    def name(self, text: str) -> bytes:
        """`text` as stored in a record (cached)."""
        b = self._names.get(text)
        if b is None:
            b = self._names[text] = self.marker.encode_name(text)
        return b

    def fault(self, where: str, exc: BaseException) -> None:
        """Count an exception of perfdiff's own code (never raised into the target)."""
        self.errors += 1
        if len(self.error_texts) < MAX_ERRORS:
            self.error_texts.append(f"{where}: {type(exc).__name__}: {exc}")

    def warn(self, line: str) -> None:
        """One warning line (each text once per process)."""
        if line in self.warnings:
            return
        self.warnings.append(line)
        try:
            if _said_by_another_process(line):
                return
            self._warn_out(f"perfdiff agent: {line}")
        except Exception as exc:  # noqa: BLE001 - a closed stderr must not break the target
            self.fault("warn", exc)

    def patch(self, framework: str, owner: Any, attr: str, new: Any) -> None:
        """Set `owner.attr` to `new`, remembering how to put the old one back (``undo``)."""
        own = vars(owner) if hasattr(owner, "__dict__") else {}
        had, old = attr in own, own.get(attr)
        setattr(owner, attr, new)

        def restore() -> None:
            if had:
                setattr(owner, attr, old)
            else:
                try:
                    delattr(owner, attr)
                except AttributeError:
                    pass

        self._undo.append((framework, restore))
        state = self.frameworks.setdefault(framework, {"state": "wrapped", "wrapped": []})
        if state.get("state") != "failed":  # a failure stays said until the process ends
            state["state"] = "wrapped"  # again after an uninstall (a second attach)
        name = f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
        if name not in state["wrapped"]:
            state["wrapped"].append(name)

    def on_undo(self, framework: str, fn: Callable[[], None]) -> None:
        """Call `fn` when `framework`'s wrappers are removed (a hook handle's ``remove``)."""
        self._undo.append((framework, fn))

    def undo(self, framework: str | None = None) -> int:
        """Remove the wrappers of `framework` (None: all), newest first; how many were removed."""
        keep, done = [], 0
        for fw, fn in reversed(self._undo):
            if framework is not None and fw != framework:
                keep.append((fw, fn))
                continue
            try:
                fn()
                done += 1
            except Exception as exc:  # noqa: BLE001
                self.fault("undo", exc)
        self._undo = list(reversed(keep))
        for fw, state in self.frameworks.items():
            if framework is None or fw == framework:
                state["state"] = "removed" if state.get("state") == "wrapped" else state.get("state")
        return done

    def give_up(self, framework: str, what: str, missing: list[str], undo: bool = True) -> None:
        """An unknown version: say once what was not found and, with `undo`, remove all of
        `framework`'s wrappers in this process.  Without `undo` only the part named by `what`
        stays unwrapped (an adapter that found its names missing patched nothing), and the
        framework's other parts in this process keep their wrappers."""
        if undo:
            self.undo(framework)
        state = self.frameworks.setdefault(framework, {"wrapped": []})
        state["missing"] = [*state.get("missing", []), *(m for m in missing if m not in state.get("missing", []))]
        if undo or state.get("state") != "wrapped":
            state["state"] = "unsupported"
        self.warn(f"{what}: not found: {', '.join(missing)}; left unwrapped (an unsupported version? "
                  "docs/PROFILING_LLM_SERVERS.md lists the supported ones)")

    def failed(self, framework: str, what: str, exc: BaseException) -> None:
        """Installing `framework`'s wrappers raised (a version whose objects refuse them): count
        it, say so in one warning line, remove the framework's wrappers in this process and keep
        the state "failed" with the reason (the agent's status, the bundle's manifest), never
        "wrapped"."""
        self.fault(what, exc)
        reason = f"{what}: {type(exc).__name__}: {exc}"
        self.undo(framework)
        state = self.frameworks.setdefault(framework, {"wrapped": []})
        state["state"] = "failed"
        state["error"] = reason
        self.warn(f"{reason}; left unwrapped, no cycles from it (docs/PROFILING_LLM_SERVERS.md lists the "
                  "supported versions)")

    def status(self) -> dict[str, Any]:
        """What the adapters did, for the agent's status."""
        return {"frameworks": {k: dict(v) for k, v in self.frameworks.items()}, "steps": self.steps,
                "errors": self.errors, "error_texts": list(self.error_texts), "warnings": list(self.warnings)}

    # ------------------------------------------------------------------ phases

    def enter(self) -> int:
        """Start timing a phase on this thread; its start ns, or 0 when nothing is recorded."""
        try:
            tls = self.tls
            if not self.enabled or (tls.buf is None and not self._active()):
                return 0  # inside an open cycle the listener was checked when it opened
            stack = tls.stack
            if stack is None:
                stack = tls.stack = []
            stack.append(0)  # ns of nested phases, subtracted from this one's own time
            return _time_ns()
        except Exception as exc:  # noqa: BLE001
            self.fault("enter", exc)
            return 0

    def leave(self, name: bytes, t0: int, result: Any = None, on_result: Callable[[Any], None] | None = None,
              nested: bool = True) -> None:
        """End the phase begun at `t0` (``enter``), record it, then hand `result` to `on_result`."""
        t1 = _time_ns()
        try:
            tls = self.tls
            dur = t1 - t0
            child = 0
            if nested:
                stack = tls.stack
                child = stack.pop()
                if stack:
                    stack[-1] += dur
            own = dur - child if dur > child else 0
            buf = tls.buf
            if buf is not None:
                if len(buf) < MAX_PHASES:
                    buf.append((t0, t1, own, name))  # written when the cycle closes
            else:
                self._emit(self._range(t0, t1, _native_id(), own, name))
            if on_result is not None:
                on_result(result)
        except Exception as exc:  # noqa: BLE001
            self.fault("leave", exc)

    def phase(self, name: str, fn: Callable[..., Any], on_result: Callable[[Any], None] | None = None,
              before: Callable[..., None] | None = None, standalone: bool = False) -> Callable[..., Any]:
        """`fn` timed as the phase `name`.  `before(*args)` sees the arguments, `on_result` the
        return value (both only when recording).  A phase of an engine step (`standalone`
        False) is recorded only inside a cycle open on its thread, so outside one it costs an
        attribute read; a `standalone` one (an API server's output processing) whenever a
        collector listens.  A coroutine function gets a coroutine wrapper (its time is the
        wall time until it completes, other tasks' included)."""
        nb = self.name(name)
        enter, leave = self.enter, self.leave
        fault = self.fault
        tls = self.tls

        if _is_coroutine_function(fn):
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                if not standalone and tls.buf is None:
                    return await fn(*args, **kwargs)
                t0 = 0
                try:
                    t0 = _time_ns() if self.enabled and self._active() else 0
                except Exception as exc:  # noqa: BLE001
                    fault("enter", exc)
                if not t0:
                    return await fn(*args, **kwargs)
                if before is not None:
                    try:
                        before(*args, **kwargs)
                    except Exception as exc:  # noqa: BLE001
                        fault("before", exc)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    leave(nb, t0, nested=False)
                    raise
                leave(nb, t0, result, on_result, nested=False)
                return result

            setattr(awrapper, WRAPPED, fn)
            return awrapper

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not standalone and tls.buf is None:
                return fn(*args, **kwargs)
            t0 = enter()
            if not t0:
                return fn(*args, **kwargs)
            if before is not None:
                try:
                    before(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001
                    fault("before", exc)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                leave(nb, t0)
                raise
            leave(nb, t0, result, on_result)
            return result

        setattr(wrapper, WRAPPED, fn)
        return wrapper

    # ------------------------------------------------------------------ cycles

    def open_cycle(self) -> int:
        """Begin a cycle on this thread (its phases are buffered until it closes); its start
        ns, or 0 when nothing is recorded (no collector, or a cycle already open here)."""
        try:
            if not self.enabled or not self._active():
                return 0
            tls = self.tls
            if tls.buf is not None:
                return 0
            tls.buf = []
            tls.load = None
            if not tls.tid:
                tls.tid = _native_id()
            return _time_ns()
        except Exception as exc:  # noqa: BLE001
            self.fault("open_cycle", exc)
            return 0

    def set_load(self, load: Load) -> None:
        """The load of the cycle open on this thread."""
        self.tls.load = load

    def close_cycle(self, t0: int, name: bytes, *, primary: bool = True, keep: bool = True) -> None:
        """End the cycle begun at `t0`: write its phases, and (`primary`) the cycle and its load,
        in one write.  `keep` False drops it with its phases (an idle loop iteration)."""
        t1 = _time_ns()
        try:
            tls = self.tls
            buf, load, tid = tls.buf, tls.load, tls.tid
            tls.buf = tls.load = None
            if buf is None or not keep:
                return
            m = self.marker
            rng = self._range
            lines = [rng(s, e, tid, own, nb) for s, e, own, nb in buf]
            if primary:
                lines.append(m.cycle_line(t0, t1, tid, name))
                if load is not None:
                    lines.append(m.load_line(t0, t1, *load))
                self.steps += 1
            if lines:
                self._emit(b"".join(lines))
        except Exception as exc:  # noqa: BLE001
            self.fault("close_cycle", exc)

    def cycle(self, name: str, fn: Callable[..., Any], *, primary: Callable[[Any], bool] | None = None,
              setup: Callable[[Any], bool] | None = None, drop_empty: bool = False) -> Callable[..., Any]:
        """The method `fn` as one cycle per call.  `setup(self_obj)` runs once per object on its
        first recorded call (False: record nothing for it); `primary(self_obj)`: whether this
        object's cycles are written (else only its phases); `drop_empty`: a call in which no
        phase ran (a step that found nothing to do) is no cycle."""
        nb = self.name(name)
        tls = self.tls
        flag = f"_perfdiff_setup_{id(self)}"  # on the object: set up once, forgotten with it
        slotted: dict[int, dict[str, bool]] = {}  # objects without a __dict__

        def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = self.open_cycle()
            if not t0:
                return fn(obj, *args, **kwargs)
            prim = True
            try:
                own = vars(obj) if hasattr(obj, "__dict__") else slotted.setdefault(id(obj), {})
                ok = own.get(flag)
                if ok is None:
                    ok = own[flag] = setup(obj) if setup is not None else True
                prim = primary(obj) if primary is not None else True
            except Exception as exc:  # noqa: BLE001
                self.fault("cycle setup", exc)
                ok = False
            if not ok:
                self.close_cycle(t0, nb, keep=False)
                return fn(obj, *args, **kwargs)
            try:
                result = fn(obj, *args, **kwargs)
            except BaseException:
                self.close_cycle(t0, nb, primary=prim)
                raise
            self.close_cycle(t0, nb, primary=prim, keep=not drop_empty or bool(tls.buf))
            return result

        setattr(wrapper, WRAPPED, fn)
        return wrapper


def _is_coroutine_function(fn: Any) -> bool:
    """``async def`` (a function or a bound method), without importing inspect into the target."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and bool(code.co_flags & CO_COROUTINE)


def _said_by_another_process(line: str) -> bool:
    """Whether another process of the same `collect -- CMD` printed `line` already (an API
    server and its engine core import the same modules): a flag file per line in the
    collection's private marks directory, created exclusively."""
    directory = os.environ.get("PERFDIFF_MARKER_DIR")
    if not directory:
        return False
    path = os.path.join(directory, f".warned-{zlib.crc32(line.encode('utf-8', 'replace')):08x}")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        return True
    except OSError:
        return False
    return False


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def unwrapped(fn: Any) -> Any:
    """The function under perfdiff's wrappers."""
    while getattr(fn, WRAPPED, None) is not None:
        fn = getattr(fn, WRAPPED)
    return fn


def live_instances(cls: type, *, depth: int = 4, budget: int = 200_000) -> list[Any]:
    """The objects of `cls` or its subclasses alive now: for wrapping objects that existed
    before the agent was loaded into a running process.

    Two searches, their union (each object once):

    * the garbage collector's (``gc.get_referrers`` of the classes: instances of heap classes
      refer to their class) — which does not look into the permanent generation, where
      ``gc.freeze()`` moves every object (vLLM at engine start from 0.10.2, SGLang's
      ``/freeze_gc`` after warm-up);
    * a walk from the roots a running engine hangs from: the locals of every thread's frames
      (``sys._current_frames()``: the busy loop's ``self``) and the globals of every module
      (``sys.modules``), then at most `depth` steps along instance attributes (``__dict__``,
      ``__slots__``) and the items of lists, tuples, sets and dicts, visiting at most `budget`
      objects.
    """
    import gc

    classes, todo = [], [cls]
    while todo:
        c = todo.pop()
        classes.append(c)
        todo += c.__subclasses__()
    found: dict[int, Any] = {}
    try:
        for obj in gc.get_referrers(*classes):
            if isinstance(obj, cls):
                found.setdefault(id(obj), obj)
    except Exception:  # noqa: BLE001 - the walk below still runs
        pass
    for obj in _walk_roots(cls, depth, budget):
        found.setdefault(id(obj), obj)
    return list(found.values())


_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), type, memoryview, range)


def _walk_roots(cls: type, depth: int, budget: int) -> list[Any]:
    """Instances of `cls` reachable from the threads' frames and the modules' globals."""
    import types

    seen: set[int] = set()
    out: list[Any] = []
    level: list[Any] = []
    me = sys._getframe()  # noqa: SLF001 - this walk's own frames hold nothing of the target
    try:
        frames = list(sys._current_frames().values())  # noqa: SLF001
    except Exception:  # noqa: BLE001
        frames = []
    for frame in frames:
        while frame is not None:
            if frame is not me:
                try:
                    level += list(frame.f_locals.values())
                except Exception:  # noqa: BLE001
                    pass
            frame = frame.f_back
    for module in list(sys.modules.values()):
        d = getattr(module, "__dict__", None)
        if isinstance(d, dict):
            try:
                level += list(d.values())
            except Exception:  # noqa: BLE001 - a module dict changed while copied
                pass
    visited = 0
    for _ in range(depth + 1):
        nxt: list[Any] = []
        for obj in level:
            if visited >= budget:
                return out
            if isinstance(obj, _ATOMS) or isinstance(obj, (types.ModuleType, types.FunctionType,
                                                           types.BuiltinFunctionType, types.CodeType)):
                continue
            i = id(obj)
            if i in seen:
                continue
            seen.add(i)
            visited += 1
            try:
                if isinstance(obj, cls):
                    out.append(obj)
                if isinstance(obj, (list, tuple, set, frozenset)):
                    nxt += list(obj)[:1000]
                elif isinstance(obj, dict):
                    nxt += list(obj.values())[:1000]
                elif isinstance(obj, types.MethodType):
                    nxt.append(obj.__self__)
                else:
                    d = getattr(obj, "__dict__", None)
                    if isinstance(d, dict):
                        nxt += list(d.values())
                    for klass in type(obj).__mro__:
                        for slot in vars(klass).get("__slots__", ()) if isinstance(
                                vars(klass).get("__slots__", ()), (tuple, list)) else ():
                            v = getattr(obj, slot, None) if isinstance(slot, str) else None
                            if v is not None:
                                nxt.append(v)
            except Exception:  # noqa: BLE001 - a hostile __getattr__ or a changing container
                continue
        level = nxt
    return out
