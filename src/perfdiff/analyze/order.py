"""The detailed table's order, and where a host state stands in it.

The table ranks by tiers (docs/STATISTICS.md, "Ranking"): functions whose own time changed
significantly, then waits (symptoms), then host states, then the rest; each tier by suspicion
score, then |τ|.  A host state (`oncpu`, `blocked`, `runq`, `read` …: FunctionStats.host_state)
grows and shrinks with the cycle by itself; ranked by its τ alone it leads the table ahead of
the function whose change moved the cycle.  It stands among the functions only where the
verdict names it as a cause (the run queue of CPU contention, the blocked time of I/O wait …):
`order_details` lifts those once the verdict is known, and keeps the suspects' pictures
(Analysis.traces) the first TRACE_PANELS significant functions of the table so ordered.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from perfdiff.analyze.evidence import Finding, FindingCode
from perfdiff.analyze.records import Analysis, DetailRow, FunctionStats, MuStats
from perfdiff.analyze.verdict_records import VerdictClass

TRACE_PANELS = 4  # suspects (and context metrics) drawn, each

SortKey = tuple[int, float, float, str, str]


def detail_key(functions: Sequence[FunctionStats], mu: Sequence[MuStats], alpha: float,
               named: frozenset[int] = frozenset()) -> Callable[[DetailRow], SortKey]:
    """The detailed table's sort key: (tier, −score, −|τ|, name, metric); tiers 0 significant
    functions (and host states in `named`), 1 significant waits, 2 significant host states,
    3 the rest."""
    def key(r: DetailRow) -> SortKey:
        f = functions[r.func]
        if not (math.isfinite(f.q_t) and f.q_t <= alpha):
            tier = 3
        elif f.host_state and r.func not in named:
            tier = 2
        else:
            tier = 1 if f.wait else 0
        score = r.score if math.isfinite(r.score) else 0.0
        return tier, -score, -abs(f.tau_pp), f.name, mu[r.mu].metric if r.mu is not None else ""
    return key


def named_by_verdict(findings: Sequence[Finding], verdict: Sequence[VerdictClass]) -> frozenset[int]:
    """The functions (indexes into Analysis.functions) a verdict class names as a cause."""
    return frozenset(f.func for v in verdict for f in (findings[i] for i in v.evidence)
                     if f.code == FindingCode.CAUSE and f.func is not None)


def order_details(c: Analysis, findings: Sequence[Finding], verdict: Sequence[VerdictClass]) -> Analysis:
    """`c` with its detailed table in the order the report shows (`detail_key`, the host states
    the verdict names among the functions) and its suspects' pictures the first TRACE_PANELS
    significant functions of that order (the analysis drew the candidates: analyze.compare)."""
    named = named_by_verdict(findings, verdict)
    details = tuple(sorted(c.details, key=detail_key(c.functions, c.mu, c.alpha, named)))
    first: dict[tuple[str, str], int] = {}
    for k, r in enumerate(details):
        f = c.functions[r.func]
        first.setdefault((f.name, f.device), k)
    suspects = sorted((t for t in c.traces if t.kind == "function"), key=lambda t: first.get((t.name, t.device), 1 << 30))
    traces = tuple(suspects[:TRACE_PANELS]) + tuple(t for t in c.traces if t.kind != "function")
    if details == c.details and traces == c.traces:
        return c
    return replace(c, details=details, traces=traces)
