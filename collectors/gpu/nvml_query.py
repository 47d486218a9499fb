"""The one door to NVML: every call is timed and its failure classified once.

As nvitop's `nvmlQuery` does, but a failure is not turned into a default value: it comes
back as an `NvmlFailure` whose `kind` tells the caller what to do (docs/COLLECTORS.md,
Robustness):

- ``unsupported``: NotSupported, NoPermission, FunctionNotFound (the binding is newer than
  the driver), a missing function in the binding, a bad argument → that (device, metric) is
  unsupported for the run, with `reason`;
- ``lost``: GpuIsLost, Unknown, GPU not found, reset required → stop that device;
- ``empty``: NotFound from a buffered sample API, Timeout from an event wait → no new data;
- ``transient``: anything else (NotReady, InsufficientSize in a race, …) → skip this tick.

The module is passed in (`nvml`), so tests hand a fake with the same names.
"""
from __future__ import annotations

import ctypes
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

UINT_MAX = 0xFFFFFFFF  # scopeId for "all links" of an NVLink field

# Functions that change device or driver state: perfdiff never calls them (docs/COLLECTORS.md:
# "Never change device state").  Creating an event set and registering for events are reads.
STATE_CHANGING = re.compile(
    r"^nvml(?!EventSet|SystemEventSet)(?!\w*Get)\w*?"
    r"(Set|Reset|Clear|Modify|Remove|Discover|Create|Destroy|Activate|Update|Force|Freeze|ReadWrite|Write)"
    r"(?=[A-Z_]|$)")

_UNSUPPORTED = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                "NVML_ERROR_DEPRECATED", "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED")
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_GPU_NOT_FOUND",
         "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED",
         "NVML_ERROR_LIB_RM_VERSION_MISMATCH")
# NVMLError(NVML_SUCCESS): pynvml's nvmlDeviceGetProcessUtilization raises it when the sizing
# call succeeds instead of asking for a buffer (no sample to return).
_EMPTY = ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_TIMEOUT", "NVML_SUCCESS")
# Init failures that mean "no usable NVIDIA driver here" (docs/COLLECTORS.md).
NO_DRIVER = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED",
             "NVML_ERROR_LIB_RM_VERSION_MISMATCH")


class NvmlFailure(Exception):
    """A failed NVML call: `kind` (unsupported | lost | empty | transient), `reason` (one line)."""

    def __init__(self, kind: str, func: str, reason: str, code: int | None = None):
        super().__init__(reason)
        self.kind = kind
        self.func = func
        self.reason = reason
        self.code = code


@dataclass
class CallStats:
    """Cost of one NVML function: calls, total and max wall time (ns), and the start-up timings."""

    calls: int = 0
    total_ns: int = 0
    max_ns: int = 0
    startup_ns: list[int] = field(default_factory=list)


