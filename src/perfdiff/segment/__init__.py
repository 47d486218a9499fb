"""The ways of splitting a run's timeline into cycles (iterations of its main loop), which
perfdiff.cycles plans and applies: perfdiff markers, ProfilerStep#N ranges, a repeating range,
a kernel sequence (perfdiff.segment.sequence), GPU idle gaps (perfdiff.segment.gaps), fixed
windows, or the user's --cycle pattern (docs/STATISTICS.md, "Cycles and functions").
"""
from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.errors import InputError
from perfdiff.model.cycles import NoCycles, NoCyclesCode, WindowReason
from perfdiff.model.schema import GPU_KINDS, CycleSource, MarkerSource
from perfdiff.segment.base import MIN_CYCLES, Cycles, empty_cycles, finish, short_name
from perfdiff.segment.gaps import IdleGaps, cut_at_gaps, idle_gap_thresholds, idle_gaps
from perfdiff.segment.sequence import (ClosingCollective, KernelPeriod, closing_collective, cut_at_kernel,
                                      kernel_launch_counts, kernel_order, kernel_period)

__all__ = ["DEFAULT_WINDOW_NS", "MAX_WINDOWS", "MIN_CYCLES", "STEP_NAME", "ClosingCollective", "Cycles", "IdleGaps",
           "KernelPeriod", "closing_collective",
           "RepeatedRange", "cut_at_gaps", "cut_at_kernel", "cycle_pattern", "empty_cycles", "fixed_windows",
           "gpu_busy_by_device", "idle_gap_thresholds", "idle_gaps", "kernel_launch_counts", "kernel_period",
           "marker_cycles", "range_rows", "regex_cycles", "repeated_ranges", "short_name", "source_rows", "timeline_ns", "whole_run"]

DEFAULT_WINDOW_NS = 100_000_000
MAX_WINDOWS = 1_000_000  # fixed windows of one run: beyond, a window far too short for the run (memory)


