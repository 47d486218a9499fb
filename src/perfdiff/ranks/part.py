"""One rank's share of the work, run as one task: load its trace, cut it by the plan of all
ranks, attribute its activity per (function, cycle), and keep only small matrices.

What comes back (`RankPart`) is independent of the trace's size: per cycle its iteration
number and duration, the own time per cycle of the functions that matter (≥ 0.1 % of the
traced cycles), own time per cycle of each ExcessKind, and one row per NCCL kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdiff.attribute import attribute_activity
from perfdiff.cycles import (MARKER_SOURCES, STEP_NAME, CycleSummary, cut_side, marker_counts, offered_sources,
                             source_rows, summarize_cycles)
from perfdiff.errors import InputError
from perfdiff.inputs import open_run
from perfdiff.model.cycles import CyclePlan
from perfdiff.model.schema import COLLECTIVE_KERNEL, CycleSource, Kind
from perfdiff.model.waits import is_wait
from perfdiff.parallel import keep_freed_memory
from perfdiff.ranks import groups
from perfdiff.ranks.records import ExcessKind, RankInput

__all__ = ["EXCESS_KINDS", "RankPart", "RankTask", "cycle_columns", "excess_kind", "load_part",
           "load_summary"]

COLLECTIVE = re.compile(COLLECTIVE_KERNEL)
INPUT = re.compile(r"dataloader|data_loader|collate|input_pipeline|load_batch|next_batch", re.I)
KEEP_SHARE = 0.001  # functions below 0.1 % of the traced cycles are summed into their kind only
EXCESS_KINDS = tuple(ExcessKind)
_STEP = re.compile(STEP_NAME)


def excess_kind(name: str, kind: str) -> ExcessKind | None:
    """The ExcessKind a function's own time counts in; None for collectives, waits and the
    step ranges themselves (symptoms and containers, not causes)."""
    if kind == Kind.KERNEL.value:
        return None if COLLECTIVE.match(name) else ExcessKind.COMPUTE
    if kind in (Kind.MEMCPY.value, Kind.MEMSET.value):
        return ExcessKind.TRANSFER
    if _STEP.fullmatch(name) or is_wait(name, kind):
        return None
    return ExcessKind.INPUT if INPUT.search(name) else ExcessKind.HOST


@dataclass(frozen=True)
class RankTask:
    """What one task needs: the input, which side (0 normal, 1 abnormal), how to import it."""

    side: int
    input: RankInput
    group: str = "full"
    own_workers: bool = False  # the workers were started for this comparison (may tune their malloc)


@dataclass
class RankPart:
    """One rank of one run, reduced.  Arrays are per cycle (K) or per function (F)."""

    side: int
    input: RankInput
    declared: dict  # the trace's own distributedInfo (rank, world_size), as loaded
    iteration: np.ndarray  # (K,) int64: ProfilerStep number, else the cycle's ordinal
    dur_ns: np.ndarray  # (K,) int64
    names: list[str]  # (F,)
    kinds: list[str]  # (F,)
    own_ns: np.ndarray  # (F, K) float64 own time per cycle
    excess_ns: np.ndarray  # (len(EXCESS_KINDS), K) float64
    coll_cycle: np.ndarray  # (C,) cycle index of each collective kernel
    coll_ord: np.ndarray  # (C,) its place among its cycle's collectives on its communicator
    coll_dur_ns: np.ndarray  # (C,) int64
    offers_plan: bool  # its own trace has the plan's cycle source
    source_detail: str = ""
    coll_group: np.ndarray | None = None  # (C,) index into group_labels; None: all unknown
    group_labels: tuple[str, ...] = (groups.UNKNOWN,)  # communicator of each group code
    coll_start_ns: np.ndarray | None = None  # (C,) int64 start of each collective kernel
    # The marker cycle sources its own trace offers (enough cycles of each), whatever the plan.
    marker_sources: tuple[CycleSource, ...] = ()


@dataclass(frozen=True)
class UncutRank:
    """A rank whose trace has too few of the plan's markers to be cut by it: left out of the
    comparison, with its pair."""

    side: int
    input: RankInput


def cycle_columns(p: RankPart, iters: np.ndarray) -> np.ndarray:
    """Cycle index in `p` of each iteration of `iters` (all present in p.iteration)."""
    order = np.argsort(p.iteration, kind="stable")
    return order[np.searchsorted(p.iteration[order], iters)]


def load_summary(task: RankTask) -> CycleSummary:
    """What a rank offers as cycles (the plan is chosen from the reference ranks')."""
    if task.own_workers:
        keep_freed_memory()
    run = open_run(task.input.path, pid=task.input.pid, group=task.group, for_compare=True, cores=1)
    return summarize_cycles(run)


def _iterations(markers: pd.DataFrame, plan: CyclePlan, start_ns: np.ndarray) -> np.ndarray:
    """Each cycle's iteration: its ProfilerStep number when the plan cuts at steps, else its
    ordinal (marker sequence, kernel anchor, gap or window count)."""
    if plan.source != CycleSource.PROFILER_STEP:
        return np.arange(len(start_ns), dtype=np.int64)
    rows = source_rows(markers, CycleSource.PROFILER_STEP)
    starts = rows["start_ns"].to_numpy(dtype=np.int64)
    steps = rows["name"].astype(str).str.slice(len("ProfilerStep#")).astype(np.int64).to_numpy()
    order = np.argsort(starts, kind="stable")
    starts, steps = starts[order], steps[order]
    at = np.clip(np.searchsorted(starts, start_ns), 0, max(len(starts) - 1, 0))
    return steps[at] if len(steps) else np.arange(len(start_ns), dtype=np.int64)


def _offers(offered: tuple[CycleSource, ...], plan: CyclePlan) -> bool:
    return plan.chosen_by_user or plan.source not in MARKER_SOURCES or plan.source in offered


def load_part(task: RankTask, plan: CyclePlan) -> RankPart | UncutRank:
    """Load, cut and attribute one rank; return its small matrices (a worker's task), or UncutRank
    where its trace lacks the markers the plan cuts at."""
    if task.own_workers:
        keep_freed_memory()  # a worker trims its heap eagerly by default: every array page-faulted anew
    inp = task.input
    run = open_run(inp.path, pid=inp.pid, group=task.group, for_compare=True, cores=1)
    offered = offered_sources(marker_counts(run.markers))
    offers = _offers(offered, plan)
    try:
        cycles = cut_side(run, plan, task.side).cycles  # the plan of all ranks matches no devices
    except InputError:
        if offers and not plan.chosen_by_user:
            raise
        # The plan came from other ranks (or the user's --cycle): this one lacks its markers
        # (a profiler that failed on it); the others are still compared.
        return UncutRank(task.side, inp)
    matrix = attribute_activity(run, cycles)
    K = cycles.n
    keys = matrix.keys
    # One row per (name, kind): a rank's GPU has its own index, the function is the same.
    codes, uniq = pd.MultiIndex.from_arrays([keys["name"].astype(str), keys["kind"].astype(str)]).factorize()
    own = np.zeros((len(uniq), K))
    np.add.at(own, codes, np.asarray(matrix.own_ns, dtype=np.float64))
    names = [str(u[0]) for u in uniq]
    kinds = [str(u[1]) for u in uniq]
    cls = [excess_kind(n, k) for n, k in zip(names, kinds, strict=True)]
    excess = np.zeros((len(EXCESS_KINDS), K))
    for i, kind in enumerate(EXCESS_KINDS):
        rows = [f for f, c in enumerate(cls) if c == kind]
        if rows:
            excess[i] = own[rows].sum(axis=0)
    dur = cycles.dur_ns
    keep = [f for f in range(len(names)) if not (kinds[f] == Kind.CPU.value and _STEP.fullmatch(names[f]))
            and own[f].sum() >= KEEP_SHARE * dur.sum()]
    coll_cycle, coll_ord, coll_dur, coll_group, labels, coll_start = _collectives(run, matrix.row_cycle, inp)
    dist = (run.manifest.get("target") or {}).get("distributed") or {}
    return RankPart(side=task.side, input=inp, declared=dict(dist), iteration=_iterations(run.markers, plan,
                                                                                          cycles.start_ns),
                    dur_ns=dur.astype(np.int64), names=[names[f] for f in keep], kinds=[kinds[f] for f in keep],
                    own_ns=own[keep], excess_ns=excess, coll_cycle=coll_cycle, coll_ord=coll_ord,
                    coll_dur_ns=coll_dur, offers_plan=offers, source_detail=cycles.detail,
                    coll_group=coll_group, group_labels=labels, coll_start_ns=coll_start,
                    marker_sources=offered)


def _collectives(run, row_cycle: np.ndarray, inp: RankInput):
    """(cycle, ordinal in its cycle on its communicator, duration ns, group code) of every NCCL
    kernel inside a cycle, the group labels the codes index (UNKNOWN where not named), and
    each kernel's start ns.

    A kernel whose communicator is not named takes a place on one of the rank's communicators
    that is not known: the named kernels after it in its cycle count as not named too (their
    places there could be off by one)."""
    a = run.activity
    fn = a["function"]
    cats = fn.cat.categories if hasattr(fn, "cat") else pd.Index(pd.unique(fn.astype(str)))
    wanted = np.array([COLLECTIVE.match(str(c)) is not None for c in cats], dtype=bool)
    codes = fn.cat.codes.to_numpy() if hasattr(fn, "cat") else cats.get_indexer(fn.astype(str))
    mask = (codes >= 0) & wanted[np.maximum(codes, 0)] & (a["kind"] == Kind.KERNEL.value).to_numpy()
    rows = np.flatnonzero(mask)
    label = groups.collective_labels(run, rows, inp.path, inp.pid)
    inside = row_cycle[rows] >= 0
    rows, label = rows[inside], label[inside]
    start = a["start_ns"].to_numpy()[rows]
    dur = (a["end_ns"].to_numpy()[rows] - start).astype(np.int64)
    cyc = row_cycle[rows].astype(np.int64)
    unnamed = label == groups.UNKNOWN
    if unnamed.any() and not unnamed.all():
        first = np.full(int(cyc.max()) + 1, np.iinfo(np.int64).max)
        np.minimum.at(first, cyc[unnamed], start[unnamed])
        label[start >= first[cyc]] = groups.UNKNOWN
    grp, uniq = pd.factorize(pd.Series(label, dtype=object), sort=True)
    grp = grp.astype(np.int64)
    order = np.lexsort((start, grp, cyc))
    cyc, dur, grp, start = cyc[order], dur[order], grp[order], start[order]
    key = cyc * max(len(uniq), 1) + grp  # sorted: (cycle, group) runs
    first = np.searchsorted(key, key, side="left")
    labels = tuple(str(u) for u in uniq) or (groups.UNKNOWN,)
    return cyc, np.arange(len(cyc)) - first, dur, grp, labels, start.astype(np.int64)
