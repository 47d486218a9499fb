"""The perfdiff CUPTI agent: kernel traces recorded inside the target, handed over as files.

No tool attaches CUPTI to a running process from outside (docs/COLLECTORS.md, Kernel traces),
so the agent runs in the target.  `perfdiff collect -- CMD` starts it through the environment
(the ``sitecustomize`` bootstrap in this package, put first on the command's PYTHONPATH, so
every Python process of the command runs one); a program starts it itself with
``import perfdiff.agent`` (when $PERFDIFF_AGENT_DIR or $PERFDIFF_AGENT=1 is set) or
``perfdiff.agent.start()``.

Standard library only, here and in the modules it imports (targets load it first thing, and
the bootstrap loads this package by path where perfdiff is not importable):

* cupti-python (``from cupti import cupti``): ``activity_register_callbacks``, thread ids set
  to the system's (``set_thread_id_type(ActivityThreadIdType.SYSTEM)``, so they match
  ``threading.get_native_id``), then ``activity_enable`` of CONCURRENT_KERNEL, MEMCPY, MEMSET,
  RUNTIME (launch times) and MARKER (NVTX ranges) — never KERNEL, which serialises kernels.
* The buffer-completed callback runs on whichever thread CUPTI completes a buffer on: it only
  copies each record's few fields into a tuple (the records belong to CUPTI for the call
  only) and queues the list.  A background thread calls ``activity_flush_all(0)`` every
  FLUSH_NS, encodes the queued tuples and appends them to the hand-off files (wire).  At exit
  (atexit, and SIGTERM/SIGHUP when they have their default action) a forced flush
  (``activity_flush_all(FLUSH_FORCED)``) writes what is left.
* Dropped records: ``activity_get_num_dropped_records(0, 0, address)`` (global queue) after
  every flush.  Clock: (``cupti.get_timestamp()``, ``time.time_ns()``) pairs at start, every
  ANCHOR_NS and at stop; the collector maps CUPTI ns to CLOCK_REALTIME with them.
* NVTX ranges reach CUPTI only when ``NVTX_INJECTION64_PATH`` names libcupti before the
  target's first NVTX call: the agent sets it (unless set) to the libcupti cupti-python loads —
  when it starts recording, or at once when it starts idle (so a later `collect --pid` gets
  ranges too; $PERFDIFF_AGENT_NVTX=0 leaves the variable alone).
* A forked child keeps none of the parent's records: its queue is dropped and its copies of
  the parent's files are closed (the parent writes those).  Where the parent was recording
  for `collect -- CMD` (announced), the child re-arms: a new agent for the child's pid, in
  the same directory, registers the CUPTI callbacks again and enables the same kinds (vLLM
  used as a library — ``LLM(...)``, ``AsyncLLM`` — forks its engine core and workers); a
  forked multiprocessing child, which leaves by ``os._exit``, writes its last records through
  multiprocessing's exit finalizers.  A child of a process where PyTorch had initialised CUDA
  (a DataLoader worker) cannot use CUDA and stays inert; $PERFDIFF_AGENT_FORK=0 leaves every
  forked child inert.
  A child started by exec runs its own agent through the environment.

The hand-off directory is $PERFDIFF_AGENT_DIR for `collect -- CMD`, else
``/dev/shm/perfdiff-agent-<uid>``, where the agent waits idle on its control socket until a
collector says start.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import struct
import threading
import time
import weakref
from collections import deque
from operator import attrgetter
from typing import Any, Callable

# Relative imports: where perfdiff is not importable the bootstrap loads this package by path,
# under another name.
from . import adapters
from .binding import (api_name, cupti_python_version, cupti_reason, find_libcupti, import_cupti, import_reason,
                      memcpy_label, memory_label)
from .control import ControlServer
from .wire import (ENV_DIR, ENV_ENABLE, K_API, K_KERNEL, K_MEMCPY, K_MEMSET, K_RANGE, KIND_NAMES, REC, WIRE_VERSION,
                   default_agent_dir)

__all__ = ["Agent", "WIRE_VERSION", "current", "start", "start_from_env"]

ENV_NVTX = "PERFDIFF_AGENT_NVTX"  # "0": leave NVTX_INJECTION64_PATH alone
ENV_FORK = "PERFDIFF_AGENT_FORK"  # "0": a forked child's agent stays inert
NVTX_ENV = "NVTX_INJECTION64_PATH"

FLUSH_NS = 500_000_000  # the agent's flush period
ANCHOR_NS = 10_000_000_000  # clock anchor period (docs/COLLECTORS.md, Timestamps)
STATUS_NS = 5_000_000_000  # the status file is rewritten at least this often (else only on news)
BUFFER_BYTES = 8 << 20  # each CUPTI activity buffer (the size NVIDIA's samples use)
MAX_ERRORS = 20  # error lines kept in the status

# ActivityKind member names, in the order they are enabled.  Never KERNEL: it serialises kernels.
ENABLED_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "MARKER")
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
MARKER_INSTANTANEOUS, MARKER_START, MARKER_END = 1, 2, 4  # CUPTI_ACTIVITY_FLAG_MARKER_*; cupti-python
# 13.4's ActivityFlag has no MARKER_END member (1 << 2 in cupti_activity.h), so the values are spelled out.

# The fields copied in the buffer callback, per kind (attrgetter runs in C: the callback stays cheap).
_FIELDS = {
    "CONCURRENT_KERNEL": ("kind", "name", "start", "end", "correlation_id", "stream_id", "device_id"),
    "MEMCPY": ("kind", "copy_kind", "src_kind", "dst_kind", "start", "end", "correlation_id", "stream_id",
               "device_id", "bytes"),
    "MEMSET": ("kind", "memory_kind", "start", "end", "correlation_id", "stream_id", "device_id", "bytes"),
    "RUNTIME": ("kind", "cbid", "start", "end", "correlation_id", "thread_id"),
    "MARKER": ("kind", "flags_", "timestamp", "id", "name", "domain", "object_id.pt.thread_id"),
}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_LIVE: weakref.WeakSet[Agent] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for agent in list(_LIVE):
        agent._after_fork()  # noqa: SLF001 - the fork hook belongs to the class
    _rearm_after_fork()


def _rearm_after_fork() -> None:
    """In a forked child of a recording, announced agent: start this process's own agent (see
    the module docstring).  Never raises into the child."""
    global _AGENT
    parent = _AGENT
    if parent is None or not parent.announced or parent.state_at_fork != "recording":
        return
    if os.environ.get(ENV_FORK) == "0" or _cuda_used_before_fork():
        return
    try:
        # The parent's records still in CUPTI's buffers were copied with its memory: a forced
        # flush hands them to the parent's (inert) agent here, and they are dropped with it.
        try:
            parent._cupti.activity_flush_all(FLUSH_FORCED)
        except Exception:  # noqa: BLE001
            pass
        parent._inbox.clear()
        agent = Agent(parent.directory, announced=True, load_cupti=parent._load_cupti, flush_ns=parent.flush_ns,
                      handle_signals=parent.handle_signals)
        agent._cupti = parent._cupti
        agent.forked_from = parent.pid
        _AGENT = agent
        agent.serve()
        agent.start_recording()
        _exit_with_multiprocessing(agent)
    except Exception as exc:  # noqa: BLE001
        try:
            import sys

            sys.stderr.write(f"perfdiff agent: not re-armed in forked pid {os.getpid()} ({type(exc).__name__}: {exc})\n")
        except Exception:  # noqa: BLE001
            pass


def _cuda_used_before_fork() -> bool:
    """Whether PyTorch had initialised CUDA in the parent: the child cannot use CUDA then (a
    DataLoader worker forked from a training process), so there is nothing to trace."""
    import sys

    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return bool(getattr(cuda, "_in_bad_fork", False) or (cuda is not None and cuda.is_initialized()))
    except Exception:  # noqa: BLE001
        return False


def _exit_with_multiprocessing(agent: Agent) -> None:
    """A multiprocessing child leaves by os._exit, after its exit finalizers but not atexit:
    register the agent's exit there.  Its bootstrap clears the finalizers inherited through
    fork and then runs its after-fork hooks, so the finalizer is registered from such a hook."""
    import sys

    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return

    def register(a: Agent) -> None:
        util.Finalize(None, a._at_exit, exitpriority=-(1 << 30))  # noqa: SLF001 - after the program's own

    util.register_after_fork(agent, register)


os.register_at_fork(after_in_child=_reset_after_fork)


class Agent:
    """CUPTI activity tracing in this process, handed over as files in `directory`.

    `announced`: the directory is a collector's (`collect -- CMD`), start recording now;
    otherwise wait for a collector's "start" on the control socket.  `load_cupti` returns the
    `cupti.cupti` module (a seam for tests).  Nothing here raises into the target: a failure
    becomes state "unsupported" with a one-line reason in the status.
    """

    def __init__(self, directory: str, *, announced: bool, load_cupti: Callable[[], Any] | None = None,
                 flush_ns: int = FLUSH_NS, handle_signals: bool = True):
        self.directory = directory
        self.announced = announced
        self.flush_ns = flush_ns
        self.handle_signals = handle_signals
        self.pid = os.getpid()
        self.state = "idle"  # idle | recording | stopped | unsupported | forked
        self.reason = ""
        self._load_cupti = load_cupti or import_cupti
        self._cupti: Any = None
        self._registered = False
        self._getters: dict[int, Callable[[Any], tuple]] = {}
        self._kinds: dict[int, int] = {}  # CUPTI ActivityKind value → K_*
        self._inbox: deque[list[tuple]] = deque()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._control = ControlServer(self.path("sock"), self._answer, self._error)
        self._rec_fd = self._names_fd = -1
        self._names: dict[Any, int] = {}
        self._open_ranges: dict[int, tuple[int, str, str, int]] = {}
        self._at_exit_registered = False
        self._signals_hooked = False
        self.enabled: list[str] = []
        self.thread_ids = "unknown"
        self.counts = {name: 0 for name in KIND_NAMES.values()} | {"marks": 0, "other": 0}
        self.dropped = {"cupti": 0, "agent": 0, "unclosed_ranges": 0}
        self.anchors: list[dict[str, int | str]] = []
        self.nvtx: dict[str, Any] = {}
        self.errors: list[str] = []
        self.flushes = 0
        self.flush_ns_total = 0
        self.flush_ns_max = 0
        self.callback_records = 0
        self.started_ns = self.stopped_ns = 0
        self.state_at_fork = ""  # in a forked child: the parent's state when it forked
        self.forked_from = 0  # a re-armed agent: the pid it was forked from
        self._last_anchor_mono = 0
        self._status_mono = 0
        _LIVE.add(self)

    # ------------------------------------------------------------------ paths

    def path(self, suffix: str) -> str:
        """This process's hand-off file with `suffix` (rec, names, status.json, sock)."""
        return os.path.join(self.directory, f"{self.pid}.{suffix}")

    # ------------------------------------------------------------------ CUPTI callbacks (hot path)

    def _buffer_requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0  # (bytes, max records: 0 = as many as fit)

    def _buffer_completed(self, activities: Any) -> None:
        # CUPTI's record objects are valid only during this call: copy the fields now, encode later.
        try:
            get = self._getters.get
            rows = []
            append = rows.append
            for a in activities:
                g = get(a.kind)
                if g is not None:
                    append(g(a))
            self.callback_records += len(rows)
            self._inbox.append(rows)
        except Exception as exc:  # noqa: BLE001 - never raise into CUPTI's thread
            self._error("buffer callback", exc)

    # ------------------------------------------------------------------ start / stop

    def start_recording(self) -> bool:
        """Enable CUPTI tracing and start handing records over; False (state "unsupported",
        reason set) when cupti-python, libcupti or the driver refuses."""
        with self._lock:
            if self.state == "recording":
                return True
            if self.state == "forked":
                return False
            try:
                cupti = self._cupti or self._load_cupti()
            except ImportError as exc:
                return self._refuse(import_reason(exc))
            self._cupti = cupti
            try:
                self._enable(cupti)
            except Exception as exc:  # noqa: BLE001 - cuptiError, or a library that cannot load
                self._disable()
                return self._refuse(cupti_reason(cupti, exc))
            try:
                self._open_files()
            except OSError as exc:
                self._disable()
                return self._refuse(f"cannot write the hand-off files in {self.directory} ({exc.strerror or exc})")
            self.state, self.reason = "recording", ""
            self.started_ns, self.stopped_ns = time.time_ns(), 0
            self._anchor("start")
            if not self.nvtx.get("injection"):
                self.set_nvtx_injection()
            self._stop = threading.Event()
            self._flusher = threading.Thread(target=self._run_flusher, name="perfdiff-agent-flush", daemon=True)
            self._flusher.start()
            self._install_exit_hooks()
            self._write_status()
            return True

    def _enable(self, cupti: Any) -> None:
        kinds = cupti.ActivityKind
        ours = {"CONCURRENT_KERNEL": K_KERNEL, "MEMCPY": K_MEMCPY, "MEMSET": K_MEMSET, "RUNTIME": K_API,
                "MARKER": K_RANGE}
        self._kinds = {int(getattr(kinds, name)): k for name, k in ours.items()}
        self._getters = {int(getattr(kinds, name)): attrgetter(*fields) for name, fields in _FIELDS.items()}
        if not self._registered:
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            self._registered = True
        try:
            cupti.set_thread_id_type(cupti.ActivityThreadIdType.SYSTEM)
            self.thread_ids = "system"
        except Exception as exc:  # noqa: BLE001 - older CUPTI: pthread ids; tids then do not match the host's
            self.thread_ids = f"default ({type(exc).__name__}: {exc})"
        self.enabled = []
        for name in ENABLED_KINDS:
            cupti.activity_enable(getattr(kinds, name))
            self.enabled.append(name)

    def _disable(self) -> None:
        for name in reversed(self.enabled):
            try:
                self._cupti.activity_disable(getattr(self._cupti.ActivityKind, name))
            except Exception as exc:  # noqa: BLE001
                self._error(f"activity_disable({name})", exc)
        self.enabled = []

    def _refuse(self, reason: str) -> bool:
        self.state, self.reason = "unsupported", reason
        self._write_status()
        return False

    def stop_recording(self, why: str = "stopped") -> dict[str, Any]:
        """Forced flush, disable CUPTI tracing, write the last records and status; the status."""
        flusher = None
        with self._lock:
            if self.state == "recording":
                self._stop.set()
                flusher = self._flusher
                self.flush(forced=True)
                self._disable()
                self._anchor("stop")
                self.dropped["unclosed_ranges"] += len(self._open_ranges)
                self._open_ranges.clear()
                self.state, self.reason = "stopped", why
                self.stopped_ns = time.time_ns()
                self._write_status()
                self._close_files()
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(2.0)
        return self.status()

    # ------------------------------------------------------------------ flushing

    def _run_flusher(self) -> None:
        stop = self._stop
        while not stop.wait(self.flush_ns / 1e9):
            self.flush()

    def flush(self, forced: bool = False) -> dict[str, Any]:
        """Ask CUPTI for its completed buffers (all buffers when `forced`), write the records."""
        if not self._lock.acquire(timeout=5.0):
            return self.status()
        try:
            if self.state != "recording":
                return self.status()
            t0 = time.perf_counter_ns()
            try:
                self._cupti.activity_flush_all(FLUSH_FORCED if forced else 0)
            except Exception as exc:  # noqa: BLE001
                self._error("activity_flush_all", exc)
            changed = self._drain() > 0
            changed |= self._count_dropped()
            if time.monotonic_ns() - self._last_anchor_mono >= ANCHOR_NS:
                self._anchor("periodic")
                changed = True
            cost = time.perf_counter_ns() - t0
            self.flushes += 1
            self.flush_ns_total += cost
            self.flush_ns_max = max(self.flush_ns_max, cost)
            if changed or forced or time.monotonic_ns() - self._status_mono >= STATUS_NS:
                self._write_status()
            return self.status()
        finally:
            self._lock.release()

    def _drain(self) -> int:
        """Encode the queued rows as REC records and append them (names first); returns how many."""
        inbox = self._inbox
        if not inbox:
            return 0
        pack = REC.pack
        names = self._names
        new_names: list[str] = []
        out: list[bytes] = []
        kinds = self._kinds
        counts = self.counts
        n_in = 0

        def name_id(key: Any, label: str) -> int:
            nid = names[key] = len(names) + 1
            new_names.append(f"{nid}\t{label.replace(chr(10), ' ').replace(chr(13), ' ')}\n")
            return nid

        cnt = [0] * (K_RANGE + 1)
        while inbox:
            batch = inbox.popleft()
            n_in += len(batch)
            for row in batch:
                k = kinds.get(row[0], 0)
                try:
                    if k == K_KERNEL:  # (kind, name, start, end, correlation, stream, device)
                        name = row[1]
                        nid = names.get(name) or name_id(name, name or "<unnamed kernel>")
                        out.append(pack(K_KERNEL, nid, row[2], row[3], row[4], row[5], row[6], 0, 0))
                    elif k == K_API:  # (kind, cbid, start, end, correlation, thread)
                        key = ("api", row[1])
                        nid = names.get(key) or name_id(key, api_name(self._cupti, row[1]))
                        out.append(pack(K_API, nid, row[2], row[3], row[4], 0, 0, row[5], 0))
                    elif k == K_MEMCPY:  # (kind, copy, src, dst, start, end, correlation, stream, device, bytes)
                        key = ("memcpy", row[1], row[2], row[3])
                        nid = names.get(key) or name_id(key, memcpy_label(self._cupti, row[1], row[2], row[3]))
                        out.append(pack(K_MEMCPY, nid, row[4], row[5], row[6], row[7], row[8], 0, row[9]))
                    elif k == K_MEMSET:  # (kind, memory kind, start, end, correlation, stream, device, bytes)
                        key = ("memset", row[1])
                        nid = names.get(key) or name_id(key, f"Memset ({memory_label(self._cupti, row[1])})")
                        out.append(pack(K_MEMSET, nid, row[2], row[3], row[4], row[5], row[6], 0, row[7]))
                    elif k == K_RANGE:
                        rec = self._marker(row)
                        if rec is None:
                            continue
                        label, s, e, tid = rec
                        nid = names.get(label) or name_id(label, label)
                        out.append(pack(K_RANGE, nid, s, e, 0, 0, 0, tid, 0))
                    else:
                        counts["other"] += 1
                        continue
                    cnt[k] += 1
                except (struct.error, TypeError, ValueError, IndexError) as exc:
                    self.dropped["agent"] += 1
                    self._error("encode", exc)
        for k in range(1, K_RANGE + 1):
            counts[KIND_NAMES[k]] += cnt[k]
        try:
            if new_names:
                _write_all(self._names_fd, "".join(new_names).encode("utf-8", "replace"))
            if out:
                _write_all(self._rec_fd, b"".join(out))
        except OSError as exc:
            self.dropped["agent"] += len(out)
            self._error("write", exc)
        return n_in

    def _marker(self, row: tuple) -> tuple[str, int, int, int] | None:
        """Pair an NVTX range's start and end MARKER records; (name, start, end, tid) at its end."""
        _, flags, ts, mid, name, domain, tid = row
        if flags & MARKER_START:
            self._open_ranges[mid] = (ts, name or "", domain or "", tid)
            return None
        if flags & MARKER_END:
            opened = self._open_ranges.pop(mid, None)
            if opened is None:
                return None
            s, name, domain, tid = opened
            label = f"{domain}:{name}" if domain else (name or "<unnamed range>")
            return label, s, ts, tid
        if flags & MARKER_INSTANTANEOUS:
            self.counts["marks"] += 1
        return None

    def _count_dropped(self) -> bool:
        """Add the records CUPTI dropped since the last call; True when there were any."""
        import ctypes

        n = ctypes.c_size_t(0)
        try:
            ret = self._cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(n))
        except Exception as exc:  # noqa: BLE001
            self._error("activity_get_num_dropped_records", exc)
            return False
        # The binding writes through the address (size_t *dropped); a binding returning it is taken too.
        lost = int(n.value) or (int(ret) if isinstance(ret, int) else 0)
        self.dropped["cupti"] += lost
        return lost > 0

    # ------------------------------------------------------------------ clock, NVTX

    def _anchor(self, label: str) -> None:
        """A (CUPTI, CLOCK_REALTIME) pair: the best of three readings, stamped at the midpoint."""
        best: tuple[int, int, int] | None = None
        try:
            for _ in range(3):
                t0 = time.time_ns()
                c = int(self._cupti.get_timestamp())
                t1 = time.time_ns()
                if best is None or t1 - t0 < best[2]:
                    best = (c, (t0 + t1) // 2, t1 - t0)
        except Exception as exc:  # noqa: BLE001
            self._error("get_timestamp", exc)
            return
        assert best is not None
        self._last_anchor_mono = time.monotonic_ns()
        self.anchors.append({"label": label, "cupti_ns": best[0], "realtime_ns": best[1],
                             "uncertainty_ns": best[2], "monotonic_ns": self._last_anchor_mono})

    def set_nvtx_injection(self) -> None:
        """Point NVTX at libcupti (NVTX_INJECTION64_PATH) unless set, so NVTX ranges become MARKER
        records; NVTX reads it once, at the target's first NVTX call.  $PERFDIFF_AGENT_NVTX=0: leave it."""
        current = os.environ.get(NVTX_ENV)
        if current:
            self.nvtx = {"injection": current, "set_by": "environment"}
            return
        if os.environ.get(ENV_NVTX) == "0":
            self.nvtx = {"injection": None, "note": f"${ENV_NVTX}=0: NVTX ranges are not traced"}
            return
        path = find_libcupti()
        if path is None:
            self.nvtx = {"injection": None, "note": "libcupti not found: NVTX ranges will not arrive as MARKER records"}
            return
        os.environ[NVTX_ENV] = path  # putenv: NVTX reads it at the target's first NVTX call
        self.nvtx = {"injection": path, "set_by": "agent",
                     "note": "NVTX ranges arrive only if the target made no NVTX call before the agent started"}

    # ------------------------------------------------------------------ files and status

    def _open_files(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        self._close_files()
        self._names.clear()
        self._rec_fd = os.open(self.path("rec"), flags, 0o600)
        self._names_fd = os.open(self.path("names"), flags, 0o600)

    def _close_files(self) -> None:
        for fd in (self._rec_fd, self._names_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rec_fd = self._names_fd = -1

    def status(self) -> dict[str, Any]:
        """What the collector needs to know: state, reason, counts, drops, clock anchors."""
        return {
            "wire_version": WIRE_VERSION, "pid": self.pid, "state": self.state, "reason": self.reason,
            "announced": self.announced, "cupti_python": cupti_python_version(), "enabled": list(self.enabled),
            "thread_ids": self.thread_ids, "records": dict(self.counts), "dropped": dict(self.dropped),
            "open_ranges": len(self._open_ranges), "callback_records": self.callback_records,
            "flushes": self.flushes, "flush_ns_total": self.flush_ns_total, "flush_ns_max": self.flush_ns_max,
            "anchors": list(self.anchors), "nvtx": dict(self.nvtx), "errors": list(self.errors),
            "started_ns": self.started_ns, "stopped_ns": self.stopped_ns, "updated_ns": time.time_ns(),
            "forked_from": self.forked_from,
            "adapters": adapters.status(),
        }

    def _write_status(self) -> None:
        self._status_mono = time.monotonic_ns()
        path = self.path("status.json")
        tmp = f"{path}.{threading.get_native_id()}.tmp"
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.status(), fh, default=str)
            os.replace(tmp, path)
        except OSError as exc:
            self._error("status", exc)

    def _error(self, where: str, exc: BaseException) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{where}: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ exit, signals, fork

    def _install_exit_hooks(self) -> None:
        """atexit (once per agent); SIGTERM/SIGHUP too when recording, or waiting to, on the main thread."""
        if not self._at_exit_registered:
            self._at_exit_registered = True
            atexit.register(self._at_exit)
        if self._signals_hooked or self.state not in ("recording", "idle") or not self.handle_signals:
            return
        if threading.current_thread() is not threading.main_thread():
            return  # Python sets handlers on the main thread only (an idle agent hooks them at start())
        self._signals_hooked = True
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                if signal.getsignal(sig) == signal.SIG_DFL:  # the target's own handlers stay in charge
                    signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass

    def _on_signal(self, signum: int, frame: Any) -> None:
        # The default action was "terminate": write what CUPTI holds, then die by the same signal.
        signal.signal(signum, signal.SIG_DFL)
        try:
            here = current()  # in a forked child: the child's re-armed agent
            (here if here is not None else self)._at_exit()
        finally:
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return  # a forked child: the parent's records are the parent's to write
        self.stop_recording("exit")
        if self.state != "stopped":
            self._write_status()  # the adapters' last counts (stop_recording wrote it when recording)
        self.close_socket()

    def _after_fork(self) -> None:
        """In a forked child: forget everything, never write (the parent owns these files)."""
        if self.state != "forked":
            self.state_at_fork = self.state
        self.state, self.reason = "forked", f"forked from pid {self.pid}"
        self._inbox = deque()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._flusher = None
        self._close_files()
        self._control.close(unlink=False)  # the parent's socket file stays

    # ------------------------------------------------------------------ control socket

    def serve(self) -> bool:
        """Listen on D/P.sock for a collector's start/stop/flush/status; False when impossible."""
        if self._control.listening:
            return True
        if not self._control.open():
            return False
        self._install_exit_hooks()  # the socket file goes at exit, recording or not
        return True

    def _answer(self, cmd: Any) -> dict[str, Any]:
        if cmd == "start":
            self.start_recording()
        elif cmd == "stop":
            self.stop_recording()
        elif cmd == "flush":
            self.flush()
        reply = self.status()
        if cmd not in ("start", "stop", "flush", "status"):
            reply["error"] = f"unknown command {cmd!r}"
        return reply

    def close_socket(self) -> None:
        self._control.close()


_AGENT: Agent | None = None


def start(directory: str | None = None, *, load_cupti: Callable[[], Any] | None = None) -> Agent:
    """Start this process's agent (once; later calls return it).

    With a directory ($PERFDIFF_AGENT_DIR, set by `collect -- CMD`) it records at once;
    without one it listens in ``default_agent_dir()`` and records when `collect --pid` says so.
    Never raises for a missing cupti-python or a refusing CUPTI: see ``status()["reason"]``.
    """
    global _AGENT
    if _AGENT is not None and _AGENT.pid == os.getpid() and _AGENT.state != "forked":
        return _AGENT
    target = directory or os.environ.get(ENV_DIR)
    agent = Agent(target or default_agent_dir(), announced=bool(target), load_cupti=load_cupti)
    _AGENT = agent
    adapters.install()  # engine steps of the frameworks as cycles (docs/PROFILING_LLM_SERVERS.md); never raises
    agent.serve()
    if target:
        agent.start_recording()
    else:
        agent.set_nvtx_injection()  # now, before the program's first NVTX call, not when a collector comes
        agent._write_status()  # noqa: SLF001 - "idle": a collector can see the agent exists
    return agent


def start_from_env() -> Agent | None:
    """Start the agent when the environment asks for it ($PERFDIFF_AGENT_DIR or $PERFDIFF_AGENT=1)."""
    if os.environ.get(ENV_DIR) or os.environ.get(ENV_ENABLE) == "1":
        return start()
    return None


def current() -> Agent | None:
    """This process's agent, if one was started here (not inherited through fork)."""
    return _AGENT if _AGENT is not None and _AGENT.pid == os.getpid() else None


