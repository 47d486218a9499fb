"""Plan the pair's cycles: from what each run offers (perfdiff.cycles.offer), choose one
definition that exists in both.

Cycles mean the same thing in both runs or nothing per cycle compares, so the definition is
chosen for the pair, never per run: the first source, in this order, that both runs have
with the same parameters (the same range name, the same anchor kernel, one idle-gap
threshold from both runs' gaps), unless the user names one (--cycle, --window):

1. perfdiff markers written by the target;
2. ProfilerStep#N ranges;
3. a range name that repeats in both runs without overlapping, not several times per kernel
   period (a layer's): one named as a step's (train_step, Optimizer.step), else the one
   covering the largest share of both runs; cut from one start to the next;
4. a repeating kernel sequence (or a kernel launched at regular distances), cut at the same
   anchor kernel in both; at the collective kernel that closes each step instead where the
   sequence repeats several times between two of its launches (a layer inside the step); at
   idle gaps where its period is flat and alike idle-gap cycles hold several periods (then 5);
5. GPU idle gaps longer than one threshold found in both runs' gaps pooled;
6. fixed windows.
A source present in one run only is passed over and recorded in the plan.  Where a run's GPU
work spans several GPUs (one process driving them), the plan also records what each GPU's
work alone would get and what it would pass over there (`device_plans`); the runs are cut by
the pair's plan.  The rules in full: docs/STATISTICS.md, "Cycles and functions".
"""
from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np

from perfdiff.cycles.offer import MARKER_SOURCES, CycleSummary
from perfdiff.errors import InputError
from perfdiff.model.cycles import CyclePlan, DevicePlan, PassReason, Regime, Rejected
from perfdiff.model.schema import CycleSource
from perfdiff.segment import DEFAULT_WINDOW_NS, MAX_WINDOWS, MIN_CYCLES, idle_gap_thresholds

__all__ = ["check_cycle_choice", "device_plans", "marker_plan", "match_devices", "plan_pair"]

RANGES_PER_PERIOD = 1.5  # a range repeated this often per kernel period marks a part of an iteration
# A range whose name says it bounds a training step: preferred over a wider range of a part.
STEP_RANGE = re.compile(r"(?i)(?<![a-z])(?:train_?|training_?)?step(?![a-z])|(?<![a-z])iteration(?![a-z])")
GAP_ALIKE = 0.25  # coefficient of variation of GPU rows per cycle under which idle-gap cycles are alike
GAP_PERIODS = 1.5  # kernel periods an alike idle-gap cycle holds for it to be the iteration instead
MIN_GAP_NS = 2_000.0  # a kernel launch's latency: an idle gap shorter than it parts no iterations
MAX_MIX_CHANGE = 0.25  # kernel-mix change (total variation) between a run's halves for fixed windows
MAX_BUSY_CHANGE = 0.2  # GPU busy-share change between a run's halves for fixed windows


def plan_pair(sn: CycleSummary, sa: CycleSummary, *, cycle_regex: str | None = None,
              window_ns: int | None = None) -> CyclePlan:
    """The one cycle definition both runs are cut by (see the module docstring), with the
    abnormal run's GPU devices matched to the normal run's (see `match_devices`)."""
    plan = _plan_cycles(sn, sa, cycle_regex, window_ns)
    devices = match_devices(sn, sa)
    per_device = () if plan.chosen_by_user else device_plans(sn, sa, plan, devices)
    if devices or per_device:
        plan = dataclasses.replace(plan, device_map=devices, devices=per_device)
    return plan


