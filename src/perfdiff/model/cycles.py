"""A cycle plan, the one definition of a cycle that both runs of a comparison are cut by, and
the cycles a run is cut into.

Standard library only (the bounds are numpy arrays, but nothing here imports numpy).
perfdiff.cycles chooses the plan from both runs' offers and cuts each run by it with the
algorithms of perfdiff.segment (docs/STATISTICS.md, cycles).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from perfdiff.model.schema import CycleSource

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CyclePlan", "Cycles", "DevicePlan", "NoCycles", "NoCyclesCode", "PassReason", "Regime", "Rejected",
           "WindowReason"]


class Regime(Enum):
    """How a pair is compared: over cycles cut by the plan (CYCLES), or, where each run offers
    too few cycles or no cycle source passes the checks (one or a few steps, a one-shot
    program), per function over each run's totals and per call, with no invented cycles
    (TOTALS: each run is one piece, or its few steps)."""

    CYCLES = "cycles"
    TOTALS = "totals"


class PassReason(Enum):
    """Why the plan passed over a cycle source that both runs have (perfdiff.render words it)."""

    GAP_UNDER_LAUNCH = "gap-under-launch"  # an idle-gap threshold under the launch latency (MIN_GAP_NS)
    SHORTER_THAN_KERNEL = "shorter-than-kernel"  # its median cycle is shorter than the median kernel
    NOT_STATIONARY = "not-stationary"  # fixed windows over work whose GPU busy share or kernel mix changes
    TOO_FEW = "too-few"  # a run spans too few windows (value_ns: the shorter span; limit_ns: the window)
    INSIDE_STEP = "inside-step"  # a kernel sequence that repeats many times between two closing collectives
    RANGE_INSIDE_STEP = "range-inside-step"  # a range repeated several times per iteration (a layer's)


@dataclass(frozen=True)
class Rejected:
    """A cycle source both runs have that the plan passed over, `why`, with the numbers it
    rests on: `value_ns` (the threshold, or the median cycle) against `limit_ns` (the launch
    latency, or the median kernel); for NOT_STATIONARY `value_ns` is the larger change
    between the halves of a run (kernel mix, as a total-variation distance, or GPU busy
    share; a fraction) and `limit_ns` its limit."""

    source: CycleSource
    why: PassReason
    value_ns: float = 0.0
    limit_ns: float = 0.0
    # INSIDE_STEP: the sequence's kernels, the kernels from one closing collective to the next
    # (the run with the fewer), and that collective's name; RANGE_INSIDE_STEP: the range's name
    period_kernels: int = 0
    step_kernels: int = 0
    name: str = ""
    per_step: float = 0.0  # RANGE_INSIDE_STEP: the range `name`'s repeats per iteration


@dataclass(frozen=True)
class CyclePlan:
    """How to cut a run into cycles.

    `name`: the range name (ANNOTATION), the anchor kernel (KERNEL_SEQUENCE) or the regex
    (REGEX); `to_next_start`: a cycle runs from one range's start to the next's, not over the
    range (ANNOTATION: a range may hold a part of the iteration or all of it); `period`:
    kernels per cycle and `anchor_every`: launches of the anchor per cycle (KERNEL_SEQUENCE);
    `threshold_ns`: the idle gap that ends a cycle (IDLE_GAPS); `window_ns`: the window
    (WINDOW).  `chosen_by_user`: --cycle or --window.  `one_sided`: sources that one run had
    and the other lacked, as (source, cycles in the normal run, cycles in the abnormal run;
    for repeating ranges, the most repeats of a name in each run): passed over, never
    compared.  `confirmed`: each run on its own finds this definition (a kernel anchor
    launched as often per period in both runs); when False, one run's definition was applied
    to the other."""

    source: CycleSource
    name: str | None = None
    to_next_start: bool = False
    period: int | None = None
    anchor_every: int = 1
    threshold_ns: float | None = None
    window_ns: int | None = None
    chosen_by_user: bool = False
    one_sided: tuple[tuple[str, int, int], ...] = ()
    confirmed: bool = True
    # GPU devices of the abnormal run renamed to their counterparts in the normal run, as
    # (abnormal name, normal name), when the runs used other device indexes (matched by role)
    device_map: tuple[tuple[str, str], ...] = ()
    # CYCLES, or TOTALS where no source passes (then `source` is PROFILER_STEP, each run cut at
    # its one or few steps, or WINDOW, each run one piece); `rejected`: sources passed over
    regime: Regime = Regime.CYCLES
    rejected: tuple[Rejected, ...] = ()
    # A process that drives several GPUs: what the plan would choose on each GPU alone, and
    # what it would pass over there (none for one GPU, or cycles the user chose)
    devices: tuple[DevicePlan, ...] = ()


@dataclass(frozen=True)
class DevicePlan:
    """What the plan would choose on one GPU of a process that drives several, from that GPU's
    work alone in both runs (its kernels, memcpys and memsets, and the ranges and calls of
    the threads that launch them): `plan`, its source and parameters, with what it would pass
    over there (`rejected`, `one_sided`); `device` as the normal run names it.  `same`: the
    pair's plan cuts at this very source (same source, same name)."""

    device: str
    plan: CyclePlan
    same: bool = False


class WindowReason(Enum):
    """Why a run was cut into fixed windows (perfdiff.render words it)."""

    CHOSEN = "chosen"  # the user chose windows
    NO_SOURCE = "no-source"  # no markers, no repeating kernel sequence, no clear GPU idle gaps


class NoCyclesCode(Enum):
    """Why a cut found no cycles."""

    NO_ACTIVITY = "no-activity"  # nothing to cut
    UNDER_HALF_WINDOW = "under-half-window"  # the run spans under half a window
    FEW_BURSTS = "few-bursts"  # the idle gaps split the timeline into too few bursts
    FEW_ANCHOR_STARTS = "few-anchor-starts"  # the anchor kernel starts too few cycles


@dataclass(frozen=True)
class NoCycles:
    """Why a cut found no cycles, with the numbers it rests on: `span_ns` and `window_ns`
    (UNDER_HALF_WINDOW), `threshold_ns` (FEW_BURSTS), the anchor kernel `name`, its `launches`
    and `every` (FEW_ANCHOR_STARTS); `count`: the bursts or cycle starts found."""

    code: NoCyclesCode
    span_ns: int = 0
    window_ns: int = 0
    threshold_ns: float = 0.0
    name: str = ""
    launches: int = 0
    every: int = 1
    count: int = 0


@dataclass(frozen=True)
class Cycles:
    """Cycle bounds [start_ns, end_ns) in wall-clock ns, and how they were found.

    `detail`: how the cut found them, in words; `none_found`: why it found none (then no
    detail); `window_reason`: why fixed windows (WINDOW only); `passed_over`: the plan's one-sided sources other than repeating ranges, as
    (source, cycles in the normal run, cycles in the abnormal run), too few to compare;
    `dropped`: cycles dropped for a non-positive or non-finite duration."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    source: CycleSource
    detail: str
    dropped: int = 0
    window_reason: WindowReason | None = None
    none_found: NoCycles | None = None
    passed_over: tuple[tuple[str, int, int], ...] = ()

    @property
    def n(self) -> int:
        return int(len(self.start_ns))

    @property
    def dur_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns
