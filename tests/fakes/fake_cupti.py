"""A fake of cupti-python's ``cupti.cupti`` module for tests without a GPU, in named scenarios.

What is copied from cupti-python 13.4 (its wheel's ``cupti/cupti.pyi``, its samples, and the
module itself loaded on a machine without a driver):

* function names and signatures: ``activity_register_callbacks(func_buffer_requested,
  func_buffer_completed)`` (requested returns ``(bytes, max_records)``, completed receives a
  list of record objects), ``activity_enable/disable(kind)``, ``activity_flush_all(flag)``
  (flag 1 = FLUSH_FORCED), ``activity_flush_period(ms)``, ``activity_get_num_dropped_records(
  context, stream_id, dropped)`` where ``dropped`` is the address of a size_t that receives the
  count since the last call, ``get_timestamp() -> int`` (ns), ``set_thread_id_type(type)``,
  ``get_callback_name(domain, cbid) -> str``, ``finalize()``;
* enum names and values (ActivityKind, Result, ActivityFlag — which has no MARKER_END member —,
  ActivityMemcpyKind, ActivityMemoryKind, CallbackDomain, ActivityObjectKind,
  ActivityThreadIdType, RuntimeApiTraceCbid for the calls played here);
* record classes and fields: ActivityKernel11 (CONCURRENT_KERNEL: name, start, end,
  correlation_id, stream_id, device_id …), ActivityMemcpy6 (bytes, copy_kind, src_kind,
  dst_kind …), ActivityMemset4 (bytes, value, memory_kind …), ActivityAPI (RUNTIME: cbid,
  start, end, correlation_id, process_id, thread_id, return_value), ActivityMarker2 (flags_,
  timestamp, id, name, domain, object_kind, object_id.pt.thread_id); times in ns;
* errors: ``cuptiError(status)`` with ``.status`` and the text ``"ERROR_NAME (value)"``;
  without a driver every call raises ``NotSupportedError('CUDA driver is not found
  (libcuda.so.1: cannot open shared object file: No such file or directory)')`` (a
  RuntimeError; the exact class and text seen on this machine).

What the fake decides where cupti-python's behaviour was not observable (no GPU here):
records are valid only during the buffer-completed call (afterwards their fields are gone, so
a client that keeps them fails loudly); a full buffer is delivered on the thread that filled
it; a non-forced flush delivers completed work only, a forced one also delivers unfinished GPU
work with zero timestamps (as CUPTI documents for forced flushes); libcupti missing raises a
RuntimeError named like cuda.pathfinder's ``DynamicLibNotFoundError`` (message text made up);
a CUDA/driver mismatch is ``ERROR_NOT_INITIALIZED`` at the first activity_enable, as seen with
newer CUPTIs on old drivers; the second-subscriber error is raised at the call chosen by
``subscriber_error_at``.  NVTX ranges become MARKER records only when, at the first NVTX call,
NVTX_INJECTION64_PATH names an existing file, as NVTX's one-time initialisation does; the
"library load" at the first CUPTI call maps a copy of libm named ``libcupti.so.13`` so that
/proc/self/maps shows a libcupti, as the real load does.

The GPU is simulated on the wall clock (``get_timestamp`` = time.time_ns() + clock_offset_ns):
a kernel starts when its stream is free, ``synchronize()`` sleeps until all streams are idle.
``FakeCupti`` (``module._fake``) plays the workload: ``launch``, ``memcpy``, ``memset``,
``synchronize``, ``nvtx_push``/``nvtx_pop``/``nvtx_mark``, and ``play_steps``.
"""
from __future__ import annotations

import ctypes
import enum
import os
import shutil
import sys
import tempfile
import threading
import time
import types
import weakref
from pathlib import Path
from typing import Any, Callable

SCENARIOS = ("kernels_and_markers", "dropped_records", "second_subscriber", "flush_at_exit", "forking_target",
             "clock_offset", "cupti_missing", "libcupti_missing", "no_driver", "driver_mismatch")
RECORD_BYTES = 256  # bytes one fake record takes in a CUPTI buffer (real records are 64–300 bytes)
LAUNCH_LATENCY_NS = 4_000  # from the launch call to the earliest kernel start
API_NS = 3_000  # duration of a runtime call's record

