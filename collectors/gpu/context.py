"""What a GPU's reader needs from the sampler, and nothing more: `GpuContext`.

The devices (device.py) and their per-tick reader (read.py) call NVML through the context's
`NvmlQuery`, stamp readings with its `TickClock` (CLOCK_REALTIME ns), record unsupported
metrics and events in its `SamplerState`, and report other processes and ask for the shared
XID event set through two callbacks the sampler provides.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from perfdiff.collectors.base import SamplerState

from .nvml_query import NvmlFailure, NvmlQuery
from .pids import PidMatcher


class TickClock:
    """Midpoint stamps of a tick: CLOCK_REALTIME ns of a perf_counter_ns reading, anchored at
    the tick's t_ns and the monotonic time when the tick began."""

    __slots__ = ("_t", "_mono")

    def __init__(self) -> None:
        self._t = 0
        self._mono = time.perf_counter_ns()

    def begin(self, t_ns: int) -> None:
        """Anchor this tick's stamps: t_ns plus the monotonic time since now."""
        self._t = int(t_ns)
        self._mono = time.perf_counter_ns()

    def stamp(self, mono_ns: int) -> int:
        """CLOCK_REALTIME ns of a perf_counter_ns reading taken during this tick."""
        return self._t + (mono_ns - self._mono)

    def now(self) -> int:
        return self.stamp(time.perf_counter_ns())


@dataclass(frozen=True)
class GpuContext:
    """The sampler's side of a device read: NVML, the clock, the book-keeping, two callbacks.

    `other_process(device, pid, t_ns, **detail)` records a process other than the target on
    a GPU; `event_set()` returns the shared XID event set, or (None, why not).
    """

    query: NvmlQuery
    clock: TickClock
    state: SamplerState
    matcher: PidMatcher
    other_process: Callable[..., None]
    event_set: Callable[[], tuple[Any, str]]
    driver: str = ""

    @property
    def nvml(self) -> Any:
        """The NVML module (its constants and structures; calls go through `query`)."""
        return self.query.nvml

    def try_call(self, func: str, *args: Any) -> Any:
        """Call for clean-up or static information: the value, or None on any NVML failure."""
        return try_call(self.query, func, *args)


def try_call(query: NvmlQuery, func: str, *args: Any) -> Any:
    """`query.call(func, *args)`'s value, or None on any NVML failure."""
    try:
        return query.call(func, *args)[0]
    except NvmlFailure:
        return None
