"""The multi-rank comparison: find and pair the ranks, plan one cycle definition for all of
them, fan each rank's load, segmentation and attribution out to worker processes, and analyse the small
matrices that come back (straggler analysis per run, tests per rank, findings across ranks).

    discover + pair ──► plan (reference ranks) ──► per-rank tasks (workers) ──► stragglers,
                                                                            rank table, findings
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from perfdiff.cycles import MARKER_SOURCES, MIN_CYCLES, PairChoice, cycle_pattern, marker_plan, prepare
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.errors import InputError
from perfdiff.model.cycles import CyclePlan
from perfdiff.model.durations import parse_duration_ns
from perfdiff.model.schema import CycleSource
from perfdiff.ranks.across import (findings_across, job_cycle, job_cycle_per_iteration, rank_rows, rank_tests,
                                   rank_verdict, with_q)
from perfdiff.ranks.collectives import collective_time
from perfdiff.ranks.discover import pair_ranks, rank_inputs, world_size
from perfdiff.ranks.fanout import estimate_bytes, fanout
from perfdiff.ranks.groups import UNKNOWN
from perfdiff.ranks.part import RankPart, RankTask, UncutRank, load_part, load_summary
from perfdiff.ranks.records import IdentitySource, Phase, RankAnalysis, RankNotice, RankNoticeCode
from perfdiff.ranks.straggler import common_iterations, match_collectives, straggler

__all__ = ["UNMATCHED_SOURCES", "analyze_parts", "compare_ranks"]

UNMATCHED_SOURCES = (CycleSource.WINDOW, CycleSource.IDLE_GAPS)  # cycles that are not iterations


def compare_ranks(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
                  cycle: str | None = None, window: str | int | None = None, group: str = "full",
                  ranks: str | None = None, scheduler: str | None = None, workers: int | None = None,
                  progress: bool = False, processes: bool = True,
                  thresholds: Thresholds | None = None) -> RankAnalysis:
    """Compare two runs of many ranks (see the module docstring).

    `ranks`: which ranks to pair ("all", "0-3", "0:4,1:5"; docs in discover.parse_rank_spec),
    needed when the world sizes differ; given, an nsys export holding several processes is
    read as one rank per process.  `scheduler`: a Dask scheduler's address (its workers read
    the inputs' paths); else a pool of `workers` local processes (default: sized to the
    machine; `processes=False`: in this process, one task after the other).  `progress`: a progress line on a
    terminal.  `thresholds`: the decision thresholds (default perfdiff's with `alpha`, which it
    replaces).  Raises InputError for bad input, or for a scheduler without Dask."""
    th = thresholds if thresholds is not None else Thresholds(alpha=alpha)  # validated: one line
    if cycle is not None:
        cycle_pattern(cycle)  # a bad pattern is the user's one line, not every rank's failure to be cut
    clock = _Clock()
    window_ns = parse_duration_ns(window) if isinstance(window, str) else window
    labels = (str(normal), str(abnormal))
    if scheduler is not None:  # its workers may run in another folder: they get absolute paths
        normal, abnormal = Path(normal).absolute(), Path(abnormal).absolute()
    split = ranks is not None
    ins_n, ins_a = rank_inputs(normal, split_processes=split), rank_inputs(abnormal, split_processes=split)
    pairs, notices = pair_ranks(ins_n, ins_a, ranks, labels)
    own = scheduler is None and processes  # worker processes of our own: their malloc may be tuned
    tasks = ([RankTask(0, p.normal, group, own) for p in pairs] + [RankTask(1, p.abnormal, group, own) for p in pairs])
    largest = max(estimate_bytes(t.input.path) for t in tasks)
    with fanout(scheduler, workers=workers, tasks=len(tasks), largest_bytes=largest, progress=progress,
                processes=processes) as fan:
        clock.lap("start")
        plan, tried, work = _plan(fan, tasks, len(pairs), cycle, window_ns)
        clock.lap("plan", 2 * tried, work)
        parts, work = fan.map_timed(load_part, tasks, batch=fan.batch_for(len(tasks)), plan=plan)
        clock.lap("ranks", len(tasks), work)
        better = _marker_plan(parts, len(pairs), plan)
        if better is not None:
            # The reference ranks had no markers where most others have them (both rank 0s'
            # profilers failed): every rank is cut again at those markers.
            plan, parts = better, None  # the first parts freed before the second fan-out
            parts, work = fan.map_timed(load_part, tasks, batch=fan.batch_for(len(tasks)), plan=plan)
            clock.lap("ranks again", len(tasks), work)
        workers_used = fan.workers
    pairs, parts, uncut, dropped = _drop_uncut(pairs, parts, plan)
    notices += uncut
    # The abnormal run's ranks not compared: in one run only, left out by --ranks or uncut, or
    # declared by the world size and absent.
    paired = {p.abnormal.rank for p in pairs}
    left_out = tuple(sorted((set(range(world_size(ins_a))) | {i.rank for i in ins_a}) - paired))
    result = analyze_parts(parts[:len(pairs)], parts[len(pairs):], plan, thresholds=th, notices=notices,
                           worlds=(world_size(ins_n), world_size(ins_a)), workers=workers_used, pairs=pairs,
                           left_out=left_out, uncut=dropped)
    clock.lap("analysis")
    return dataclasses.replace(result, phases=tuple(clock.phases))


# Pairs tried in turn for the plan while a pair's ranks disagree on which markers they have.
REFERENCE_PAIRS = 4


def _plan(fan, tasks: list[RankTask], n: int, cycle: str | None, window_ns: int | None):
    """(the one plan for every rank, pairs tried, their tasks' work in s): chosen as for a pair
    from the first pair whose two ranks agree on the markers they offer (perfdiff cycle markers,
    ProfilerStep ranges), so that one rank whose profiler failed does not impose idle gaps or
    windows on all (it is left out instead); the first pair's plan when none agrees."""
    chosen, work = None, 0.0
    last = min(n, REFERENCE_PAIRS)
    # Each rank is cut alone by the one plan: a pair's GPUs matched would be wrong for the others.
    choice = PairChoice(cycle, window_ns, match_devices=False)
    for i in range(last):
        (sn, sa), w = fan.map_timed(load_summary, [tasks[i], tasks[n + i]], what="planning")
        work += w
        plan = prepare.plan_cycles((sn, sa), choice)
        chosen = chosen or plan
        if sn.marker_sources == sa.marker_sources:
            return plan, i + 1, work
    return chosen, last, work


def _marker_plan(parts: list, n: int, plan) -> CyclePlan | None:
    """A plan at the markers (perfdiff markers, else ProfilerStep ranges, as for a pair) that
    both ranks of most pairs offer, where the plan (not the user's) cut at something else: its
    reference pair offered none, but cutting the others by iteration leaves out fewer pairs
    than it keeps; None otherwise."""
    if plan.chosen_by_user or plan.source in MARKER_SOURCES:
        return None
    shared: Counter = Counter()
    for pn, pa in zip(parts[:n], parts[n:], strict=True):
        if isinstance(pn, RankPart) and isinstance(pa, RankPart):
            shared.update(set(pn.marker_sources) & set(pa.marker_sources))
    return marker_plan(shared, n)


def _drop_uncut(pairs: list, parts: list, plan) -> tuple[list, list, list[RankNotice], tuple[int, ...]]:
    """The pairs whose ranks were both cut, their parts (normal ranks, then abnormal), a notice
    per run naming its ranks that were not, and the abnormal run's ranks of the pairs dropped.
    InputError when no pair is left."""
    n = len(pairs)
    keep = [i for i in range(n) if not isinstance(parts[i], UncutRank) and not isinstance(parts[n + i], UncutRank)]
    notices = []
    for s, side in enumerate(("normal", "abnormal")):
        cut = [i for i in range(n) if isinstance(parts[s * n + i], UncutRank)]
        if cut:
            other = [pairs[i].abnormal if s == 0 else pairs[i].normal for i in cut]
            notices.append(RankNotice(RankNoticeCode.UNCUT, tuple(parts[s * n + i].input.rank for i in cut), side,
                                      paired=tuple(x.rank for x in other)))
    if not keep:
        p = next(p for p in parts if isinstance(p, UncutRank))
        side = ("normal", "abnormal")[p.side]
        raise InputError(f"rank {p.input.rank} of the {side} run has too few of the markers the plan cuts at "
                         f"({plan.source}), and no pair of ranks is left to compare", path=p.input.path)
    dropped = tuple(pairs[i].abnormal.rank for i in sorted(set(range(n)) - set(keep)))
    return [pairs[i] for i in keep], [parts[i] for i in keep] + [parts[n + i] for i in keep], notices, dropped


class _Clock:
    """Wall time between laps, as Phase records (the cluster's closing counts in the next lap)."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.phases: list[Phase] = []

    def lap(self, name: str, tasks: int = 0, work_s: float = float("nan")) -> None:
        now = time.perf_counter()
        self.phases.append(Phase(name, now - self.t, tasks, work_s))
        self.t = now


def analyze_parts(parts_n: list[RankPart], parts_a: list[RankPart], plan, *, thresholds: Thresholds,
                  notices: list[RankNotice], worlds: tuple[int, int], workers: int, pairs,
                  left_out: tuple[int, ...] = (), uncut: tuple[int, ...] = ()) -> RankAnalysis:
    """The analysis of the ranks' parts (pair i: parts_n[i] against parts_a[i]); `left_out`:
    the abnormal run's ranks not compared, `uncut` those of them that could not be cut (they
    or their pairs)."""
    th, alpha = thresholds, thresholds.alpha
    notices = list(notices)
    iters = []
    for side, parts in (("normal", parts_n), ("abnormal", parts_a)):
        imposed = tuple(p.input.rank for p in parts if not p.offers_plan)
        if imposed:
            notices.append(RankNotice(RankNoticeCode.PLAN_IMPOSED, imposed, side))
        # An export holding several processes declares one launcher's rank: not each process's.
        differs = tuple(p.input.rank for p in parts if p.input.pid is None
                        and p.input.source not in (IdentitySource.TRACE, IdentitySource.ENVIRONMENT)
                        and isinstance(p.declared.get("rank"), int) and p.declared["rank"] != p.input.rank)
        if differs:
            notices.append(RankNotice(RankNoticeCode.IDENTITY_DIFFERS, differs, side))
        unnamed = tuple(p.input.rank for p in parts if _unnamed_collectives(p))
        if unnamed and len(parts) >= 2:
            notices.append(RankNotice(RankNoticeCode.GROUPS_UNKNOWN, unnamed, side))
        # Ranks without a collective where others have them take no part in the straggler
        # analysis (nothing of theirs to match): said, not dropped from its tables in silence.
        silent = tuple(p.input.rank for p in parts if len(p.coll_cycle) == 0)
        if silent and len(silent) < len(parts):
            notices.append(RankNotice(RankNoticeCode.NO_COLLECTIVES, silent, side))
        common = common_iterations(parts)
        if len(common) < MIN_CYCLES:
            raise InputError(f"the ranks of the {side} run share {len(common)} iteration(s): comparing needs "
                             f"at least {MIN_CYCLES}")
        trimmed = max(len(p.iteration) - len(common) for p in parts)
        if trimmed:
            notices.append(RankNotice(RankNoticeCode.ITERATIONS_TRIMMED, side=side, count=int(trimmed)))
        iters.append(common)
    # Time windows and idle gaps fall where each rank's own timing puts them: cycle k is not
    # one iteration on every rank, and collectives cannot be matched across ranks by it.
    unmatched = plan.source in UNMATCHED_SOURCES
    if unmatched:
        notices.append(RankNotice(RankNoticeCode.CYCLES_NOT_ITERATIONS))
    # Each run's collectives matched across its ranks, read by the straggler analysis and the
    # collectives' own time alike.
    matched = (None, None) if unmatched else (match_collectives(parts_n, iters[0]), match_collectives(parts_a, iters[1]))
    stragglers = (straggler(parts_n, "normal", alpha, unmatched, matched[0]),
                  straggler(parts_a, "abnormal", alpha, unmatched, matched[1]))
    tests = []
    for pn, pa in zip(parts_n, parts_a, strict=True):
        tests += rank_tests(pn, pa, iters[0], iters[1], th)
    tests = with_q(tests)
    pairs_parts = list(zip(parts_n, parts_a, strict=True))
    rows = rank_rows(pairs_parts, (iters[0], iters[1]), tests, stragglers, th)
    findings = findings_across(tests, len(pairs_parts), th)
    cycle = job_cycle(pairs_parts, (iters[0], iters[1]))
    coll = collective_time(parts_n, parts_a, iters[0], iters[1], job_cycle_per_iteration(parts_a, iters[1]), th,
                           unmatched, matched)
    verdict = rank_verdict(findings, stragglers, collectives=coll, cycle=cycle, th=th, left_out=left_out,
                           uncut=uncut,
                           compared=tuple(p.input.rank for p in parts_n))
    return RankAnalysis(pairs=tuple(pairs), world_n=worlds[0], world_a=worlds[1], plan=plan, rows=tuple(rows),
                        stragglers=stragglers, findings=tuple(findings), verdict=tuple(verdict), alpha=alpha,
                        workers=workers, notices=tuple(notices), cycle=cycle, collectives=coll,
                        iterations=((int(iters[0][0]), int(iters[0][-1])), (int(iters[1][0]), int(iters[1][-1]))))


def _unnamed_collectives(p: RankPart) -> bool:
    """Whether some of the rank's NCCL kernels name no communicator."""
    if not len(p.coll_cycle):
        return False
    if p.coll_group is None:
        return True
    unknown = [i for i, label in enumerate(p.group_labels) if label == UNKNOWN]
    return bool(unknown) and bool(np.isin(p.coll_group, unknown).any())