ActivityKind = enum.IntEnum("ActivityKind", {
    "INVALID": 0, "MEMCPY": 1, "MEMSET": 2, "KERNEL": 3, "DRIVER": 4, "RUNTIME": 5, "EVENT": 6, "METRIC": 7,
    "DEVICE": 8, "CONTEXT": 9, "CONCURRENT_KERNEL": 10, "NAME": 11, "MARKER": 12, "MARKER_DATA": 13,
    "SOURCE_LOCATOR": 14, "GLOBAL_ACCESS": 15, "BRANCH": 16, "OVERHEAD": 17, "CDP_KERNEL": 18, "PREEMPTION": 19,
    "ENVIRONMENT": 20, "EVENT_INSTANCE": 21, "MEMCPY2": 22, "METRIC_INSTANCE": 23, "INSTRUCTION_EXECUTION": 24,
    "UNIFIED_MEMORY_COUNTER": 25, "FUNCTION": 26, "MODULE": 27, "DEVICE_ATTRIBUTE": 28, "SHARED_ACCESS": 29,
    "PC_SAMPLING": 30, "PC_SAMPLING_RECORD_INFO": 31, "INSTRUCTION_CORRELATION": 32, "OPENACC_DATA": 33,
    "OPENACC_LAUNCH": 34, "OPENACC_OTHER": 35, "CUDA_EVENT": 36, "STREAM": 37, "SYNCHRONIZATION": 38,
    "EXTERNAL_CORRELATION": 39, "NVLINK": 40, "INSTANTANEOUS_EVENT": 41, "INSTANTANEOUS_EVENT_INSTANCE": 42,
    "INSTANTANEOUS_METRIC": 43, "INSTANTANEOUS_METRIC_INSTANCE": 44, "MEMORY": 45, "PCIE": 46, "OPENMP": 47,
    "INTERNAL_LAUNCH_API": 48, "MEMORY2": 49, "MEMORY_POOL": 50, "GRAPH_TRACE": 51, "JIT": 52,
    "DEVICE_GRAPH_TRACE": 53, "MEM_DECOMPRESS": 54, "ROTATION": 55, "GRAPH_HOST_NODE": 56,
    "COMPUTE_ENGINE_CTX_SWITCH": 57, "HOST_LAUNCH": 58, "GREEN_CONTEXT": 59, "COUNT": 60, "FORCE_INT": 0x7FFFFFFF})
Result = enum.IntEnum("Result", {
    "SUCCESS": 0, "ERROR_INVALID_PARAMETER": 1, "ERROR_INVALID_DEVICE": 2, "ERROR_INVALID_CONTEXT": 3,
    "ERROR_INVALID_EVENT_DOMAIN_ID": 4, "ERROR_INVALID_EVENT_ID": 5, "ERROR_INVALID_EVENT_NAME": 6,
    "ERROR_INVALID_OPERATION": 7, "ERROR_OUT_OF_MEMORY": 8, "ERROR_HARDWARE": 9,
    "ERROR_PARAMETER_SIZE_NOT_SUFFICIENT": 10, "ERROR_API_NOT_IMPLEMENTED": 11, "ERROR_MAX_LIMIT_REACHED": 12,
    "ERROR_NOT_READY": 13, "ERROR_NOT_COMPATIBLE": 14, "ERROR_NOT_INITIALIZED": 15, "ERROR_INVALID_METRIC_ID": 16,
    "ERROR_INVALID_METRIC_NAME": 17, "ERROR_QUEUE_EMPTY": 18, "ERROR_INVALID_HANDLE": 19,
    "ERROR_INVALID_STREAM": 20, "ERROR_INVALID_KIND": 21, "ERROR_INVALID_EVENT_VALUE": 22, "ERROR_DISABLED": 23,
    "ERROR_INVALID_MODULE": 24, "ERROR_INVALID_METRIC_VALUE": 25, "ERROR_HARDWARE_BUSY": 26,
    "ERROR_NOT_SUPPORTED": 27, "ERROR_UM_PROFILING_NOT_SUPPORTED": 28,
    "ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE": 29, "ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES": 30,
    "ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS": 31, "ERROR_CDP_TRACING_NOT_SUPPORTED": 32,
    "ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED": 33, "ERROR_CUDA_COMPILER_NOT_COMPATIBLE": 34,
    "ERROR_INSUFFICIENT_PRIVILEGES": 35, "ERROR_OLD_PROFILER_API_INITIALIZED": 36,
    "ERROR_OPENACC_UNDEFINED_ROUTINE": 37, "ERROR_LEGACY_PROFILER_NOT_SUPPORTED": 38,
    "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED": 39, "ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES": 40,
    "ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED": 41, "ERROR_CMP_DEVICE_NOT_SUPPORTED": 42,
    "ERROR_MIG_DEVICE_NOT_SUPPORTED": 43, "ERROR_SLI_DEVICE_NOT_SUPPORTED": 44, "ERROR_WSL_DEVICE_NOT_SUPPORTED": 45,
    "ERROR_INVALID_CHIP_NAME": 46, "ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS": 47, "ERROR_UNKNOWN": 999,
    "ERROR_FORCE_INT": 0x7FFFFFFF})
