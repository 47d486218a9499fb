"""Kernel traces from inside the target: the perfdiff CUPTI agent, and its collector side.

No tool attaches CUPTI to a running process from outside (COLLECTORS.md, Kernel traces), so
the agent runs in the target.  `perfdiff collect -- CMD` starts it through the environment (a
``sitecustomize`` the collector puts first on the command's PYTHONPATH, so every Python
process of the command runs one); a program starts it itself with ``import perfdiff.agent``
(when $PERFDIFF_AGENT_DIR or $PERFDIFF_AGENT=1 is set) or ``perfdiff.agent.start()``.

Target side — this module imports only the standard library at load time (targets load it
first thing; numpy/pandas are imported inside the collector-side functions):

* cupti-python (``from cupti import cupti``): ``activity_register_callbacks``, thread ids set
  to the system's (``set_thread_id_type(ActivityThreadIdType.SYSTEM)``, so they match
  ``threading.get_native_id``), then ``activity_enable`` of CONCURRENT_KERNEL, MEMCPY, MEMSET,
  RUNTIME (launch times) and MARKER (NVTX ranges) — never KERNEL, which serialises kernels.
* The buffer-completed callback runs on whichever thread CUPTI completes a buffer on: it only
  copies each record's few fields into a tuple (the records belong to CUPTI for the call
  only) and queues the list.  A background thread calls ``activity_flush_all(0)`` every
  FLUSH_NS, encodes the queued tuples and appends them to files.  At exit (atexit, and
  SIGTERM/SIGHUP when they have their default action) a forced flush
  (``activity_flush_all(FLUSH_FORCED)``) writes what is left.
* Dropped records: ``activity_get_num_dropped_records(0, 0, address)`` (global queue) after
  every flush.  Clock: (``cupti.get_timestamp()``, ``time.time_ns()``) pairs at start, every
  ANCHOR_NS and at stop; the collector maps CUPTI ns to CLOCK_REALTIME with them.
* NVTX ranges reach CUPTI only when ``NVTX_INJECTION64_PATH`` names libcupti before the
  target's first NVTX call: the agent sets it (unless set) to the libcupti cupti-python loads —
  when it starts recording, or at once when it starts idle (so a later `collect --pid` gets
  ranges too; $PERFDIFF_AGENT_NVTX=0 leaves the variable alone).
* A forked child keeps nothing: its queue is dropped, its copies of the files are closed and
  it never flushes (CUPTI's state does not survive fork); a child started by exec runs its
  own agent through the environment.

Hand-off, per process P in directory D ($PERFDIFF_AGENT_DIR for `collect -- CMD`, else
``/dev/shm/perfdiff-agent-<uid>``, where the agent waits idle until a collector says start):

    D/P.rec          append-only fixed-width records (REC: 48 bytes, little-endian)
    D/P.names        append-only ``id<TAB>name`` lines; a name is written before its records
    D/P.status.json  state, reason, counts, dropped records, clock anchors (replaced atomically)
    D/P.sock         control socket: one JSON line in ({"cmd": "start"|"stop"|"flush"|
                     "status"}), the status as one JSON line out; same uid or root only

Collector side: AgentTraceSource reads those files into bundle rows — activity of kinds
kernel, memcpy, memset (launch_ns and tid joined from the RUNTIME call with the same
correlation id) and api, NVTX ranges as markers (source "nvtx") and, at stop, as kind "cpu"
rows with their self time.  It follows the collect loop's sampler protocol (start, sample,
manifest, close) and adds ``stop()`` for the last rows.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import weakref
from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # collector side only; the target never imports these
    import numpy as np
    import pandas as pd

WIRE_VERSION = 1  # of the files and the socket protocol; the bootstrap checks it
ENV_DIR = "PERFDIFF_AGENT_DIR"  # announced hand-off directory (collect -- CMD)
ENV_ENABLE = "PERFDIFF_AGENT"  # "1": `import perfdiff.agent` starts an idle agent (collect --pid)
ENV_FILE = "PERFDIFF_AGENT_FILE"  # this file, for targets where perfdiff is not importable
ENV_WIRE = "PERFDIFF_AGENT_WIRE"
ENV_NVTX = "PERFDIFF_AGENT_NVTX"  # "0": leave NVTX_INJECTION64_PATH alone
NVTX_ENV = "NVTX_INJECTION64_PATH"
CUDA_ROOTS = ("/usr/local/cuda",)  # toolkits searched for libcupti after $CUDA_HOME and $CUDA_PATH

FLUSH_NS = 500_000_000  # the agent's flush period
ANCHOR_NS = 10_000_000_000  # clock anchor period (COLLECTORS.md, Timestamps)
STATUS_NS = 5_000_000_000  # the status file is rewritten at least this often (else only on news)
POLL_NS = 500_000_000  # the collector reads the files this often
BUFFER_BYTES = 8 << 20  # each CUPTI activity buffer (the size NVIDIA's samples use)
REQUEST_TIMEOUT_S = 10.0  # a socket request (a forced flush may take a while)
MAX_ERRORS = 20  # error lines kept in the status
RETAIN_API = 1 << 20  # runtime calls kept for the launch join of GPU records arriving later
SAME_CLOCK_NS = 20_000  # anchors this close: CUPTI already reads CLOCK_REALTIME, leave as is

REC = struct.Struct("<B3xIqqIIIIQ")  # kind, name id, start, end, correlation, stream, device, tid, bytes
K_KERNEL, K_MEMCPY, K_MEMSET, K_API, K_RANGE = 1, 2, 3, 4, 5
KIND_NAMES = {K_KERNEL: "kernel", K_MEMCPY: "memcpy", K_MEMSET: "memset", K_API: "api", K_RANGE: "nvtx"}

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

# ------------------------------------------------------------------------------ target side


def _import_cupti() -> Any:
    from cupti import cupti  # type: ignore[import-not-found]

    return cupti


def _import_reason(exc: ImportError) -> str:
    if getattr(exc, "name", None) == "cupti":
        return "cupti-python is not installed in the target's Python (pip install cupti-python)"
    return f"cupti-python cannot be imported ({type(exc).__name__}: {exc})"


_RESULT_REASONS = {
    "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED":
        "another CUPTI client already holds this process: the PyTorch profiler, nsys or another tracer",
    "ERROR_NOT_INITIALIZED":
        "CUPTI could not attach to the CUDA driver, which is probably older than this CUPTI: install the "
        "cupti-python that matches the driver's CUDA version",
    "ERROR_NOT_COMPATIBLE": "CUPTI refused the global activity API: another client in this process uses "
                            "CUPTI's subscriber-scope API, or this CUPTI does not match the driver",
    "ERROR_CUDA_COMPILER_NOT_COMPATIBLE": "this CUPTI does not match the CUDA compiler the code was built with",
    "ERROR_INSUFFICIENT_PRIVILEGES": "CUPTI lacks the privileges to trace this process",
    "ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED": "CUPTI does not support this virtualised GPU",
    "ERROR_MIG_DEVICE_NOT_SUPPORTED": "CUPTI does not support tracing on this MIG device",
    "ERROR_WSL_DEVICE_NOT_SUPPORTED": "CUPTI does not support this GPU under WSL",
}


def _cupti_reason(cupti: Any, exc: BaseException) -> str:
    """One line saying why CUPTI refused, from a cuptiError's status or any other exception."""
    status = getattr(exc, "status", None)
    if isinstance(exc, getattr(cupti, "cuptiError", ())) and status is not None:
        try:
            name = cupti.Result(status).name
        except (ValueError, AttributeError):
            name = f"status {status}"
        why = _RESULT_REASONS.get(name, "CUPTI refused to trace")
        return f"{why} (CUPTI_{name})"
    return f"CUPTI could not be loaded ({type(exc).__name__}: {exc})"


