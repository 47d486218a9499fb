"""What one run offers as cycles: a small summary of each cycle source it has, from which the
pair's plan is chosen (perfdiff.cycles.plan).  Small, since it crosses from a loading worker
to the parent."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.model.schema import GPU_KINDS, MISSING, CycleSource, Kind
from perfdiff.segment import (MIN_CYCLES, ClosingCollective, IdleGaps, KernelPeriod, closing_collective, RepeatedRange, gpu_busy_by_device, idle_gaps,
                              kernel_launch_counts, kernel_period, marker_cycles, repeated_ranges, source_rows,
                              timeline_ns)

__all__ = ["MARKER_SOURCES", "CycleSummary", "marker_counts", "offered_sources", "summarize_cycles"]

MIN_HALF_KERNELS = 8  # kernels each half of a run needs for its stationarity to be judged
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
    median_kernel_ns: float = 0.0  # the median kernel's duration (0 without kernels)
    # How much its work changes between the halves of its span (the stationarity check of
    # fixed windows): the kernel mix (total-variation distance of the busy shares by name)
    # and the GPU busy share; 0 without GPU work
    mix_change: float = 0.0
    busy_change: float = 0.0
    collective: ClosingCollective | None = None  # the collective kernel that closes each iteration
    # A run whose GPU work spans several GPUs: what each GPU's work alone offers (device_runs)
    devices: dict[str, CycleSummary] = field(default_factory=dict, repr=False)

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


def device_runs(run: RunData, devices: list[str]) -> dict[str, RunData]:
    """Per GPU of `devices` (two or more that `run` works on), the run as that GPU's work
    alone: its kernels, memcpys and memsets, and the other rows and the markers of the threads
    that launched them (all of them where its launching threads are unknown)."""
    a = run.activity
    gpu = a["kind"].isin(GPU_KINDS).to_numpy()
    codes, names = pd.factorize(a["device"])  # a categorical's codes: no string per row
    tid = a["tid"].to_numpy()
    marker_tid = run.markers["tid"].to_numpy() if "tid" in run.markers else np.empty(0)
    out = {}
    for i, name in enumerate(names):
        if str(name) not in devices:
            continue
        mine = gpu & (codes == i)
        tids = np.unique(tid[mine])
        tids = tids[tids != MISSING]
        if len(tids):
            rows, markers = mine | (~gpu & np.isin(tid, tids)), run.markers[np.isin(marker_tid, tids)]
        else:
            rows, markers = mine | ~gpu, run.markers
        out[str(name)] = dataclasses.replace(run, activity=a[rows], markers=markers)
    return out


def summarize_cycles(run: RunData) -> CycleSummary:
    """What `run` offers as cycles (and, where its GPU work spans several GPUs, what each
    GPU's work alone offers: `devices`)."""
    busy = gpu_busy_by_device(run)
    devices = ({name: summarize_cycles(one) for name, one in device_runs(run, sorted(busy)).items()}
               if len(busy) >= 2 else {})
    m = run.markers
    counts = marker_counts(m)
    t0, t1 = timeline_ns(run)
    kernels = _kernels(run)
    return CycleSummary(
        perfdiff_cycles=counts[CycleSource.PERFDIFF_MARKERS], step_cycles=counts[CycleSource.PROFILER_STEP],
        ranges=repeated_ranges(source_rows(m, CycleSource.ANNOTATION)),
        period=kernel_period(run), launches=kernel_launch_counts(run), gaps=idle_gaps(run),
        span_ns=max(0, t1 - t0), gpu_busy_ns=busy, median_kernel_ns=_median_kernel_ns(kernels),
        collective=closing_collective(run), devices=devices,
        **dict(zip(("mix_change", "busy_change"), _halves_change(kernels, t0, t1), strict=True)))


def _kernels(run: RunData) -> pd.DataFrame:
    a = run.activity
    # The columns the offer reads, not the whole frame: a million rows are copied once.
    cols = ["function", "start_ns", "end_ns", "busy_ns"]
    return a.loc[(a["kind"] == Kind.KERNEL.value).to_numpy(), cols] if len(a) else a[cols]


def _median_kernel_ns(k: pd.DataFrame) -> float:
    """The median duration (ns) of kernels `k` (a run's kernel rows), 0 without kernels."""
    return float(np.median((k["end_ns"] - k["start_ns"]).to_numpy())) if len(k) else 0.0


def _halves_change(k: pd.DataFrame, t0: int, t1: int) -> tuple[float, float]:
    """(kernel-mix change, GPU busy-share change) between the first and second half of the
    span, by where each kernel (of `k`, a run's kernel rows) starts: a stationary loop keeps
    both small."""
    if len(k) < 4 or t1 <= t0:
        return 0.0, 0.0
    mid = (t0 + t1) / 2
    first = (k["start_ns"] < mid).to_numpy()
    if min(np.count_nonzero(first), np.count_nonzero(~first)) < MIN_HALF_KERNELS:
        return 0.0, 0.0  # too few kernels to judge
    busy = k["busy_ns"].to_numpy(dtype=np.float64)
    # Each kernel name's share of its half's busy time, one bincount a half (a million kernels:
    # no per-name groupby over strings).
    codes, names = pd.factorize(k["function"], use_na_sentinel=False)  # a missing name is one name, as before
    mixes, shares = [], []
    for half in (first, ~first):
        by = np.bincount(codes[half], weights=busy[half], minlength=len(names))
        total = by.sum()
        mixes.append(by / total if total > 0 else np.zeros(len(names)))
        shares.append(total / max(mid - t0, 1.0))
    mix = 0.5 * float(np.abs(mixes[0] - mixes[1]).sum())
    return mix, float(abs(shares[0] - shares[1]))
