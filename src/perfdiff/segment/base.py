"""What every way of cutting a run into cycles shares: the Cycles record, bounds made into one,
and a name cut short for its detail."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_CYCLES", "Cycles", "finish", "short_name"]

MIN_CYCLES = 2


@dataclass(frozen=True)
class Cycles:
    """Cycle bounds [start_ns, end_ns) in wall-clock ns, and how they were found."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    source: str  # perfdiff-markers | profiler-step | annotation | kernel-sequence | idle-gaps | window | regex
    detail: str  # in words, for the report
    dropped: int = 0  # cycles dropped for a non-positive or non-finite duration

    @property
    def n(self) -> int:
        return int(len(self.start_ns))

    @property
    def dur_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns


def finish(start: np.ndarray, end: np.ndarray, source: str, detail: str) -> Cycles:
    """Cycles of the bounds given (ns), in start order, less those of no positive duration
    (counted in `dropped`)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    ok = end > start
    return Cycles(start[ok], end[ok], source, detail, int((~ok).sum()))


def short_name(name: str, width: int = 60) -> str:
    """`name` cut to `width` characters with an ellipsis, for a cycle's detail."""
    return name if len(name) <= width else name[: width - 1] + "…"
