"""Cycles from the GPU's idle gaps: a run's gaps as the plan needs them, the candidate
thresholds, and the cut.

docs/STATISTICS.md, "Cycles and functions", source 5.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdiff.bundle import RunData
from perfdiff.model.cycles import NoCycles, NoCyclesCode
from perfdiff.model.schema import GPU_KINDS, CycleSource
from perfdiff.segment.base import Cycles, empty_cycles, finish

__all__ = ["GAP_SAMPLE", "GAP_TOP", "IdleGaps", "cut_at_gaps", "idle_gap_thresholds", "idle_gaps"]

GAP_SAMPLE = 200_000  # idle gaps kept per run for the joint threshold
GAP_TOP = 20_000  # of them, the longest kept exactly


def _gpu_busy(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """Start times and running end (max of ends so far) of the GPU rows, by start."""
    a = run.activity
    gpu = a["kind"].isin(GPU_KINDS).to_numpy()
    if np.count_nonzero(gpu) < 4:
        return None
    start, end = a["start_ns"].to_numpy()[gpu], a["end_ns"].to_numpy()[gpu]  # two columns, not the frame
    order = np.argsort(start, kind="stable")
    return start[order], np.maximum.accumulate(end[order])


@dataclass(frozen=True)
class IdleGaps:
    """A run's positive GPU idle gaps, as the plan needs them (small: it crosses processes).

    `sample_ns`: sorted, at most GAP_SAMPLE of them (the GAP_TOP longest exactly, evenly
    spaced quantiles of the rest); `long_ns`, `long_row`: the GAP_TOP longest in time order,
    each with the index of the GPU row that follows it (rows in start order); `block_ns`,
    `block_row`: the first GAP_TOP in time order, alike; `rows`: the GPU rows;
    `body_weight`: the gaps each sampled one below the GAP_TOP longest stands for."""

    sample_ns: np.ndarray
    long_ns: np.ndarray
    long_row: np.ndarray
    block_ns: np.ndarray
    block_row: np.ndarray
    rows: int
    body_weight: float = 1.0
    long_at_ns: np.ndarray | None = None  # the start of the GPU row after each of `long_ns`
    first_ns: int = 0  # the first GPU row's start
    last_ns: int = 0  # the GPU work's end

    def median_cycle_ns(self, threshold_ns: float) -> float:
        """The median cycle (ns) that splitting at gaps longer than `threshold_ns` gives, from
        one burst's start to the next's (the last to the work's end): exact where every such
        gap is among `long_ns`, else the mean."""
        n = self.cycles(threshold_ns)
        cut = self.long_ns > threshold_ns
        if self.long_at_ns is not None and n - 1 <= np.count_nonzero(cut):
            edges = np.concatenate([[self.first_ns], self.long_at_ns[cut], [self.last_ns]])
            return float(np.median(np.diff(edges)))
        return (self.last_ns - self.first_ns) / max(n, 1)

    def cycles(self, threshold_ns: float) -> int:
        """Cycles that splitting at gaps longer than `threshold_ns` gives (estimated from the
        sample where it is thinned)."""
        body = len(self.sample_ns) - len(self.long_ns)
        over_body = np.count_nonzero(self.sample_ns[:body] > threshold_ns)
        over_long = np.count_nonzero(self.sample_ns[body:] > threshold_ns)
        return int(round(over_body * self.body_weight)) + int(over_long) + 1

    def spread(self, threshold_ns: float) -> float:
        """Coefficient of variation of the GPU rows per cycle when split at gaps longer than
        `threshold_ns`: over all cycles (the first and last, maybe partial, included) where
        every such gap is among `long_ns`, else over the whole cycles within the first
        GAP_TOP gaps; NaN when that holds fewer than two."""
        cut = self.long_ns > threshold_ns
        if self.cycles(threshold_ns) - 1 <= np.count_nonzero(cut):
            per = np.diff(np.concatenate([[0], self.long_row[cut], [self.rows]]))
        else:
            per = np.diff(self.block_row[self.block_ns > threshold_ns])
        if len(per) < 2 or per.mean() <= 0:
            return float("nan")
        return float(per.std() / per.mean())


def idle_gaps(run: RunData) -> IdleGaps:
    """The run's positive GPU idle gaps (IdleGaps)."""
    busy = _gpu_busy(run)
    if busy is None:
        empty = np.zeros(0, np.int64)
        return IdleGaps(np.zeros(0), np.zeros(0), empty, np.zeros(0), empty, 0)
    s, e = busy
    gaps = s[1:] - e[:-1]
    row = np.flatnonzero(gaps > 0)
    longest = row if len(row) <= GAP_TOP else row[np.argpartition(gaps[row], -GAP_TOP)[-GAP_TOP:]]
    longest = np.sort(longest)
    block = row[:GAP_TOP]
    pos = np.sort(gaps[row].astype(np.float64))
    weight = 1.0
    if len(pos) > GAP_SAMPLE:
        body, top = pos[:-GAP_TOP], pos[-GAP_TOP:]
        weight = len(body) / (GAP_SAMPLE - GAP_TOP)
        body = body[np.linspace(0, len(body) - 1, GAP_SAMPLE - GAP_TOP).astype(np.int64)]
        pos = np.concatenate([body, top])
    return IdleGaps(pos, gaps[longest].astype(np.float64), longest + 1, gaps[block].astype(np.float64), block + 1,
                    len(s), weight, s[longest + 1].astype(np.int64), int(s[0]), int(e[-1]))


def idle_gap_thresholds(gaps_ns: np.ndarray) -> list[tuple[float, float]]:
    """Gap lengths (ns) that may separate "between iterations" gaps from the launch gaps
    inside one: a point in each jump of at least ×3 among the upper half of the sorted gap
    sizes (geometric middle), shortest first, each with its jump (a ratio)."""
    if len(gaps_ns) < 3:
        return []
    lg = np.sort(np.log(gaps_ns.astype(np.float64)))
    lo = len(lg) // 2
    jumps = np.diff(lg[lo:])
    at = np.flatnonzero(jumps >= np.log(3.0))
    return [(float(np.exp((lg[lo + j] + lg[lo + j + 1]) / 2)), float(np.exp(jumps[j]))) for j in at]


def cut_at_gaps(run: RunData, threshold_ns: float) -> Cycles | None:
    """Cycles split at GPU idle gaps longer than `threshold_ns`; a cycle runs from one burst's
    start to the next burst's start (the gap belongs to it)."""
    busy = _gpu_busy(run)
    if busy is None:
        return None
    s, e = busy
    gaps = s[1:] - e[:-1]
    cut = np.flatnonzero(gaps > threshold_ns)
    starts = np.concatenate([[s[0]], s[cut + 1]])
    ends = np.concatenate([e[cut], [e[-1]]])
    if len(starts) < 3:
        return empty_cycles(CycleSource.IDLE_GAPS, NoCycles(NoCyclesCode.FEW_BURSTS, threshold_ns=threshold_ns,
                                                            count=len(starts)))
    cyc_end = np.append(starts[1:], ends[-1])
    detail = f"GPU idle gaps longer than {threshold_ns / 1e3:.1f} µs split the timeline"
    return finish(starts, cyc_end, CycleSource.IDLE_GAPS, detail)