def device_plans(sn: CycleSummary, sa: CycleSummary, plan: CyclePlan,
                 device_map: tuple[tuple[str, str], ...] = ()) -> tuple[DevicePlan, ...]:
    """Per GPU that both runs work on, where a run's GPU work spans several GPUs: the plan
    each GPU's work alone would get (CycleSummary.devices), by the same rules as the pair's,
    and whether it is the pair's `plan` (same source and name); in the normal run's device
    order, the abnormal run's GPUs matched by `device_map` ((abnormal, normal) names)."""
    other = {n: a for a, n in device_map}
    out = []
    for name in sorted(sn.devices):
        theirs = sa.devices.get(other.get(name, name))
        if theirs is None:
            continue
        mine = _plan_cycles(sn.devices[name], theirs, None, None)
        out.append(DevicePlan(name, mine, same=(mine.source, mine.name) == (plan.source, plan.name)))
    return tuple(out)


def marker_plan(shared: dict[CycleSource, int], pairs: int) -> CyclePlan | None:
    """A plan at the first marker source (MARKER_SOURCES, as for a pair) that both runs of
    more than half of `pairs` pairs offer (`shared`: source → pairs whose runs both offer
    it); None when none does."""
    return next((CyclePlan(source) for source in MARKER_SOURCES if 2 * shared.get(source, 0) > pairs), None)


def match_devices(sn: CycleSummary, sa: CycleSummary) -> tuple[tuple[str, str], ...]:
    """When the runs' busy GPUs carry other indexes (rank 3's GPU 3 against rank 1's GPU 1),
    pair them by their order of activity (busiest with busiest) as (abnormal, normal) names;
    nothing when the runs use the same devices or a different number of them."""
    dn = sorted(sn.gpu_busy_ns, key=lambda d: -sn.gpu_busy_ns[d])
    da = sorted(sa.gpu_busy_ns, key=lambda d: -sa.gpu_busy_ns[d])
    if set(dn) == set(da) or len(dn) != len(da) or not dn:
        return ()
    return tuple((a, n) for a, n in zip(da, dn, strict=True) if a != n)