ActivityFlag = enum.IntEnum("ActivityFlag", [  # aliases as in cupti-python (several names share a value)
    ("NONE", 0), ("DEVICE_CONCURRENT_KERNELS", 1), ("DEVICE_ATTRIBUTE_CUDEVICE", 1), ("MEMCPY_ASYNC", 1),
    ("MARKER_INSTANTANEOUS", 1), ("MARKER_START", 2), ("MARKER_SYNC_ACQUIRE", 8), ("MARKER_SYNC_ACQUIRE_SUCCESS", 16),
    ("MARKER_SYNC_ACQUIRE_FAILED", 32), ("MARKER_SYNC_RELEASE", 64), ("MARKER_COLOR_NONE", 1),
    ("MARKER_COLOR_ARGB", 2), ("FLUSH_FORCED", 1), ("MEMSET_ASYNC", 1), ("FORCE_INT", 0x7FFFFFFF)])
ActivityMemcpyKind = enum.IntEnum("ActivityMemcpyKind", {
    "UNKNOWN": 0, "HTOD": 1, "DTOH": 2, "HTOA": 3, "ATOH": 4, "ATOA": 5, "ATOD": 6, "DTOA": 7, "DTOD": 8,
    "HTOH": 9, "PTOP": 10, "FORCE_INT": 0x7FFFFFFF})
ActivityMemoryKind = enum.IntEnum("ActivityMemoryKind", {
    "UNKNOWN": 0, "PAGEABLE": 1, "PINNED": 2, "DEVICE": 3, "ARRAY": 4, "MANAGED": 5, "DEVICE_STATIC": 6,
    "MANAGED_STATIC": 7, "FORCE_INT": 0x7FFFFFFF})
CallbackDomain = enum.IntEnum("CallbackDomain", {
    "INVALID": 0, "DRIVER_API": 1, "RUNTIME_API": 2, "RESOURCE": 3, "SYNCHRONIZE": 4, "NVTX": 5, "STATE": 6,
    "SIZE": 7, "FORCE_INT": 0x7FFFFFFF})
ActivityObjectKind = enum.IntEnum("ActivityObjectKind", {
    "UNKNOWN": 0, "PROCESS": 1, "THREAD": 2, "DEVICE": 3, "CONTEXT": 4, "STREAM": 5, "FORCE_INT": 0x7FFFFFFF})
ActivityThreadIdType = enum.IntEnum("ActivityThreadIdType", {"DEFAULT": 0, "SYSTEM": 1, "SIZE": 2,
                                                             "FORCE_INT": 0x7FFFFFFF})
RuntimeApiTraceCbid = enum.IntEnum("RuntimeApiTraceCbid", {  # the calls this fake plays, real values
    "INVALID": 0, "cudaGetDevice_v3020": 17, "cudaMemcpy_v3020": 31, "cudaMemcpyAsync_v3020": 41,
    "cudaMemsetAsync_v3020": 51, "cudaStreamSynchronize_v3020": 131, "cudaEventRecord_v3020": 135,
    "cudaDeviceSynchronize_v3020": 165, "cudaLaunchKernel_v7000": 211, "cudaGraphLaunch_v10000": 311,
    "cudaLaunchKernelExC_v11060": 430})


