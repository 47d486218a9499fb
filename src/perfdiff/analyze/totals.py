"""Findings of a pair compared by totals (Regime.TOTALS: one or a few steps per run, or a
one-shot program): no cycles to test over, so each run's step is described, not tested; each
function's calls are the samples of the per-call tests; what vanished, what is new, kernels
replaced under one op, and a launch structure that changed are stated from the totals.

`TOTALS_RULES`, in order, is the findings' order (docs/STATISTICS.md, "One step per run").
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from perfdiff.analyze.categories import classify
from perfdiff.analyze.evidence import (Finding, FindingCode, LaunchStructureEvidence, PerCallEvidence,
                                       PerCallNoneEvidence, StepChangeEvidence, TotalsEvidence)
from perfdiff.analyze.launchers import replaced_findings, replaced_functions
from perfdiff.analyze.records import Analysis, FunctionStats
from perfdiff.model.schema import GPU_KINDS, CycleSource, Kind

__all__ = ["TOTALS_RULES", "TotalsSelection", "select_totals"]

PER_CALL_LISTED = 2  # functions slower (and faster) per call stated; the tables hold the rest
TOTALS_LISTED = 3  # vanished (and new) functions stated, largest first


@dataclass(frozen=True)
class TotalsSelection:
    """What the totals' rules share, worked out once by `select_totals`: the analysis, the
    functions its replacements state (perfdiff.analyze.launchers.replaced_functions), and the
    launch structure's (vanished kernel, new kernel), if any; function indexes."""

    c: Analysis
    replaced: frozenset[int]
    launch_pair: tuple[int, int] | None


def select_totals(c: Analysis) -> TotalsSelection:
    """The TotalsSelection of an analysis."""
    replaced = frozenset(replaced_functions(c))
    return TotalsSelection(c, replaced, _launch_pair(c, replaced))


def _step_change(s: TotalsSelection) -> tuple[Finding, ...]:
    c = s.c
    n, a = c.normal.median_us, c.abnormal.median_us
    step = c.plan is not None and c.plan.source == CycleSource.PROFILER_STEP
    return (Finding(FindingCode.STEP_CHANGE, evidence=StepChangeEvidence(
        step=step, pieces_n=c.normal.n_cycles, pieces_a=c.abnormal.n_cycles, n_us=n, a_us=a,
        change_pct=100.0 * (a / n - 1.0) if n > 0 else math.nan)),)


def _per_call(s: TotalsSelection) -> tuple[Finding, ...]:
    c = s.c
    sig = sorted((k for k, t in enumerate(c.per_call) if c.thresholds.significant(t.q)), key=lambda k: c.per_call[k].p)
    out = []
    for slower in (True, False):
        picked = [k for k in sig if (c.per_call[k].median_a_us > c.per_call[k].median_n_us) == slower]
        for k in picked[:PER_CALL_LISTED]:
            t = c.per_call[k]
            out.append(Finding(FindingCode.PER_CALL, function=t.name, device=t.device, q=t.q,
                               func=_index(c, t.name, t.device, t.kind),
                               evidence=PerCallEvidence(test=k, slower=slower, median_n_us=t.median_n_us,
                                                        median_a_us=t.median_a_us, calls_n=t.calls_n,
                                                        calls_a=t.calls_a, p=t.p)))
    return tuple(out)


def _per_call_none(s: TotalsSelection) -> tuple[Finding, ...]:
    c = s.c
    if not c.per_call or any(c.thresholds.significant(t.q) for t in c.per_call):
        return ()
    return (Finding(FindingCode.PER_CALL_NONE, evidence=PerCallNoneEvidence(n_tests=len(c.per_call))),)