def _copy_kind_label(name: str) -> str:
    """`HTOD` → `HtoD` (CUPTI's enum spelling → the name Kineto and the nsys importer use)."""
    if len(name) == 4 and name[1:3] == "TO":
        return f"{name[0]}to{name[3]}"
    return name.title()


def _loaded_library(fragment: str, maps: str = "/proc/self/maps") -> str | None:
    """Path of a shared library mapped in this process whose file name contains `fragment`."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.startswith("/") and fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def find_libcupti() -> str | None:
    """libcupti as cupti-python would load it, without loading it: the one mapped in this
    process, else the nvidia-cuda-cupti wheel on sys.path, else the CUDA toolkit ($CUDA_HOME,
    $CUDA_PATH, /usr/local/cuda) — cuda.pathfinder's order and directories for Linux."""
    import glob

    mapped = _loaded_library("libcupti.so")
    if mapped:
        return mapped
    roots = [(p or ".", ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib")) for p in sys.path]
    toolkits = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *CUDA_ROOTS)
    roots += [(r, ("extras/CUPTI/lib64", "lib")) for r in toolkits if r]
    for root, subdirs in roots:
        for sub in subdirs:
            for soname in ("libcupti.so.13", "libcupti.so.12"):
                hits = glob.glob(os.path.join(root, sub, soname))
                if hits:
                    return os.path.abspath(hits[0])
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def default_agent_dir(uid: int | None = None, root: str = "") -> str:
    """Where an agent not announced by `collect -- CMD` waits for a collector (per uid)."""
    base = "/dev/shm" if os.path.isdir(root + "/dev/shm") else "/tmp"
    return f"{root}{base}/perfdiff-agent-{os.getuid() if uid is None else uid}"


_LIVE: weakref.WeakSet[Agent] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for agent in list(_LIVE):
        agent._after_fork()  # noqa: SLF001 - the fork hook belongs to the class


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
        self._load_cupti = load_cupti or _import_cupti
        self._cupti: Any = None
        self._registered = False
        self._getters: dict[int, Callable[[Any], tuple]] = {}
        self._kinds: dict[int, int] = {}  # CUPTI ActivityKind value → K_*
        self._inbox: deque[list[tuple]] = deque()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._listener: socket.socket | None = None
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
                return self._refuse(_import_reason(exc))
            self._cupti = cupti
            try:
                self._enable(cupti)
            except Exception as exc:  # noqa: BLE001 - cuptiError, or a library that cannot load
                self._disable()
                return self._refuse(_cupti_reason(cupti, exc))
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
                        nid = names.get(key) or name_id(key, self._api_name(row[1]))
                        out.append(pack(K_API, nid, row[2], row[3], row[4], 0, 0, row[5], 0))
                    elif k == K_MEMCPY:  # (kind, copy, src, dst, start, end, correlation, stream, device, bytes)
                        key = ("memcpy", row[1], row[2], row[3])
                        nid = names.get(key) or name_id(key, self._memcpy_label(row[1], row[2], row[3]))
                        out.append(pack(K_MEMCPY, nid, row[4], row[5], row[6], row[7], row[8], 0, row[9]))
                    elif k == K_MEMSET:  # (kind, memory kind, start, end, correlation, stream, device, bytes)
                        key = ("memset", row[1])
                        nid = names.get(key) or name_id(key, f"Memset ({self._memory_label(row[1])})")
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

    def _api_name(self, cbid: int) -> str:
        try:
            return str(self._cupti.get_callback_name(self._cupti.CallbackDomain.RUNTIME_API, cbid))
        except Exception:  # noqa: BLE001 - a cbid this CUPTI cannot name
            return f"<runtime api {cbid}>"

    def _memory_label(self, kind: int) -> str:
        try:
            return self._cupti.ActivityMemoryKind(kind).name.replace("_", " ").title()
        except (ValueError, AttributeError):
            return f"kind {kind}"

    def _memcpy_label(self, ck: int, sk: int, dk: int) -> str:
        try:
            copy = _copy_kind_label(self._cupti.ActivityMemcpyKind(ck).name)
        except (ValueError, AttributeError):
            copy = f"kind {ck}"
        return f"Memcpy {copy} ({self._memory_label(sk)} -> {self._memory_label(dk)})"

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
            "announced": self.announced, "cupti_python": _cupti_python_version(), "enabled": list(self.enabled),
            "thread_ids": self.thread_ids, "records": dict(self.counts), "dropped": dict(self.dropped),
            "open_ranges": len(self._open_ranges), "callback_records": self.callback_records,
            "flushes": self.flushes, "flush_ns_total": self.flush_ns_total, "flush_ns_max": self.flush_ns_max,
            "anchors": list(self.anchors), "nvtx": dict(self.nvtx), "errors": list(self.errors),
            "started_ns": self.started_ns, "stopped_ns": self.stopped_ns, "updated_ns": time.time_ns(),
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
            self._at_exit()
        finally:
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return  # a forked child: the parent's records are the parent's to write
        self.stop_recording("exit")
        self.close_socket()

    def _after_fork(self) -> None:
        """In a forked child: forget everything, never write (the parent owns these files)."""
        self.state, self.reason = "forked", f"forked from pid {self.pid}"
        self._inbox = deque()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._flusher = None
        self._close_files()
        if self._listener is not None:
            try:
                self._listener.close()  # the parent's socket file stays: no unlink
            except OSError:
                pass
            self._listener = None

    # ------------------------------------------------------------------ control socket

    def serve(self) -> bool:
        """Listen on D/P.sock for a collector's start/stop/flush/status; False when impossible."""
        if self._listener is not None:
            return True
        path = self.path("sock")
        if len(path.encode()) > 107:
            self._error("socket", OSError(f"path too long for a Unix socket: {path}"))
            return False
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            if os.path.exists(path):
                os.unlink(path)  # left by an earlier process with this pid
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(8)
            sock.settimeout(1.0)
        except OSError as exc:
            self._error("socket", exc)
            return False
        self._listener = sock
        self._install_exit_hooks()  # the socket file goes at exit, recording or not
        threading.Thread(target=self._serve, args=(sock,), name="perfdiff-agent-control", daemon=True).start()
        return True

    def _serve(self, sock: socket.socket) -> None:
        while self._listener is sock:
            try:
                conn, _ = sock.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return
            with conn:
                try:
                    self._answer(conn)
                except (OSError, ValueError) as exc:
                    self._error("control", exc)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT_S)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid not in (os.getuid(), 0):
            return
        data = b""
        while not data.endswith(b"\n") and len(data) < 4096:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        cmd = json.loads(data or b"{}").get("cmd")
        if cmd == "start":
            self.start_recording()
        elif cmd == "stop":
            self.stop_recording()
        elif cmd == "flush":
            self.flush()
        reply = self.status()
        if cmd not in ("start", "stop", "flush", "status"):
            reply["error"] = f"unknown command {cmd!r}"
        conn.sendall(json.dumps(reply, default=str).encode() + b"\n")

    def close_socket(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            try:
                sock.close()
                os.unlink(self.path("sock"))
            except OSError:
                pass


_VERSION: list[str] = []


def _cupti_python_version() -> str:
    if not _VERSION:  # importlib.metadata scans sys.path: once per process
        try:
            from importlib.metadata import version

            _VERSION.append(version("cupti-python"))
        except Exception:  # noqa: BLE001 - not installed, or a test fake
            _VERSION.append("unknown")
    return _VERSION[0]


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


# ------------------------------------------------------------------------------ bootstrap

BOOTSTRAP = '''\
"""Written by `perfdiff collect`: start the perfdiff CUPTI agent in this Python process, then
run the sitecustomize module this one shadows, if any.  Never raises into the program."""


def _perfdiff_agent_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        mod = None
        try:
            from perfdiff.collectors import cupti_agent as mod
            if str(getattr(mod, "WIRE_VERSION", "")) != os.environ.get("PERFDIFF_AGENT_WIRE"):
                mod = None  # another perfdiff version in this environment: use the collector's file
        except Exception:
            mod = None
        if mod is None:
            import importlib.util
            spec = importlib.util.spec_from_file_location("_perfdiff_cupti_agent", os.environ["PERFDIFF_AGENT_FILE"])
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
        mod.start_from_env()
    except Exception as exc:
        try:
            sys.stderr.write("perfdiff agent: not started (%s: %s)\\n" % (type(exc).__name__, exc))
        except Exception:
            pass
    try:
        import importlib.machinery
        import importlib.util
        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
    except Exception as exc:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\\n%s: %s\\n"
                         % (type(exc).__name__, exc))


_perfdiff_agent_boot()
'''


def request(path: str, cmd: str, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any] | None:
    """Send one command to the agent listening at `path`; its status, or None when none answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data)
        return reply if isinstance(reply, dict) else None
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------ collector side


def record_dtype() -> np.dtype:
    """The numpy view of REC (48 bytes, little-endian)."""
    import numpy as np

    return np.dtype({"names": ["kind", "name", "start", "end", "corr", "stream", "device", "tid", "bytes"],
                     "formats": ["u1", "<u4", "<i8", "<i8", "<u4", "<u4", "<u4", "<u4", "<u8"],
                     "offsets": [0, 4, 8, 16, 24, 28, 32, 36, 40], "itemsize": REC.size})


def cupti_to_wall(raw_ns: np.ndarray, anchors: list[dict[str, Any]]) -> tuple[np.ndarray, dict[str, Any]]:
    """CUPTI ns → CLOCK_REALTIME ns with the agent's anchor pairs; (times, what was done).

    Anchors closer than SAME_CLOCK_NS (or twice their reading uncertainty) mean CUPTI reads
    CLOCK_REALTIME already (Linux): the times stay as they are.  Otherwise the offset is
    interpolated linearly between anchors (constant beyond them), in integer ns.
    """
    import numpy as np

    raw = np.asarray(raw_ns, dtype=np.int64)
    pairs = sorted((int(a["cupti_ns"]), int(a["realtime_ns"]) - int(a["cupti_ns"]), int(a.get("uncertainty_ns", 0)))
                   for a in anchors if "cupti_ns" in a and "realtime_ns" in a)
    if not pairs:
        return raw, {"applied": False, "why": "no clock anchors: CUPTI times taken as CLOCK_REALTIME"}
    c = np.array([p[0] for p in pairs], dtype=np.int64)
    off = np.array([p[1] for p in pairs], dtype=np.int64)
    tol = max(SAME_CLOCK_NS, 2 * max(p[2] for p in pairs))
    info = {"anchors": len(pairs), "offset_ns_first": int(off[0]), "offset_ns_last": int(off[-1]),
            "drift_ns": int(off[-1] - off[0]), "tolerance_ns": tol}
    if int(np.abs(off).max()) <= tol:
        return raw, {**info, "applied": False, "why": "CUPTI reads CLOCK_REALTIME"}
    base = int(off[0])
    shift = np.rint(np.interp(raw.astype(np.float64), c.astype(np.float64), (off - base).astype(np.float64)))
    return raw + base + shift.astype(np.int64), {**info, "applied": True}


class _Spool:
    """One agent's files as the collector reads them, and what spans polls (names, launches)."""

    def __init__(self, directory: str, file_pid: int, pid: int):
        import numpy as np

        self.directory = directory
        self.file_pid = file_pid  # the pid the agent sees (names its files)
        self.pid = pid  # the pid the collector sees
        self.rec_off = 0
        self.names_off = 0
        self.names_partial = b""
        self.names: dict[int, str] = {}
        self.status: dict[str, Any] = {}
        dt = record_dtype()
        self.held = np.zeros(0, dtype=dt)  # GPU records waiting one poll for their runtime call
        self.api_corr = np.zeros(0, np.int64)  # recent runtime calls, for the launch join
        self.api_start = np.zeros(0, np.int64)
        self.api_tid = np.zeros(0, np.int64)
        self.ranges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # for cpu rows at stop
        self.rows = {name: 0 for name in KIND_NAMES.values()}
        self.invalid = 0  # records with no valid time (incomplete at a forced flush)
        self.unjoined = 0  # GPU records whose runtime call was never seen
        self.ranges_before_start = 0
        self.clock: dict[str, Any] = {}
        self.warned: set[str] = set()

    def path(self, suffix: str) -> str:
        return os.path.join(self.directory, f"{self.file_pid}.{suffix}")

    def read_status(self) -> dict[str, Any]:
        try:
            with open(self.path("status.json"), encoding="utf-8") as fh:
                st = json.load(fh)
            if isinstance(st, dict):
                self.status = st
        except (OSError, ValueError):
            pass
        return self.status

    def read_records(self) -> np.ndarray:
        """The whole records appended since the last read, then the names they use."""
        import numpy as np

        data = _read_from(self.path("rec"), self.rec_off)
        n = len(data) // REC.size
        self.rec_off += n * REC.size
        recs = np.frombuffer(data[: n * REC.size], dtype=record_dtype()).copy()
        # Names are read after the records: the agent writes a name before any record using it.
        raw = self.names_partial + _read_from(self.path("names"), self.names_off)
        self.names_off += len(raw) - len(self.names_partial)
        cut = raw.rfind(b"\n") + 1
        self.names_partial = raw[cut:]
        for line in raw[:cut].decode("utf-8", "replace").splitlines():
            nid, _, name = line.partition("\t")
            if nid.isdigit():
                self.names[int(nid)] = name
        return recs if n else np.zeros(0, dtype=record_dtype())


def _read_from(path: str, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


class AgentTraceSource:
    """Kernel traces from perfdiff agents in the target, as rows for the collect loop.

    Announced (`collect -- CMD`): ``announce()`` makes a private directory and ``env()`` the
    variables for the command; every Python process of the command writes its own files there.
    Attached (`collect --pid`): ``attach(pid)`` finds the agent's socket (or says plainly that
    there is none); ``watch(pid)`` adds a child that runs its own agent.  The collect loop calls
    ``start(t_ns)``, ``sample(t_ns)`` every `interval_ns`, ``stop()`` once at the end (before a
    started command is stopped: agents are asked to flush), then ``manifest()`` and ``close()``.
    """

    name = "kernel-trace"
    interval_ns = POLL_NS

    def __init__(self, directory: str, *, announced: bool, warn: Callable[[str], None],
                 remove_dir: bool = False):
        self.directory = directory
        self.announced = announced
        self.warn = warn
        self.remove_dir = remove_dir
        self.spools: dict[int, _Spool] = {}
        self.sockets: dict[int, str] = {}  # attached mode: pid → its agent's socket
        self.t_start_ns = 0
        self.stopped = False
        self.unsupported: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.absent = ""  # attached mode: why there is no agent
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ set-up

    @classmethod
    def announce(cls, warn: Callable[[str], None]) -> AgentTraceSource:
        """A private hand-off directory (in /dev/shm when there is one) with the bootstrap in it."""
        import tempfile

        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        directory = tempfile.mkdtemp(prefix="perfdiff-agent-", dir=shm)
        boot = os.path.join(directory, "boot")
        os.mkdir(boot, 0o700)
        with open(os.path.join(boot, "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write(BOOTSTRAP)
        return cls(directory, announced=True, warn=warn, remove_dir=True)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment entries that start an agent in every Python process of the command."""
        base = os.environ if base is None else base
        boot = os.path.join(self.directory, "boot")
        pythonpath = os.pathsep.join(p for p in (boot, base.get("PYTHONPATH", "")) if p)
        return {ENV_DIR: self.directory, ENV_FILE: os.path.abspath(__file__), ENV_WIRE: str(WIRE_VERSION),
                "PYTHONPATH": pythonpath}

    @classmethod
    def attach(cls, pid: int, warn: Callable[[str], None], *, proc_root: str = "/proc",
               nspid: int | None = None) -> AgentTraceSource:
        """The source for running process `pid`: its agent's socket, or a plain warning and an
        inert source (host and GPU collection go on) when no agent answers."""
        directory = _agent_dir_of(pid, proc_root)
        src = cls(directory, announced=False, warn=warn)
        if not src.watch(pid, nspid):
            src.absent = (f"no perfdiff agent in pid {pid}: no kernel trace possible for that pid; "
                          "collecting host and GPU metrics only")
            warn(src.absent)
            src._unsupported(src.absent)
        return src

    def watch(self, pid: int, nspid: int | None = None) -> bool:
        """Attached mode: follow the agent of target process `pid`, if one answers; True if so."""
        if self.announced or pid in self.sockets:
            return pid in self.sockets
        file_pid = nspid or pid
        path = os.path.join(self.directory, f"{file_pid}.sock")
        reply = request(path, "status", timeout_s=2.0)
        if reply is None:
            return False
        self.sockets[pid] = path
        self.spools[pid] = _Spool(self.directory, file_pid, pid)
        if self.t_start_ns:  # joined during the run: start it now
            self._command(pid, "start")
        return True

    # ------------------------------------------------------------------ sampler protocol

    def start(self, t_ns: int) -> None:
        """The collection starts at `t_ns`; attached agents are told to record."""
        # The converters' imports (numpy, the importers' helpers: ~10 ms) happen here, before
        # the collect loop's first tick, not inside it at the first rows.
        import perfdiff.importers.common  # noqa: F401
        self.t_start_ns = t_ns
        for pid in list(self.sockets):
            self._command(pid, "start")

    def sample(self, t_ns: int) -> dict[str, pd.DataFrame]:
        """New rows since the last call (activity, markers)."""
        return self._collect(final=False)

    poll = sample

    def stop(self, t_ns: int | None = None) -> dict[str, pd.DataFrame]:
        """Ask every agent still answering to stop (a forced flush), then the last rows.
        (`t_ns`, the collection's end, is accepted for the collect loop's calling convention.)"""
        if self.stopped:
            return {}
        self.stopped = True
        for pid, path in self._live_sockets().items():
            reply = request(path, "stop")
            if reply is None:
                self.events.append({"t_ns": time.time_ns(), "device": "Host", "event": "agent-no-answer",
                                    "pid": pid})
        rows = self._collect(final=True)
        if self.announced and not self.spools:
            self._unsupported("no perfdiff agent started in the command (not a Python program, Python run "
                              "with -S or -I, or a sitecustomize that could not run): no kernel trace; "
                              "for other programs use --nsys", warn=True)
        return rows

    def manifest(self) -> dict[str, Any]:
        """Collector entry (agents, counts, drops, clock), unsupported reasons, events."""
        agents = []
        dropped: dict[str, int] = {}
        for sp in self.spools.values():
            st = sp.status
            agents.append({
                "pid": sp.pid, "state": st.get("state", "unknown"), "reason": st.get("reason", ""),
                "cupti_python": st.get("cupti_python"), "enabled": st.get("enabled", []),
                "thread_ids": st.get("thread_ids"), "rows": dict(sp.rows), "records": st.get("records", {}),
                "dropped": st.get("dropped", {}), "invalid": sp.invalid, "unjoined_launches": sp.unjoined,
                "ranges_before_start": sp.ranges_before_start, "flushes": st.get("flushes", 0),
                "flush_ns_total": st.get("flush_ns_total", 0), "flush_ns_max": st.get("flush_ns_max", 0),
                "clock": sp.clock, "anchors": st.get("anchors", []), "nvtx": st.get("nvtx", {}),
                "errors": st.get("errors", []),
            })
            for key, n in (st.get("dropped") or {}).items():
                if n:
                    dropped[f"kernel-trace {key}"] = dropped.get(f"kernel-trace {key}", 0) + int(n)
            if sp.invalid:
                dropped["kernel-trace incomplete records"] = dropped.get("kernel-trace incomplete records", 0) + sp.invalid
        return {
            "collector": {"name": self.name, "method": "cupti-agent", "mode": "announced" if self.announced else "attached",
                          "directory": self.directory, "agents": agents, "absent": self.absent},
            "unsupported": list(self.unsupported.values()),
            "events": list(self.events),
            "dropped": dropped,
        }

    def close(self) -> None:
        """Remove the hand-off files (and the private directory)."""
        if self.remove_dir:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for sp in self.spools.values():
            for suffix in ("rec", "names", "status.json"):
                try:
                    os.unlink(sp.path(suffix))
                except OSError:
                    pass

    # ------------------------------------------------------------------ reading

    def _command(self, pid: int, cmd: str) -> None:
        reply = request(self.sockets[pid], cmd)
        if reply is None:
            self.events.append({"t_ns": time.time_ns(), "device": "Host", "event": "agent-no-answer", "pid": pid,
                                "command": cmd})
        elif reply.get("state") == "unsupported":
            self._unsupported(f"no kernel trace from pid {pid}: {reply.get('reason')}", warn=True)

    def _live_sockets(self) -> dict[int, str]:
        if not self.announced:
            return dict(self.sockets)
        self._discover()
        out = {}
        for pid, sp in self.spools.items():
            path = sp.path("sock")
            if os.path.exists(path) and sp.read_status().get("state") == "recording":
                out[pid] = path
        return out

    def _discover(self) -> None:
        if not self.announced:
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name.endswith(".status.json") and name.split(".", 1)[0].isdigit():
                pid = int(name.split(".", 1)[0])
                if pid not in self.spools:
                    self.spools[pid] = _Spool(self.directory, pid, pid)

    def _collect(self, *, final: bool) -> dict[str, pd.DataFrame]:
        self._discover()
        if not self.spools:
            return {}  # no agent (yet): nothing to read, nothing to import
        from perfdiff.model.tables import concat_parts

        activity, markers = [], []
        for sp in self.spools.values():
            st = sp.read_status()
            if st.get("state") == "unsupported":
                self._unsupported(f"no kernel trace from pid {sp.pid}: {st.get('reason')}", warn=True)
            a, m = self._convert(sp, sp.read_records(), final=final)
            activity += a
            markers += m
            self._warn_drops(sp, st)
        out = {}
        if activity:
            out["activity"] = concat_parts("activity", activity)
        if markers:
            out["markers"] = concat_parts("markers", markers)
        return out

    def _warn_drops(self, sp: _Spool, st: dict[str, Any]) -> None:
        lost = int((st.get("dropped") or {}).get("cupti", 0)) + int((st.get("dropped") or {}).get("agent", 0))
        if lost and "dropped" not in sp.warned:
            sp.warned.add("dropped")
            self.warn(f"pid {sp.pid}: {lost:,} kernel-trace records dropped (CUPTI buffers full or a failed "
                      "write): the kernel trace is incomplete (counts in the manifest)")

    def _convert(self, sp: _Spool, recs: np.ndarray, *, final: bool) -> tuple[list, list]:
        """Records → activity and markers parts (launch join, wall clock, names)."""
        import numpy as np

        from perfdiff.model.tables import Part

        good = (recs["start"] > 0) & (recs["end"] >= recs["start"])
        sp.invalid += int((~good).sum())
        recs = recs[good]
        kind = recs["kind"]
        start, sp.clock = cupti_to_wall(recs["start"], sp.status.get("anchors") or [])
        end = start + (recs["end"] - recs["start"])
        parts: list[Part] = []
        api = kind == K_API
        if api.any():
            self._remember_launches(sp, recs["corr"][api].astype(np.int64), start[api], recs["tid"][api].astype(np.int64))
            parts.append(self._part(sp, recs[api], start[api], end[api], "api"))
        gpu_new = np.isin(kind, (K_KERNEL, K_MEMCPY, K_MEMSET))
        gpu = np.concatenate([sp.held, recs[gpu_new]])
        g_start = np.concatenate([cupti_to_wall(sp.held["start"], sp.status.get("anchors") or [])[0], start[gpu_new]])
        may_hold = np.concatenate([np.zeros(len(sp.held), bool), np.ones(int(gpu_new.sum()), bool)])
        launch, tid = self._launches(sp, gpu["corr"].astype(np.int64))
        hold = (launch < 0) & may_hold & (not final)
        sp.held = gpu[hold]
        keep = ~hold
        gpu, g_start, launch, tid = gpu[keep], g_start[keep], launch[keep], tid[keep]
        sp.unjoined += int((launch < 0).sum())
        g_end = g_start + (gpu["end"] - gpu["start"])
        for k, label in ((K_KERNEL, "kernel"), (K_MEMCPY, "memcpy"), (K_MEMSET, "memset")):
            sel = gpu["kind"] == k
            if sel.any():
                parts.append(self._part(sp, gpu[sel], g_start[sel], g_end[sel], label, launch[sel], tid[sel]))
        markers: list[Part] = []
        rng = kind == K_RANGE
        if rng.any():
            markers += self._ranges(sp, recs[rng], start[rng], end[rng])
        if final:
            parts += self._cpu_rows(sp)
        return parts, markers

    @staticmethod
    def _remember_launches(sp: _Spool, corr: np.ndarray, start: np.ndarray, tid: np.ndarray) -> None:
        import numpy as np

        sp.api_corr = np.concatenate([sp.api_corr, corr])[-RETAIN_API:]
        sp.api_start = np.concatenate([sp.api_start, start])[-RETAIN_API:]
        sp.api_tid = np.concatenate([sp.api_tid, tid])[-RETAIN_API:]

    @staticmethod
    def _launches(sp: _Spool, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(launch_ns, tid) of the runtime call with each correlation id; -1 where none was seen."""
        import numpy as np

        n = len(corr)
        launch = np.full(n, -1, dtype=np.int64)
        tid = np.full(n, -1, dtype=np.int64)
        if n == 0 or len(sp.api_corr) == 0:
            return launch, tid
        order = np.argsort(sp.api_corr, kind="stable")
        keys = sp.api_corr[order]
        pos = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
        hit = (keys[pos] == corr) & (corr > 0)
        row = order[pos[hit]]
        launch[hit] = sp.api_start[row]
        tid[hit] = sp.api_tid[row]
        return launch, tid

    @staticmethod
    def _labels(sp: _Spool, name_ids: np.ndarray, strip: bool = False) -> Any:
        """Name ids → a categorical of their names (runtime calls without the `_v7000` suffix)."""
        import numpy as np

        from perfdiff.model.cuda_names import strip_api_version
        from perfdiff.model.tables import categorical, dense_codes

        codes, uniq = dense_codes(np.asarray(name_ids, dtype=np.int64))
        labels = [sp.names.get(int(u), f"<name {int(u)}>") for u in uniq]
        return categorical(codes, [strip_api_version(x) for x in labels] if strip else labels)

    def _part(self, sp: _Spool, recs: np.ndarray, start: np.ndarray, end: np.ndarray, kind: str,
              launch: np.ndarray | None = None, tid: np.ndarray | None = None) -> Any:
        import numpy as np

        from perfdiff.model.schema import MISSING
        from perfdiff.model.tables import Part, categorical, constant_categorical, dense_codes

        n = len(recs)
        sp.rows[kind] += n
        if kind == "api":
            device = constant_categorical("Host", n)
            tid = recs["tid"].astype(np.int64)
        else:
            codes, uniq = dense_codes(recs["device"].astype(np.int64))
            device = categorical(codes, [f"GPU {int(d)}" for d in uniq])
        cols = {"function": self._labels(sp, recs["name"], strip=kind == "api"),
                "kind": constant_categorical(kind, n), "device": device,
                "start_ns": start, "end_ns": end, "busy_ns": end - start,
                "tid": np.full(n, MISSING, np.int64) if tid is None else np.where(tid > 0, tid, MISSING),
                "correlation": recs["corr"].astype(np.int64)}
        if kind != "api":
            cols["stream"] = recs["stream"].astype(np.int64)
            cols["launch_ns"] = np.where(launch >= 0, launch, MISSING) if launch is not None else np.full(n, MISSING)
        if kind in ("memcpy", "memset"):
            cols["bytes"] = recs["bytes"].astype(np.int64)
        return Part("activity", cols)

    def _ranges(self, sp: _Spool, recs: np.ndarray, start: np.ndarray, end: np.ndarray) -> list:
        """NVTX ranges → markers (those begun before the collection started are dropped, as
        collect drops its own marks: their cycle lacks samples)."""
        import numpy as np

        from perfdiff.model.tables import Part, constant_categorical

        inside = start >= self.t_start_ns
        sp.ranges_before_start += int((~inside).sum())
        recs, start, end = recs[inside], start[inside], end[inside]
        n = len(recs)
        if n == 0:
            return []
        tid = np.where(recs["tid"] > 0, recs["tid"].astype(np.int64), -1)
        sp.ranges.append((recs["name"].astype(np.int64), start, end, tid))
        sp.rows["nvtx"] += n
        return [Part("markers", {"name": self._labels(sp, recs["name"]), "start_ns": start, "end_ns": end,
                                 "tid": tid, "source": constant_categorical("nvtx", n)})]

    def _cpu_rows(self, sp: _Spool) -> list:
        """All NVTX ranges of the run as kind "cpu" with their self time (needs every range: at stop)."""
        import numpy as np

        from perfdiff.model.tables import Part, constant_categorical
        from perfdiff.model.intervals import self_time_ns

        if not sp.ranges:
            return []
        name, start, end, tid = (np.concatenate(c) for c in zip(*sp.ranges, strict=True))
        sp.ranges = []
        n = len(name)
        return [Part("activity", {"function": self._labels(sp, name), "kind": constant_categorical("cpu", n),
                                  "device": constant_categorical("Host", n), "start_ns": start, "end_ns": end,
                                  "busy_ns": self_time_ns(tid, start, end), "tid": tid})]

    def _unsupported(self, reason: str, *, warn: bool = False) -> None:
        if reason in self.unsupported:
            return
        self.unsupported[reason] = {"device": "GPU", "metric": "kernel_trace", "reason": reason,
                                    "since_ns": time.time_ns()}
        if warn and reason not in self._warned:
            self._warned.add(reason)
            self.warn(reason)


def _agent_dir_of(pid: int, proc_root: str) -> str:
    """Where the agent of `pid` listens, as this collector sees it (through /proc/PID/root
    when the target lives in another mount namespace)."""
    from perfdiff.collectors.markers import other_mount_ns, target_env, target_uid

    root = os.path.join(proc_root, str(pid), "root") if other_mount_ns(pid, proc_root) else ""
    env_dir = target_env(pid, proc_root).get(ENV_DIR)
    return root + env_dir if env_dir else default_agent_dir(target_uid(pid, proc_root), root)
