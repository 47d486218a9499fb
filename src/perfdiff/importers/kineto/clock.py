"""The clock of a Kineto trace: how its µs timestamps become ns, and in which domain.

With ``baseTimeNanoseconds`` in the document, wall-clock ns = base + ts·1000; without it, ts
is taken as epoch µs (CLOCK_REALTIME) unless the timestamps are too small to be (before
1973), in which case the times are relative to the trace's own origin."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfdiff.importers.common import ClockDomain, Note

__all__ = ["TraceClock", "trace_clock"]

_EPOCH_FLOOR_NS = 10 ** 17  # 1973 in epoch ns: median timestamps below are not epoch times
_MAX_BASE_NS = 2 ** 62  # year 2116 in epoch ns: leaves room for the events' µs after the base


@dataclass(frozen=True)
class TraceClock:
    """How a trace's times map to the run's clock: add `base_ns` (None: 0); `domain` says
    which clock the result is in."""

    base_ns: int | None
    domain: ClockDomain

    def offset_ns(self) -> int:
        return self.base_ns or 0

    def manifest(self) -> dict[str, Any]:
        """manifest["clock"]: the domain's value and what anchors it."""
        if self.base_ns is not None:
            anchors: list[dict[str, Any]] = [{"source": "baseTimeNanoseconds", "base_ns": self.base_ns}]
        elif self.domain is ClockDomain.TRACE_RELATIVE:
            anchors = []
        else:
            anchors = [{"source": "ts is epoch µs (no baseTimeNanoseconds)"}]
        return {"domain": self.domain.value, "anchors": anchors}

    def note(self) -> Note | None:
        if self.domain is ClockDomain.TRACE_RELATIVE:
            return Note("clock-relative",
                        "no baseTimeNanoseconds and timestamps are not epoch µs: times are relative")
        return None


def trace_clock(header: dict[str, Any], ts_ns: np.ndarray) -> TraceClock:
    """The clock of a trace with top-level keys `header` and event timestamps `ts_ns` (µs·1000).
    ValueError when baseTimeNanoseconds is a number but not a time in int64 ns."""
    base = header.get("baseTimeNanoseconds")
    base_ns = None
    if isinstance(base, (int, float)) and not isinstance(base, bool):
        if not (math.isfinite(base) and 0 <= base <= _MAX_BASE_NS):
            raise ValueError(f"baseTimeNanoseconds {base!r} is not a time in int64 ns")
        base_ns = int(base)
    if base_ns is None and len(ts_ns) and int(np.median(ts_ns)) < _EPOCH_FLOOR_NS:
        return TraceClock(None, ClockDomain.TRACE_RELATIVE)
    return TraceClock(base_ns, ClockDomain.REALTIME)
