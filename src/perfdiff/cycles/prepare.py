"""Prepare a pair of runs: load each, see what it offers as cycles, choose one plan for both,
and cut each by it (docs/STATISTICS.md, cycles).  `api.compare`, `api.tree` and every rank
pair of `compare_ranks` go through these steps: `prepare_pair` runs them for a pair as
a perfdiff.parallel.Parallel decides; the rank tasks run its steps (`summarize_cycles`,
`plan_cycles`, `cut_side`) one by one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Generic, TypeVar

from perfdiff.bundle import RunData
from perfdiff.cycles.cut import ABNORMAL, NORMAL, CutSide, cut_side
from perfdiff.cycles.offer import CycleSummary, summarize_cycles
from perfdiff.cycles.plan import plan_pair
from perfdiff.model.cycles import CyclePlan
from perfdiff.parallel import Parallel

__all__ = ["Cut", "Loaded", "PairChoice", "Prepared", "plan_cycles", "prepare_pair"]

T = TypeVar("T")


class Cut(Enum):
    """When a prepared pair is cut by its plan."""

    ALWAYS = "always"
    MARKED = "marked"  # only at cycles the process marked (CycleSource.marked); else left uncut
    NEVER = "never"  # neither planned nor cut


@dataclass(frozen=True)
class PairChoice:
    """What the user chose for a pair's cycles: `cycle` (a regex) or `window_ns` (ns), and
    how the pair is cut (`cut`).  `match_devices`: pair the runs' GPUs by their order of
    activity when their indexes differ (not for ranks, each cut alone by one plan)."""

    cycle: str | None = None
    window_ns: int | None = None
    cut: Cut = Cut.ALWAYS
    match_devices: bool = True


@dataclass(frozen=True)
class Loaded:
    """One side as loaded: its run, what the caller keeps beside it in the side's worker
    (`keep`: never pickled), and a small `note` that both sides' steps after the plan see."""

    run: RunData
    keep: Any = None
    note: Any = None


@dataclass(frozen=True)
class Prepared(Generic[T]):
    """A prepared pair: its plan (None with Cut.NEVER) and each side's result."""

    plan: CyclePlan | None
    normal: T
    abnormal: T


def plan_cycles(offers: tuple[CycleSummary, CycleSummary], choice: PairChoice) -> CyclePlan:
    """The one plan both runs of a pair are cut by, from what each offers (normal, abnormal)
    and what the user chose: the only place a pair's plan is made."""
    plan = plan_pair(offers[0], offers[1], cycle_regex=choice.cycle, window_ns=choice.window_ns)
    return plan if choice.match_devices else dataclasses.replace(plan, device_map=())


def _cuts(plan: CyclePlan | None, choice: PairChoice) -> bool:
    return plan is not None and (choice.cut is Cut.ALWAYS or (choice.cut is Cut.MARKED and plan.source.marked))


def prepare_pair(args: tuple[Any, Any], choice: PairChoice, load: Callable[[Any, int], Loaded],
                 then: Callable[[CutSide, Any, tuple[Any, Any]], T], *, parallel: Parallel | None = None,
                 sizes: tuple[int, int] | None = None,
                 while_waiting: Callable[[], None] | None = None) -> Prepared[T]:
    """Load both sides (`args`: normal, abnormal) with `load(arg, cores)`, plan their cycles
    together (`plan_cycles`), cut each by the plan (`cut_side`; uncut, its cycles None, where
    `choice` does not cut), and finish each with `then(cut, keep, notes)` (`notes`: both
    sides' Loaded.note).  The two sides run as `parallel` decides (Parallel.meet_pair: two
    workers for large inputs of `sizes` bytes, default serial); `while_waiting` runs here
    meanwhile.  InputError as the loading and the cut raise it."""
    plans: list[CyclePlan | None] = []

    def first(item: tuple[int, Any], cores: int) -> tuple[tuple[int, Loaded], tuple[CycleSummary | None, Any]]:
        side, arg = item
        loaded = load(arg, cores)
        return (side, loaded), (None if choice.cut is Cut.NEVER else summarize_cycles(loaded.run), loaded.note)

    def meet(offers: list[tuple[CycleSummary | None, Any]]) -> tuple[CyclePlan | None, tuple[Any, Any]]:
        summaries = (offers[NORMAL][0], offers[ABNORMAL][0])
        plans.append(None if summaries[0] is None or summaries[1] is None else plan_cycles(summaries, choice))
        return plans[0], (offers[NORMAL][1], offers[ABNORMAL][1])

    def second(state: tuple[int, Loaded], decision: tuple[CyclePlan | None, tuple[Any, Any]]) -> T:
        (side, loaded), (plan, notes) = state, decision
        cut = cut_side(loaded.run, plan, side) if plan is not None and _cuts(plan, choice) else \
            CutSide(loaded.run, None)
        return then(cut, loaded.keep, notes)

    normal, abnormal = (parallel or Parallel.serial()).meet_pair(
        first, meet, second, ((NORMAL, args[0]), (ABNORMAL, args[1])), sizes, while_waiting)
    return Prepared(plans[0], normal, abnormal)