class cuptiError(Exception):  # noqa: N801 - cupti-python's name
    """cupti-python's error: ``status`` is the CUPTI result code."""

    def __init__(self, status: int):
        self.status = int(status)
        try:
            text = f"{Result(self.status).name} ({self.status})"
        except ValueError:
            text = f"UNKNOWN ({self.status})"
        super().__init__(text)


class NotSupportedError(RuntimeError):
    """cupti._internal.utils.NotSupportedError: no CUDA driver to load."""


class DynamicLibNotFoundError(RuntimeError):
    """cuda.pathfinder's error when a CUDA library (here libcupti) is not found."""


# ------------------------------------------------------------------------------ records


class _Record:
    __slots__ = ()

    def _free(self) -> None:
        """CUPTI reuses the buffer after the callback: the record's fields are gone."""
        for cls in type(self).__mro__:
            for name in getattr(cls, "__slots__", ()):
                try:
                    object.__delattr__(self, name)
                except AttributeError:
                    pass


class _Pt:
    __slots__ = ("process_id", "thread_id")

    def __init__(self, process_id: int = 0, thread_id: int = 0):
        self.process_id, self.thread_id = process_id, thread_id


class _Dcs:
    __slots__ = ("device_id", "context_id", "stream_id")

    def __init__(self) -> None:
        self.device_id = self.context_id = self.stream_id = 0


class ActivityObjectKindId:
    __slots__ = ("pt", "dcs")

    def __init__(self, process_id: int = 0, thread_id: int = 0):
        self.pt, self.dcs = _Pt(process_id, thread_id), _Dcs()