class NvmlQuery:
    """Calls NVML functions by name, times each call and classifies failures.

    `call` returns ``(value, t0, t1)`` with t0/t1 `time.perf_counter_ns()` around the call, so
    the caller can stamp an untimestamped getter at the midpoint of the call.
    """

    def __init__(self, nvml: Any, *, driver: str = "", binding: str = ""):
        self.nvml = nvml
        self.driver = driver
        self.binding = binding
        self.stats: dict[str, CallStats] = {}
        self.recording_startup = False
        self._kind_by_code: dict[int, str] = {}
        for names, kind in ((_UNSUPPORTED, "unsupported"), (_LOST, "lost"), (_EMPTY, "empty")):
            for name in names:
                code = getattr(nvml, name, None)
                if code is not None:
                    self._kind_by_code[int(code)] = kind
        self._error = getattr(nvml, "NVMLError", None)
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._fnf = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        self._fns: dict[str, Any] = {}  # checked once: not state-changing, present in the binding

    def call(self, func: str, *args: Any, **kwargs: Any) -> tuple[Any, int, int]:
        """Call `nvml.<func>(*args, **kwargs)`; raise NvmlFailure on any NVML error."""
        fn = self._fns.get(func)
        if fn is None:
            if STATE_CHANGING.match(func):
                # A programming error, not a GPU condition: never reach the driver.
                raise RuntimeError(f"perfdiff never changes GPU state; refusing to call {func}")
            fn = getattr(self.nvml, func, None)
            if fn is None:
                raise NvmlFailure("unsupported", func, f"{func}: not in this NVML binding", self._fnf)
            self._fns[func] = fn
        t0 = time.perf_counter_ns()
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            t1 = time.perf_counter_ns()
            self._record(func, t1 - t0)
            raise self._classify(func, exc) from None
        t1 = time.perf_counter_ns()
        self._record(func, t1 - t0)
        return value, t0, t1

    def _record(self, func: str, dt: int) -> None:
        st = self.stats.get(func)
        if st is None:
            st = self.stats[func] = CallStats()
        st.calls += 1
        st.total_ns += dt
        if dt > st.max_ns:
            st.max_ns = dt
        if self.recording_startup:
            st.startup_ns.append(dt)

    def _classify(self, func: str, exc: Exception) -> Exception:
        if self._mismatch is not None and isinstance(exc, self._mismatch):
            # pynvml's unversioned wrappers turn FunctionNotFound into this (throwOnVersionMismatch).
            return NvmlFailure("unsupported", func, f"{func}: {self._older_driver()}", self._fnf)
        if self._error is None or not isinstance(exc, self._error):
            return exc  # not an NVML error: a bug, let it surface
        code = int(getattr(exc, "value", -1))
        kind = self._kind_by_code.get(code, "transient")
        try:
            text = str(exc)
        except Exception:  # str() of an unknown code asks the library, which may be gone
            text = f"NVML error {code}"
        if code == self._fnf:
            text = f"{text}: {self._older_driver()}"
        return NvmlFailure(kind, func, f"{func}: {text} ({type(exc).__name__})", code)

    def _older_driver(self) -> str:
        drv = f"driver {self.driver}" if self.driver else "the driver"
        bind = f"nvidia-ml-py {self.binding}" if self.binding else "the binding"
        return f"{drv} is older than {bind}"

    def latency_us(self) -> dict[str, float]:
        """Median wall time (µs) of each function over the calls made at start."""
        out = {}
        for func, st in sorted(self.stats.items()):
            if st.startup_ns:
                xs = sorted(st.startup_ns)
                out[func] = round(xs[len(xs) // 2] / 1e3, 2)
        return out

    def run_stats(self) -> dict[str, dict[str, float]]:
        """Per function over the whole run: calls, mean and max wall time (µs)."""
        return {func: {"calls": st.calls, "mean_us": round(st.total_ns / st.calls / 1e3, 2),
                       "max_us": round(st.max_ns / 1e3, 2)}
                for func, st in sorted(self.stats.items()) if st.calls}


FIELD_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
FIELD_VALUE_BITS = {1: 32, 2: 64, 3: 64, 6: 16}  # unsigned types, for counter wrap-around


def field_value(fv: Any) -> float | int:
    """The number held by a c_nvmlFieldValue_t, read through its valueType (NVML_VALUE_TYPE_*)."""
    return getattr(fv.value, FIELD_VALUE_ATTR.get(int(fv.valueType), "ullVal"))


# The union member of each NVML_VALUE_TYPE_*, as a numpy type.
_UNION_TYPES = (("dVal", "f8"), ("uiVal", "u4"), ("ulVal", f"u{ctypes.sizeof(ctypes.c_ulong)}"), ("ullVal", "u8"),
                ("sllVal", "i8"), ("siVal", "i4"), ("usVal", "u2"))


def field_values_dtype(struct: Any) -> np.dtype | None:
    """A numpy view of an array of c_nvmlFieldValue_t, with the offsets of the ctypes struct
    itself: reading it costs one buffer view instead of a Python attribute lookup per field
    (pynvml's structures override __getattribute__).  The value union appears once per type."""
    try:
        fields = {name: getattr(struct, name).offset for name in
                  ("fieldId", "scopeId", "timestamp", "valueType", "nvmlReturn", "value")}
        size = ctypes.sizeof(struct)
    except (AttributeError, TypeError):
        return None
    names = ["fieldId", "scopeId", "timestamp", "valueType", "nvmlReturn"]
    formats = ["=u4", "=u4", "=i8", "=u4", "=u4"]
    offsets = [fields[n] for n in names]
    for member, typ in _UNION_TYPES:
        names.append(member)
        formats.append("=" + typ)
        offsets.append(fields["value"])
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def read_field_values(values: Any, dtype: np.dtype | None) -> list[tuple[int, int, int, Any]]:
    """[(nvmlReturn, timestamp µs, valueType, value)] of a c_nvmlFieldValue_t array."""
    if dtype is not None:
        try:
            a = np.frombuffer(values, dtype=dtype, count=len(values))
        except (TypeError, ValueError):  # not a ctypes array (a binding that returns objects)
            a = None
        if a is not None:
            rets, ts, vts = a["nvmlReturn"].tolist(), a["timestamp"].tolist(), a["valueType"].tolist()
            by_type = [a[m].tolist() for m, _ in _UNION_TYPES]
            return [(rets[k], ts[k], vts[k], by_type[vts[k]][k] if vts[k] < len(by_type) else by_type[3][k])
                    for k in range(len(rets))]
    return [(int(fv.nvmlReturn), int(fv.timestamp), int(fv.valueType), field_value(fv)) for fv in values]