def _launch_pair(c: Analysis, claimed: frozenset[int]) -> tuple[int, int] | None:
    """The largest vanished and the largest new kernel of one device that no replacement
    states, of one op category (§6c), where the new one runs fewer and longer launches, or
    more and shorter ones.  None on other hardware: its kernels have the other vendor's names."""
    if c.hardware_differs:
        return None
    gone = _largest(c, "vanished", claimed, kernels=True)
    new = _largest(c, "new", claimed, kernels=True)
    if not gone or not new:
        return None
    g = gone[0]
    kind = classify(c.functions[g].name, c.functions[g].kind)
    n = next((i for i in new if c.functions[i].device == c.functions[g].device
              and classify(c.functions[i].name, c.functions[i].kind) == kind), None)
    if n is None:
        return None
    fg, fn = c.functions[g], c.functions[n]
    fewer_longer = fn.calls_a < fg.calls_n and fn.per_call_a_us > fg.per_call_n_us
    more_shorter = fn.calls_a > fg.calls_n and fn.per_call_a_us < fg.per_call_n_us
    return (g, n) if fewer_longer or more_shorter else None


def _launch_structure(s: TotalsSelection) -> tuple[Finding, ...]:
    pair = s.launch_pair
    if pair is None:
        return ()
    fg, fn = s.c.functions[pair[0]], s.c.functions[pair[1]]
    return (Finding(FindingCode.LAUNCH_STRUCTURE, function=fn.name, device=fn.device, related=pair,
                    evidence=LaunchStructureEvidence(fewer_longer=fn.calls_a < fg.calls_n, calls_n=fg.calls_n,
                                                     calls_a=fn.calls_a, per_call_n_us=fg.per_call_n_us,
                                                     per_call_a_us=fn.per_call_a_us)),)


def _one_side(code: FindingCode, presence: str) -> Callable[[TotalsSelection], tuple[Finding, ...]]:
    def rule(s: TotalsSelection) -> tuple[Finding, ...]:
        c = s.c
        if c.hardware_differs:  # the other vendor's names for the same work: its category table says where
            return ()
        claimed = s.replaced | frozenset(s.launch_pair or ())
        out = []
        for i in _largest(c, presence, claimed, kernels=False)[:TOTALS_LISTED]:
            f = c.functions[i]
            vanished = presence == "vanished"
            out.append(Finding(code, function=f.name, device=f.device, func=i, evidence=TotalsEvidence(
                t_us=f.t_n_us if vanished else f.t_a_us, calls=f.calls_n if vanished else f.calls_a)))
        return tuple(out)
    return rule


def _largest(c: Analysis, presence: str, claimed: frozenset[int], *, kernels: bool) -> list[int]:
    """Functions of one run only (`presence`), not claimed, largest own time first: GPU
    functions only where `kernels`, else every kind but host states."""
    def keep(f: FunctionStats) -> bool:
        return f.presence == presence and (f.kind in GPU_KINDS if kernels else f.kind != Kind.HOST)
    t = (lambda f: f.t_n_us) if presence == "vanished" else (lambda f: f.t_a_us)
    return sorted((i for i, f in enumerate(c.functions) if keep(f) and i not in claimed),
                  key=lambda i: -t(c.functions[i]))


def _index(c: Analysis, name: str, device: str, kind: str) -> int | None:
    return next((i for i, f in enumerate(c.functions) if f.name == name and f.device == device and f.kind == kind),
                None)


@dataclass(frozen=True)
class TotalsRule:
    """One rule: the code it states and how it selects its findings from the TotalsSelection."""

    code: FindingCode
    select: Callable[[TotalsSelection], tuple[Finding, ...]]


# The findings' order for a pair compared by totals: the step, what was replaced, the launch
# structure, the per-call changes, then what vanished and what is new.
TOTALS_RULES: tuple[TotalsRule, ...] = (
    TotalsRule(FindingCode.STEP_CHANGE, _step_change),
    TotalsRule(FindingCode.REPLACED, lambda s: replaced_findings(s.c)),
    TotalsRule(FindingCode.LAUNCH_STRUCTURE, _launch_structure),
    TotalsRule(FindingCode.PER_CALL, _per_call),
    TotalsRule(FindingCode.PER_CALL_NONE, _per_call_none),
    TotalsRule(FindingCode.VANISHED, _one_side(FindingCode.VANISHED, "vanished")),
    TotalsRule(FindingCode.NEW, _one_side(FindingCode.NEW, "new")),
)
