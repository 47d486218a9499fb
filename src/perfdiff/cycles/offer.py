"""What one run offers as cycles: a small summary of each cycle source it has, from which the
pair's plan is chosen (perfdiff.cycles.plan).  Small, since it crosses from a loading worker
to the parent."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.model.schema import CycleSource
from perfdiff.segment import (MIN_CYCLES, IdleGaps, KernelPeriod, RepeatedRange, gpu_busy_by_device, idle_gaps,
                              kernel_launch_counts, kernel_period, marker_cycles, repeated_ranges, source_rows,
                              timeline_ns)

__all__ = ["MARKER_SOURCES", "CycleSummary", "marker_counts", "offered_sources", "summarize_cycles"]

MARKER_SOURCES = (CycleSource.PERFDIFF_MARKERS, CycleSource.PROFILER_STEP)  # in the order the plan prefers them


@dataclass(frozen=True)
class CycleSummary:
    """What one run offers as cycles (small: it crosses from a loading worker to the parent)."""

    perfdiff_cycles: int  # cycles its perfdiff markers give
    step_cycles: int  # cycles its ProfilerStep#N ranges give
    ranges: dict[str, RepeatedRange]  # repeated non-overlapping ranges by name
    period: KernelPeriod | None  # its repeating kernel sequence
    launches: dict[str, int]  # launches per kernel name
    gaps: IdleGaps = field(repr=False)  # its positive GPU idle gaps
    span_ns: int = 0  # the timeline's length
    gpu_busy_ns: dict[str, float] = field(default_factory=dict)  # GPU device → busy ns of its GPU work

    @property
    def marker_sources(self) -> tuple[CycleSource, ...]:
        """The marker sources it offers (offered_sources)."""
        return offered_sources({CycleSource.PERFDIFF_MARKERS: self.perfdiff_cycles,
                                CycleSource.PROFILER_STEP: self.step_cycles})


def marker_counts(markers: pd.DataFrame) -> dict[CycleSource, int]:
    """The cycles each marker source (MARKER_SOURCES) gives of a run's markers."""
    counts = {}
    for source in MARKER_SOURCES:
        rows = source_rows(markers, source)
        counts[source] = marker_cycles(rows, source).n if len(rows) else 0
    return counts


def offered_sources(counts: dict[CycleSource, int]) -> tuple[CycleSource, ...]:
    """The marker sources, of `counts` (marker_counts), that give at least MIN_CYCLES cycles."""
    return tuple(s for s in MARKER_SOURCES if counts[s] >= MIN_CYCLES)


def summarize_cycles(run: RunData) -> CycleSummary:
    """What `run` offers as cycles."""
    m = run.markers
    counts = marker_counts(m)
    t0, t1 = timeline_ns(run)
    return CycleSummary(
        perfdiff_cycles=counts[CycleSource.PERFDIFF_MARKERS], step_cycles=counts[CycleSource.PROFILER_STEP],
        ranges=repeated_ranges(source_rows(m, CycleSource.ANNOTATION)),
        period=kernel_period(run), launches=kernel_launch_counts(run), gaps=idle_gaps(run),
        span_ns=max(0, t1 - t0), gpu_busy_ns=gpu_busy_by_device(run))