def _plan_cycles(sn: CycleSummary, sa: CycleSummary, cycle_regex: str | None, window_ns: int | None) -> CyclePlan:
    check_cycle_choice(cycle_regex, window_ns)
    if window_ns is not None:
        return CyclePlan(CycleSource.WINDOW, window_ns=window_ns, chosen_by_user=True)
    if cycle_regex is not None:
        return CyclePlan(CycleSource.REGEX, name=cycle_regex, chosen_by_user=True)
    one_sided: list[tuple[str, int, int]] = []

    def both(source: CycleSource, n_n: int, n_a: int) -> bool:
        if n_n >= MIN_CYCLES and n_a >= MIN_CYCLES:
            return True
        if n_n or n_a:
            one_sided.append((source.value, n_n, n_a))
        return False

    if both(CycleSource.PERFDIFF_MARKERS, sn.perfdiff_cycles, sa.perfdiff_cycles):
        return CyclePlan(CycleSource.PERFDIFF_MARKERS, one_sided=tuple(one_sided))
    if both(CycleSource.PROFILER_STEP, sn.step_cycles, sa.step_cycles):
        return CyclePlan(CycleSource.PROFILER_STEP, one_sided=tuple(one_sided))
    in_both = [k for k in sn.ranges if k in sa.ranges]
    # Ranges repeated several times per kernel period (a layer's) are parts of an iteration.
    common = [k for k in in_both if not _within_period(k, sn, sa)]
    if common:
        def share(name: str) -> float:
            return (sn.ranges[name].covered_ns / max(sn.span_ns, 1)) + (sa.ranges[name].covered_ns / max(sa.span_ns, 1))
        # A range named as a step's (train_step, Optimizer.step) bounds the iteration; else the
        # largest pooled share; of equals, the one that comes first in the normal run.
        stepping = [k for k in common if STEP_RANGE.search(k)]
        name = max(stepping or common, key=share)
        # What was passed over, and why: the widest range of a layer (repeated inside the step).
        inside = [k for k in in_both if k not in common]
        if inside:
            widest = max(inside, key=share)
            rejected = (Rejected(CycleSource.ANNOTATION, PassReason.RANGE_INSIDE_STEP, name=widest,
                                 per_step=_per_step(widest, name, sn, sa)),)
        else:
            rejected = ()
        # A range may hold all of the iteration or a part (the compute, a data-loader call),
        # and not the same in both runs: a cycle runs from one range's start to the next's,
        # the whole iteration either way.  (A server idle between its ranges counts the idle
        # time in the cycle: a lighter load shows as longer cycles, with no function to name.)
        return CyclePlan(CycleSource.ANNOTATION, name=name, to_next_start=True, one_sided=tuple(one_sided),
                         rejected=rejected)
    if (sn.ranges or sa.ranges) and not in_both:
        def most(s: CycleSummary) -> int:
            return max((r.count for r in s.ranges.values()), default=0)
        one_sided.append((CycleSource.ANNOTATION.value, most(sn), most(sa)))
    rejected: list[Rejected] = []
    anchor = _common_anchor(sn, sa)
    if anchor is not None:
        short = _short_sequence(sn, sa, anchor[1], anchor[2])
        if short is not None:
            rejected.append(short)
            anchor = None
    closing = _closing_collective(sn, sa, anchor[1]) if anchor is not None else None
    if closing is not None:
        # The sequence repeats many times between two launches of the collective that closes
        # each step: a layer inside the step.  The step runs from one collective to the next.
        name, distance, passed = closing
        return CyclePlan(CycleSource.KERNEL_SEQUENCE, name=name, period=distance, anchor_every=1,
                         one_sided=tuple(one_sided), confirmed=True, rejected=tuple(rejected) + (passed,))
    flat = anchor is not None and any(s.period is not None and s.period.flat and anchor[0] in s.period.anchors
                                      for s in (sn, sa))
    # Idle gaps matter only without an anchor, or against a flat one.
    threshold, alike = _gap_threshold(sn, sa, rejected) if anchor is None or flat else (None, False)
    if anchor is not None and not (flat and alike and _gaps_hold_periods(sn, sa, threshold, anchor[1])):
        return CyclePlan(CycleSource.KERNEL_SEQUENCE, name=anchor[0], period=anchor[1], anchor_every=anchor[2],
                         one_sided=tuple(one_sided), confirmed=anchor[3], rejected=tuple(rejected))
    if threshold is not None:
        return CyclePlan(CycleSource.IDLE_GAPS, threshold_ns=threshold, one_sided=tuple(one_sided),
                         rejected=tuple(rejected))
    window = _default_window_ns(sn, sa)
    unfit = _window_unfit(sn, sa, window)
    if unfit is None:
        return CyclePlan(CycleSource.WINDOW, window_ns=window, one_sided=tuple(one_sided), rejected=tuple(rejected))
    # No source passes: compare totals per run (or per step, where both runs have a few).
    rejected.append(unfit)
    steps = sn.step_cycles > 0 and sa.step_cycles > 0
    return CyclePlan(CycleSource.PROFILER_STEP if steps else CycleSource.WINDOW, regime=Regime.TOTALS,
                     one_sided=tuple(one_sided), rejected=tuple(rejected))


def _closing_collective(sn: CycleSummary, sa: CycleSummary, period: int) -> tuple[str, int, Rejected] | None:
    """(collective, kernels from one launch to the next in the normal run, the sequence passed
    over) where both runs launch the same collective kernel regularly (the send/receive or
    all-reduce that closes a step) and a kernel sequence of `period` kernels repeats at least
    RANGES_PER_PERIOD times between two of its launches in both: the sequence is a layer, the
    collective bounds the iteration.  None otherwise."""
    cn, ca = sn.collective, sa.collective
    if cn is None or ca is None or cn.name != ca.name:
        return None
    step = min(cn.distance, ca.distance)
    if period <= 0 or step < RANGES_PER_PERIOD * period:
        return None
    return cn.name, cn.distance, Rejected(CycleSource.KERNEL_SEQUENCE, PassReason.INSIDE_STEP,
                                          period_kernels=period, step_kernels=step, name=cn.name)