def _ranges_to_cycles(m: pd.DataFrame, source: CycleSource, detail: str, to_next: bool = False) -> Cycles:
    """Ranges become cycles as they are, or with `to_next` each runs from one range's start to
    the next's (the last dropped); point marks become the spans between consecutive marks."""
    start = m["start_ns"].to_numpy(dtype=np.int64)
    end = m["end_ns"].to_numpy(dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    if len(start) and np.all(end == start):
        return finish(start[:-1], start[1:], source, detail + " (point marks: each cycle runs to the next mark)")
    if to_next:
        return finish(start[:-1], start[1:], source, detail + ", each cycle running to the next one's start")
    return finish(start, end, source, detail)


def timeline_ns(run: RunData) -> tuple[int, int]:
    """First and last instant (ns) of the run's activity (else of its samples)."""
    a = run.activity
    if len(a) == 0:
        s = run.samples
        if len(s) == 0:
            return 0, 0
        return int(s["t_start_ns"].min()), int(s["t_end_ns"].max())
    return int(a["start_ns"].min()), int(a["end_ns"].max())


def fixed_windows(run: RunData, window_ns: int, reason: WindowReason | None = None) -> Cycles:
    """Consecutive windows of `window_ns` over the run's activity span, `reason` recorded with
    them.  InputError when they would be more than MAX_WINDOWS (a window far too short for
    the run)."""
    t0, t1 = timeline_ns(run)
    if t1 <= t0:
        return empty_cycles(CycleSource.WINDOW, NoCycles(NoCyclesCode.NO_ACTIVITY))
    if (t1 - t0) // window_ns > MAX_WINDOWS:
        raise InputError(f"windows of {_ms(window_ns)} cut this run's {_ms(t1 - t0)} into more than "
                         f"{MAX_WINDOWS:,} cycles: choose a window of at least {_ms((t1 - t0) // MAX_WINDOWS + 1)}",
                         path=run.path)
    if t1 - t0 < window_ns // 2:
        why = NoCycles(NoCyclesCode.UNDER_HALF_WINDOW, span_ns=t1 - t0, window_ns=window_ns)
        return dataclasses.replace(empty_cycles(CycleSource.WINDOW, why), window_reason=reason)
    edges = np.arange(t0, t1, window_ns, dtype=np.int64)
    ends = np.minimum(edges + window_ns, t1)
    # A final partial window shorter than half a window would skew the distribution.
    keep = (ends - edges) >= window_ns // 2
    cycles = finish(edges[keep], ends[keep], CycleSource.WINDOW, f"fixed windows of {window_ns / 1e6:g} ms")
    return dataclasses.replace(cycles, window_reason=reason)


def whole_run(run: RunData) -> Cycles:
    """The run's activity span as one piece (a pair compared by totals, not cycles)."""
    t0, t1 = timeline_ns(run)
    if t1 <= t0:
        return empty_cycles(CycleSource.WINDOW, NoCycles(NoCyclesCode.NO_ACTIVITY))
    return finish(np.array([t0]), np.array([t1]), CycleSource.WINDOW, "the whole run as one piece")


def _ms(ns: int) -> str:
    """A duration given in ns, as ms for a message (four significant digits)."""
    return f"{ns / 1e6:,.4g} ms"


class RepeatedRange(NamedTuple):
    """A range name that repeats without overlapping: its `count`, and the ns its ranges cover."""

    count: int
    covered_ns: int


def repeated_ranges(m: pd.DataFrame) -> dict[str, RepeatedRange]:
    """Range names that repeat (≥ 3 times) without overlapping (RepeatedRange)."""
    out: dict[str, RepeatedRange] = {}
    if len(m) == 0:
        return out
    m = m[m["end_ns"] > m["start_ns"]]
    for name, grp in m.groupby("name", observed=True, sort=False):
        if len(grp) < 3:
            continue
        order = np.argsort(grp["start_ns"].to_numpy(), kind="stable")
        s = grp["start_ns"].to_numpy()[order]
        e = grp["end_ns"].to_numpy()[order]
        if np.any(s[1:] < e[:-1]):
            continue  # overlapping ranges (several threads, nesting) are not iterations
        out[str(name)] = RepeatedRange(len(grp), int((e - s).sum()))
    return out


def range_rows(m: pd.DataFrame, name: str) -> pd.DataFrame:
    """The non-empty ranges called `name`."""
    return m[((m["name"].astype(str) == name) & (m["end_ns"] > m["start_ns"])).to_numpy()]


STEP_NAME = r"ProfilerStep#\d+"


def source_rows(markers: pd.DataFrame, source: CycleSource) -> pd.DataFrame:
    """The marker rows a cycle source reads: the target's perfdiff markers, the profiler's
    ProfilerStep#N ranges, or (ANNOTATION) every range not written by perfdiff."""
    if len(markers) == 0:
        return markers
    if source == CycleSource.PROFILER_STEP:
        return markers[markers["name"].astype(str).str.fullmatch(STEP_NAME).to_numpy()]
    own = (markers["source"].astype(str) == MarkerSource.PERFDIFF.value).to_numpy()
    return markers[own if source == CycleSource.PERFDIFF_MARKERS else ~own]


def marker_cycles(m: pd.DataFrame, source: CycleSource, name: str | None = None, to_next: bool = False) -> Cycles:
    """Cycles from marker ranges of one source (ranges as they are, or from start to start with
    `to_next`; point marks as the spans between consecutive marks)."""
    if source == CycleSource.PERFDIFF_MARKERS:
        return _ranges_to_cycles(m, source, "perfdiff cycle markers from the target")
    if source == CycleSource.PROFILER_STEP:
        return _ranges_to_cycles(m, source, f"{len(m)} ProfilerStep#N ranges")
    return _ranges_to_cycles(m, source, f"repeating range {short_name(name or '')!r} ({len(m)}×)", to_next)


def gpu_busy_by_device(run: RunData) -> dict[str, float]:
    """Busy ns of the GPU work (kernels, memcpys, memsets) on each device."""
    a = run.activity
    gpu = a["kind"].isin(GPU_KINDS).to_numpy()
    if not gpu.any():
        return {}
    busy = a["busy_ns"].to_numpy()[gpu]
    if len(busy) and np.abs(busy).max() * len(busy) < 2 ** 53:
        # Sums by the device's code (a row without a device, code -1, in the first bin, left
        # out): exact in float64 below 2**53, in category order as the groupby gave them.
        codes = a["device"].cat.codes.to_numpy()[gpu].astype(np.int64) + 1
        names = a["device"].cat.categories
        sums = np.bincount(codes, weights=busy, minlength=len(names) + 1)[1:]
        return {str(d): float(v) for d, v in zip(names, sums, strict=True) if v > 0}
    by = a.loc[gpu, ["device", "busy_ns"]].groupby("device", observed=True)["busy_ns"].sum()
    return {str(d): float(v) for d, v in by.items() if v > 0}


def cycle_pattern(cycle_regex: str) -> re.Pattern:
    """--cycle compiled; InputError (one line) for a pattern Python cannot compile."""
    try:
        return re.compile(cycle_regex)
    except (re.error, OverflowError, RecursionError) as exc:
        raise InputError(f"bad --cycle regular expression {cycle_regex!r}: {exc}") from None


def _matching(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """Which rows' names rx finds a match in: searched once per distinct name (no warning
    about the groups a user's pattern may have, as str.contains gives)."""
    s = names.astype(str)
    found = [x for x in pd.unique(s) if rx.search(x)]
    return s.isin(found).to_numpy()


def regex_cycles(run: RunData, cycle_regex: str) -> Cycles:
    """Cycles from marker ranges (else kernel launches) whose name matches `cycle_regex`."""
    markers = run.markers
    rx = cycle_pattern(cycle_regex)
    hit = markers[_matching(markers["name"], rx)] if len(markers) else markers
    if len(hit):
        return _ranges_to_cycles(hit, CycleSource.REGEX, f"marker ranges matching /{cycle_regex}/")
    k = kernel_order(run)
    if len(k):
        hk = k[_matching(k["function"], rx)]
        if len(hk) >= 2:
            t = hk["_t"].to_numpy()
            end = np.append(t[1:], t[-1])
            return finish(t[:-1], end[:-1], CycleSource.REGEX,
                           f"a cycle starts at each launch of a kernel matching /{cycle_regex}/")
    raise InputError(f"no marker or kernel matches --cycle {cycle_regex!r}", path=run.path)