class ActivityKernel11(_Record):
    __slots__ = ("kind", "name", "start", "end", "correlation_id", "stream_id", "device_id", "context_id",
                 "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "graph_id")


class ActivityMemcpy6(_Record):
    __slots__ = ("kind", "copy_kind", "src_kind", "dst_kind", "bytes", "start", "end", "correlation_id",
                 "runtime_correlation_id", "stream_id", "device_id", "context_id", "flags_")


class ActivityMemset4(_Record):
    __slots__ = ("kind", "value", "bytes", "start", "end", "correlation_id", "stream_id", "device_id",
                 "context_id", "memory_kind", "flags_")


class ActivityAPI(_Record):
    __slots__ = ("kind", "cbid", "start", "end", "correlation_id", "process_id", "thread_id", "return_value")


class ActivityMarker2(_Record):
    __slots__ = ("kind", "flags_", "timestamp", "id", "name", "domain", "object_kind", "object_id")


def _make(cls: type, **fields: Any) -> Any:
    rec = cls()
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


# ------------------------------------------------------------------------------ the fake

_GPU_KINDS = (int(ActivityKind.CONCURRENT_KERNEL), int(ActivityKind.MEMCPY), int(ActivityKind.MEMSET))
_FAKES: weakref.WeakSet[FakeCupti] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for fake in list(_FAKES):
        fake.lock = threading.RLock()  # a lock held by a parent's thread at fork would never be released


os.register_at_fork(after_in_child=_after_fork_in_child)


def _libm_path() -> str | None:
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            for line in fh:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libm.so"):
                    return path
    except OSError:
        pass
    return None


def _fake_libcupti(d: Path) -> Path | None:
    """`d`/libcupti.so.13: a copy of libm (a harmless shared object) under libcupti's soname."""
    src = _libm_path()
    if src is None:
        return None
    dst = d / "libcupti.so.13"
    if not dst.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".libcupti.{os.getpid()}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return dst


def _map_fake_libcupti() -> str | None:
    """Map "libcupti" as cupti-python's load would: the wheel's (nvidia/cu13/lib on sys.path,
    as write_package lays it out), else a copy per uid in the temp directory."""
    for base in sys.path:
        wheel = Path(base or ".") / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
        if wheel.is_file():
            ctypes.CDLL(str(wheel.resolve()))
            return str(wheel.resolve())
    dst = _fake_libcupti(Path(tempfile.gettempdir()) / f"fake-cupti-{os.getuid()}")
    if dst is None:
        return None
    ctypes.CDLL(str(dst))
    return str(dst)


class FakeCupti:
    """CUPTI's behaviour behind the fake module: what is enabled, buffers, drops, the fake GPU.

    `queue_limit`: records CUPTI can hold between deliveries (the rest is dropped and counted);
    `deliver_when_full`: hand a full buffer over at once (False: only at flush).
    """

    def __init__(self, scenario: str = "kernels_and_markers", *, clock_offset_ns: int = 0,
                 queue_limit: int | None = None, deliver_when_full: bool = True,
                 subscriber_error_at: str = "activity_enable"):
        if scenario not in SCENARIOS:
            raise KeyError(f"unknown fake CUPTI scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        self.scenario = scenario
        if scenario == "clock_offset" and not clock_offset_ns:
            clock_offset_ns = time.monotonic_ns() - time.time_ns()  # CUPTI on CLOCK_MONOTONIC
        if scenario == "dropped_records" and queue_limit is None:
            queue_limit, deliver_when_full = 50, False
        self.clock_offset_ns = clock_offset_ns
        self.queue_limit = queue_limit
        self.deliver_when_full = deliver_when_full
        self.subscriber_error_at = subscriber_error_at
        self.lock = threading.RLock()
        self.requested: Callable[[], Any] | None = None
        self.completed: Callable[[list], Any] | None = None
        self.enabled: set[int] = set()
        self.enable_calls: list[str] = []
        self.thread_id_type = int(ActivityThreadIdType.DEFAULT)
        self.flush_period_ms = 0
        self.pending: list[Any] = []
        self.capacity = 0  # records in the current buffer (0: none requested yet)
        self.dropped = 0
        self.dropped_total = 0
        self.corr = 0
        self.marker_id = 0
        self.stream_free: dict[int, int] = {}
        self.nvtx_on: bool | None = None  # None until the first NVTX call
        self.ranges: dict[int, list[int]] = {}
        self.library: str | None = None
        self.flush_flags: list[int] = []
        self.buffers_delivered = 0
        self.records_delivered = 0
        self.calls: dict[str, int] = {}
        self.finalized = False
        _FAKES.add(self)

    # -------------------------------------------------------------- library load and errors

    def call(self, name: str) -> None:
        """Every CUPTI call: count it, load "libcupti" the first time, play the scenario's error."""
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.scenario == "no_driver":
            raise NotSupportedError("CUDA driver is not found (libcuda.so.1: cannot open shared object file: "
                                    "No such file or directory)")
        if self.scenario == "libcupti_missing":
            raise DynamicLibNotFoundError('Failure finding "libcupti.so": no CUPTI in the CUDA installation or '
                                          "wheels (fake message)")
        if self.library is None:
            self.library = _map_fake_libcupti() or ""
        if self.scenario == "second_subscriber" and name == self.subscriber_error_at:
            raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        if self.scenario == "driver_mismatch" and name == "activity_enable":
            raise cuptiError(Result.ERROR_NOT_INITIALIZED)

    def now(self) -> int:
        return time.time_ns() + self.clock_offset_ns

    def tid(self) -> int:
        if self.thread_id_type == ActivityThreadIdType.SYSTEM:
            return threading.get_native_id()
        return threading.get_ident() & 0xFFFFFFFF  # pthread_self truncated to the record's uint32

    # -------------------------------------------------------------- buffers

    def emit(self, rec: Any) -> None:
        with self.lock:
            if rec.kind not in self.enabled:
                return
            if self.queue_limit is not None and len(self.pending) >= self.queue_limit:
                self.dropped += 1
                self.dropped_total += 1
                return
            if self.capacity == 0:
                self.capacity = self._request()
            self.pending.append(rec)
            if self.deliver_when_full and len(self.pending) >= self.capacity:
                self._deliver(self.pending[: self.capacity])
                del self.pending[: self.capacity]
                self.capacity = 0

    def _request(self) -> int:
        if self.requested is None:
            raise AssertionError("records before activity_register_callbacks")
        size, max_records = self.requested()
        if not (isinstance(size, int) and isinstance(max_records, int) and size > 0 and max_records >= 0):
            raise AssertionError(f"buffer_requested must return (bytes > 0, max_records >= 0), got {(size, max_records)}")
        cap = max(1, size // RECORD_BYTES)
        return min(cap, max_records) if max_records else cap

    def _deliver(self, records: list) -> None:
        if not records or self.completed is None:
            return
        self.buffers_delivered += 1
        self.records_delivered += len(records)
        try:
            self.completed(list(records))
        finally:
            for rec in records:
                rec._free()

    def flush(self, flag: int) -> None:
        with self.lock:
            self.flush_flags.append(int(flag))
            now = self.now()
            forced = bool(int(flag) & ActivityFlag.FLUSH_FORCED)
            done, left = [], []
            for rec in self.pending:
                end = rec.end if rec.kind in _GPU_KINDS else None
                if end is None or end <= now:
                    done.append(rec)
                elif forced:  # unfinished GPU work, flushed by force: no valid timestamps
                    rec.start = rec.end = 0
                    done.append(rec)
                else:
                    left.append(rec)
            self.pending = left
            self.capacity = 0 if not left else self.capacity
            while done:
                cap = self._request()
                self._deliver(done[:cap])
                del done[:cap]

    # -------------------------------------------------------------- the simulated GPU

    def _api(self, cbid: int, t0: int) -> int:
        self.corr += 1
        self.emit(_make(ActivityAPI, kind=int(ActivityKind.RUNTIME), cbid=int(cbid), start=t0, end=t0 + API_NS,
                        correlation_id=self.corr, process_id=os.getpid(), thread_id=self.tid(), return_value=0))
        return self.corr

    def _gpu_slot(self, stream: int, t0: int, dur_ns: int) -> tuple[int, int]:
        start = max(t0 + LAUNCH_LATENCY_NS, self.stream_free.get(stream, 0))
        self.stream_free[stream] = start + dur_ns
        return start, start + dur_ns

    def launch(self, name: str, dur_ns: int, *, stream: int = 7, device: int = 0) -> int:
        """cudaLaunchKernel: a RUNTIME record now, a CONCURRENT_KERNEL record when the stream frees."""
        with self.lock:
            t0 = self.now()
            corr = self._api(RuntimeApiTraceCbid.cudaLaunchKernel_v7000, t0)
            s, e = self._gpu_slot(stream, t0, dur_ns)
            self.emit(_make(ActivityKernel11, kind=int(ActivityKind.CONCURRENT_KERNEL), name=name, start=s, end=e,
                            correlation_id=corr, stream_id=stream, device_id=device, context_id=1, grid_x=128,
                            grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1, registers_per_thread=32,
                            graph_id=0))
            return corr

    def memcpy(self, nbytes: int, dur_ns: int, *, copy_kind: int = ActivityMemcpyKind.HTOD,
               src_kind: int = ActivityMemoryKind.PINNED, dst_kind: int = ActivityMemoryKind.DEVICE,
               stream: int = 7, device: int = 0) -> int:
        """cudaMemcpyAsync of `nbytes`."""
        with self.lock:
            t0 = self.now()
            corr = self._api(RuntimeApiTraceCbid.cudaMemcpyAsync_v3020, t0)
            s, e = self._gpu_slot(stream, t0, dur_ns)
            self.emit(_make(ActivityMemcpy6, kind=int(ActivityKind.MEMCPY), copy_kind=int(copy_kind),
                            src_kind=int(src_kind), dst_kind=int(dst_kind), bytes=nbytes, start=s, end=e,
                            correlation_id=corr, runtime_correlation_id=corr, stream_id=stream, device_id=device,
                            context_id=1, flags_=int(ActivityFlag.MEMCPY_ASYNC)))
            return corr

    def memset(self, nbytes: int, dur_ns: int, *, stream: int = 7, device: int = 0) -> int:
        """cudaMemsetAsync of `nbytes` of device memory."""
        with self.lock:
            t0 = self.now()
            corr = self._api(RuntimeApiTraceCbid.cudaMemsetAsync_v3020, t0)
            s, e = self._gpu_slot(stream, t0, dur_ns)
            self.emit(_make(ActivityMemset4, kind=int(ActivityKind.MEMSET), value=0, bytes=nbytes, start=s, end=e,
                            correlation_id=corr, stream_id=stream, device_id=device, context_id=1,
                            memory_kind=int(ActivityMemoryKind.DEVICE), flags_=int(ActivityFlag.MEMSET_ASYNC)))
            return corr

    def synchronize(self) -> None:
        """cudaDeviceSynchronize: wait (really) until every stream is idle."""
        with self.lock:
            t0 = self.now()
            done = max(self.stream_free.values(), default=t0)
        if done > t0:
            time.sleep((done - t0) / 1e9)
        with self.lock:
            self.corr += 1
            self.emit(_make(ActivityAPI, kind=int(ActivityKind.RUNTIME),
                            cbid=int(RuntimeApiTraceCbid.cudaDeviceSynchronize_v3020), start=t0,
                            end=max(self.now(), t0), correlation_id=self.corr, process_id=os.getpid(),
                            thread_id=self.tid(), return_value=0))

    def _nvtx(self) -> bool:
        if self.nvtx_on is None:  # NVTX reads the injection variable once, at the first call
            path = os.environ.get("NVTX_INJECTION64_PATH", "")
            self.nvtx_on = bool(path) and os.path.exists(path)
        return self.nvtx_on

    def _marker(self, flags: int, mid: int, name: str, domain: str) -> None:
        self.emit(_make(ActivityMarker2, kind=int(ActivityKind.MARKER), flags_=flags, timestamp=self.now(), id=mid,
                        name=name, domain=domain, object_kind=int(ActivityObjectKind.THREAD),
                        object_id=ActivityObjectKindId(os.getpid(), self.tid())))

    def nvtx_push(self, name: str, domain: str = "") -> None:
        """nvtxRangePushA (in `domain` when given): a MARKER start record."""
        if not self._nvtx():
            return
        with self.lock:
            self.marker_id += 1
            self.ranges.setdefault(threading.get_ident(), []).append(self.marker_id)
            self._marker(int(ActivityFlag.MARKER_START), self.marker_id, name, domain)

    def nvtx_pop(self) -> None:
        """nvtxRangePop: a MARKER end record (no name, as CUPTI gives it)."""
        if not self._nvtx():
            return
        with self.lock:
            stack = self.ranges.get(threading.get_ident())
            if stack:
                self._marker(4, stack.pop(), "", "")  # CUPTI_ACTIVITY_FLAG_MARKER_END

    def nvtx_mark(self, name: str) -> None:
        """nvtxMarkA: an instantaneous MARKER record."""
        if not self._nvtx():
            return
        with self.lock:
            self.marker_id += 1
            self._marker(int(ActivityFlag.MARKER_INSTANTANEOUS), self.marker_id, name, "")

    def play_steps(self, steps: int, kernels: list[tuple[str, int]], *, step_name: str = "step",
                   copy_bytes: int = 0, sync: bool = True) -> None:
        """`steps` iterations: an NVTX range around the kernels (and a copy), synchronised."""
        for _ in range(steps):
            self.nvtx_push(step_name)
            if copy_bytes:
                self.memcpy(copy_bytes, 20_000)
            for name, dur_ns in kernels:
                self.launch(name, dur_ns)
            if sync:
                self.synchronize()
            self.nvtx_pop()


def build(scenario: str = "kernels_and_markers", **options: Any) -> types.ModuleType:
    """A fresh fake ``cupti.cupti`` module; its FakeCupti is ``module._fake``."""
    fake = FakeCupti(scenario, **options)
    m = types.ModuleType("cupti.cupti", "fake cupti-python bindings (tests/fakes/fake_cupti.py)")
    for obj in (ActivityKind, Result, ActivityFlag, ActivityMemcpyKind, ActivityMemoryKind, CallbackDomain,
                ActivityObjectKind, ActivityThreadIdType, RuntimeApiTraceCbid, cuptiError, ActivityKernel11,
                ActivityMemcpy6, ActivityMemset4, ActivityAPI, ActivityMarker2, ActivityObjectKindId):
        setattr(m, obj.__name__, obj)
    m._fake = fake

    def activity_register_callbacks(func_buffer_requested: Callable, func_buffer_completed: Callable) -> None:
        fake.call("activity_register_callbacks")
        if not (callable(func_buffer_requested) and callable(func_buffer_completed)):
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        fake.requested, fake.completed = func_buffer_requested, func_buffer_completed

    def activity_enable(kind: int) -> None:
        fake.call("activity_enable")
        k = ActivityKind(int(kind))  # ValueError for a kind that does not exist, as the enum would
        if fake.completed is None:
            raise cuptiError(Result.ERROR_NOT_INITIALIZED)  # CUPTI needs the buffer callbacks first
        fake.enabled.add(int(k))
        fake.enable_calls.append(k.name)

    def activity_disable(kind: int) -> None:
        fake.call("activity_disable")
        fake.enabled.discard(int(ActivityKind(int(kind))))

    def activity_flush_all(flag: int) -> None:
        fake.call("activity_flush_all")
        fake.flush(int(flag))

    def activity_flush_period(time: int) -> None:  # noqa: A002 - cupti-python's parameter name
        fake.call("activity_flush_period")
        fake.flush_period_ms = int(time)

    def activity_get_num_dropped_records(context: int, stream_id: int, dropped: int) -> None:
        fake.call("activity_get_num_dropped_records")
        if not isinstance(dropped, int) or dropped == 0:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        with fake.lock:
            ctypes.c_size_t.from_address(dropped).value = fake.dropped
            fake.dropped = 0

    def get_timestamp() -> int:
        fake.call("get_timestamp")
        return fake.now()

    def set_thread_id_type(type: int) -> None:  # noqa: A002 - cupti-python's parameter name
        fake.call("set_thread_id_type")
        fake.thread_id_type = int(ActivityThreadIdType(int(type)))

    def get_callback_name(domain: int, cbid: int) -> str:
        fake.call("get_callback_name")
        if int(domain) != CallbackDomain.RUNTIME_API:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        try:
            return RuntimeApiTraceCbid(int(cbid)).name
        except ValueError:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER) from None

    def finalize() -> None:
        fake.call("finalize")
        fake.finalized = True

    for fn in (activity_register_callbacks, activity_enable, activity_disable, activity_flush_all,
               activity_flush_period, activity_get_num_dropped_records, get_timestamp, set_thread_id_type,
               get_callback_name, finalize):
        setattr(m, fn.__name__, fn)
    return m


def loader(scenario: str = "kernels_and_markers", **options: Any) -> tuple[Callable[[], Any], types.ModuleType | None]:
    """(load_cupti for the agent, the fake module or None): `cupti_missing` raises like a
    Python without cupti-python."""
    if scenario == "cupti_missing":
        def missing() -> Any:
            raise ModuleNotFoundError("No module named 'cupti'", name="cupti")
        return missing, None
    m = build(scenario, **options)
    return (lambda: m), m


def write_package(directory: str | os.PathLike[str], scenario: str = "kernels_and_markers") -> Path:
    """A ``cupti`` package in `directory` that serves this fake, and a "libcupti" where the
    nvidia-cuda-cupti wheel puts it (nvidia/cu13/lib), for subprocess targets: put `directory`
    on their PYTHONPATH.  `cupti_missing` writes nothing: the import fails."""
    d = Path(directory)
    if scenario == "cupti_missing":
        return d
    _fake_libcupti(d / "nvidia" / "cu13" / "lib")  # where the nvidia-cuda-cupti wheel puts it
    pkg = d / "cupti"
    pkg.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent)
    (pkg / "__init__.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "import fake_cupti as _fake_cupti\n"
        f"cupti = _fake_cupti.build({scenario!r})\n"
        "sys.modules['cupti.cupti'] = cupti\n"
        "del sys.path[0]\n",
        encoding="utf-8")
    return d


def install(scenario: str = "kernels_and_markers", **options: Any) -> types.ModuleType:
    """Put a fake ``cupti`` package in sys.modules (undo with ``uninstall()``); the fake module."""
    m = build(scenario, **options)
    pkg = types.ModuleType("cupti")
    pkg.cupti = m
    sys.modules["cupti"], sys.modules["cupti.cupti"] = pkg, m
    return m


def uninstall() -> None:
    for name in ("cupti.cupti", "cupti"):
        sys.modules.pop(name, None)