def _short_sequence(sn: CycleSummary, sa: CycleSummary, period: int, every: int) -> Rejected | None:
    """KERNEL_SEQUENCE passed over where its mean cycle (span over the cycles the anchor
    starts) is shorter than the median kernel in a run."""
    for s in (sn, sa):
        launches = sum(s.launches.values())
        if not launches or s.median_kernel_ns <= 0:
            continue
        cycle = s.span_ns * period / launches
        if cycle < s.median_kernel_ns:
            return Rejected(CycleSource.KERNEL_SEQUENCE, PassReason.SHORTER_THAN_KERNEL, cycle, s.median_kernel_ns)
    return None


def _window_unfit(sn: CycleSummary, sa: CycleSummary, window_ns: int) -> Rejected | None:
    """Why fixed windows of `window_ns` do not fit the runs, or None: a window shorter than the
    median kernel, fewer than MIN_CYCLES windows in a run, or work that is not stationary (its
    kernel mix or GPU busy share changes between the halves of a run, as a one-shot program's
    does)."""
    for s in (sn, sa):
        if s.median_kernel_ns > window_ns:
            return Rejected(CycleSource.WINDOW, PassReason.SHORTER_THAN_KERNEL, window_ns, s.median_kernel_ns)
    for s in (sn, sa):
        if s.mix_change > MAX_MIX_CHANGE:
            return Rejected(CycleSource.WINDOW, PassReason.NOT_STATIONARY, s.mix_change, MAX_MIX_CHANGE)
        if s.busy_change > MAX_BUSY_CHANGE:
            return Rejected(CycleSource.WINDOW, PassReason.NOT_STATIONARY, s.busy_change, MAX_BUSY_CHANGE)
    if any(s.span_ns < (MIN_CYCLES - 0.5) * window_ns for s in (sn, sa)):
        return Rejected(CycleSource.WINDOW, PassReason.TOO_FEW, min(sn.span_ns, sa.span_ns), window_ns)
    return None


def _per_step(name: str, chosen: str, sn: CycleSummary, sa: CycleSummary) -> float:
    """How many times range `name` repeats per iteration: per range `chosen`, which bounds
    the iterations (the fewer of the two runs).  Not per kernel period: where a process
    drives several GPUs, its kernel period mixes their sequences and counts each step twice."""
    return min(s.ranges[name].count / max(s.ranges[chosen].count, 1) for s in (sn, sa))


def _within_period(name: str, sn: CycleSummary, sa: CycleSummary) -> bool:
    """Whether range `name` repeats at least RANGES_PER_PERIOD times per kernel period in a run
    that has one: a layer's range inside a step, no iteration."""
    return any(s.period is not None and s.ranges[name].count >= RANGES_PER_PERIOD * s.period.launches / s.period.every
               for s in (sn, sa))


def check_cycle_choice(cycle: str | None, window: str | int | None) -> None:
    """Refuse cycles chosen two ways (a pattern and a window): one would be dropped unsaid."""
    if cycle is not None and window is not None:
        raise InputError("--cycle and --window both choose the cycles: give one of them")


def _default_window_ns(sn: CycleSummary, sa: CycleSummary) -> int:
    """DEFAULT_WINDOW_NS, or for runs so long that it would cut one into more than MAX_WINDOWS
    windows (27.8 h), the shortest window of the series 200 ms, 500 ms, 1 s, 2 s … that does
    not: a window nobody chose is no reason to refuse the runs."""
    span = max(sn.span_ns, sa.span_ns)
    window, factors = DEFAULT_WINDOW_NS, itertools.cycle((2, 2.5, 2))
    while span // window > MAX_WINDOWS:
        window = int(window * next(factors))
    return window


