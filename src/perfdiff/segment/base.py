"""What every way of cutting a run into cycles shares: bounds made into one Cycles record
(perfdiff.model.cycles), and a name cut short for its detail."""
from __future__ import annotations

import numpy as np

from perfdiff.model.cycles import Cycles, NoCycles
from perfdiff.model.schema import CycleSource

__all__ = ["MIN_CYCLES", "Cycles", "empty_cycles", "finish", "short_name"]

MIN_CYCLES = 2


def finish(start: np.ndarray, end: np.ndarray, source: CycleSource, detail: str) -> Cycles:
    """Cycles of the bounds given (ns), in start order, less those of no positive duration
    (counted in `dropped`)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    ok = end > start
    return Cycles(start[ok], end[ok], source, detail, int((~ok).sum()))


def empty_cycles(source: CycleSource, why: NoCycles) -> Cycles:
    """No cycles, and `why`."""
    return Cycles(np.zeros(0, np.int64), np.zeros(0, np.int64), source, "", none_found=why)


def short_name(name: str, width: int = 60) -> str:
    """`name` cut to `width` characters with an ellipsis, for a cycle's detail."""
    return name if len(name) <= width else name[: width - 1] + "…"