def _common_anchor(sn: CycleSummary, sa: CycleSummary) -> tuple[str, int, int, bool] | None:
    """(anchor kernel, period, anchor launches per cycle, confirmed) for both runs, from a run
    that repeats (the normal run's first), trying its anchors in turn (another run may have
    renamed the first).  Where the other run repeats too, it must have the same anchor, as
    often per period, or launch it as often per `period` kernels (else the anchor would cut
    it into part iterations or several); where it does not, at least MIN_CYCLES + 1 cycles'
    worth, unconfirmed."""
    for own, other in ((sn, sa), (sa, sn)):
        if own.period is None:
            continue
        period, every = own.period.period, own.period.every
        for anchor in own.period.anchors:
            launches = other.launches.get(anchor, 0)
            if other.period is not None:
                if other.period.every == every and anchor in other.period.anchors:
                    return anchor, period, every, True  # the same cut, whatever each step holds
                # At the rate of this run's period: the other run may repeat at a multiple of
                # it (a kernel of its own every few steps) and still hold the same steps.
                expected = every * sum(other.launches.values()) / period
                if abs(launches - expected) <= max(every, 0.02 * expected):
                    return anchor, period, every, True
            elif launches >= (MIN_CYCLES + 1) * every:
                return anchor, period, every, False
    return None


def _gap_threshold(sn: CycleSummary, sa: CycleSummary, rejected: list[Rejected]) -> tuple[float | None, bool]:
    """(threshold, alike): the idle-gap threshold for both runs, of the candidates in their
    gaps pooled that give each run at least three cycles: the shortest whose cycles are alike
    in size (GPU rows per cycle, coefficient of variation at most GAP_ALIKE in both runs);
    else the one whose cycles are most alike; else the widest jump.  Iterations are alike: the
    gaps inside one (a collective's wait, a sync) cut it into unlike pieces; pauses every few
    iterations give groups of iterations, alike too, hence the shortest."""
    gn, ga = sn.gaps, sa.gaps
    fits = []
    under: dict[PassReason, Rejected] = {}
    for t, jump in idle_gap_thresholds(np.concatenate([gn.sample_ns, ga.sample_ns])):
        if gn.cycles(t) < 3 or ga.cycles(t) < 3:
            continue
        # No piece shorter than the work it must hold: a launch's latency, the median kernel.
        if t < MIN_GAP_NS <= t * np.sqrt(jump):
            t = MIN_GAP_NS  # the jump spans the launch latency: the same cut, at the latency
        if t < MIN_GAP_NS:
            under.setdefault(PassReason.GAP_UNDER_LAUNCH, Rejected(CycleSource.IDLE_GAPS, PassReason.GAP_UNDER_LAUNCH,
                                                                   t, MIN_GAP_NS))
            continue
        short = next(((s.gaps.median_cycle_ns(t), s.median_kernel_ns) for s in (sn, sa)
                      if s.gaps.median_cycle_ns(t) < s.median_kernel_ns), None)
        if short is not None:
            under.setdefault(PassReason.SHORTER_THAN_KERNEL, Rejected(
                CycleSource.IDLE_GAPS, PassReason.SHORTER_THAN_KERNEL, *short))
            continue
        spread = float(np.fmax(gn.spread(t), ga.spread(t)))  # one run's unknown spread: the other's
        if spread <= GAP_ALIKE:
            rejected.extend(under.values())
            return t, True
        fits.append((t, spread, jump))
    rejected.extend(under.values())
    if not fits:
        return None, False
    known = [f for f in fits if not np.isnan(f[1])]
    return (min(known, key=lambda f: f[1])[0] if known else max(fits, key=lambda f: f[2])[0]), False


def _gaps_hold_periods(sn: CycleSummary, sa: CycleSummary, threshold_ns: float | None, period: int) -> bool:
    """Whether the idle-gap cycles at `threshold_ns` hold, on average, at least GAP_PERIODS
    kernel periods in both runs.  For a flat period (every kernel as often: a layer, with
    nothing of a step's own) the period is then a part of the iteration that repeats inside
    it, and the GPU's idle gaps fall between iterations.  A period with a step's own kernels
    is the step, and gaps every few steps (a logging sync) are not the iteration."""
    if threshold_ns is None:
        return False
    return all(sum(s.launches.values()) / s.gaps.cycles(threshold_ns) >= GAP_PERIODS * period for s in (sn, sa))
