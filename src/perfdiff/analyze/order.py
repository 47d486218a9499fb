"""The detailed table's order once the verdict is known: host states below the functions.

A host state (`oncpu`, `blocked`, `runq`, `read` …: FunctionStats.host_state) grows and
shrinks with the cycle by itself; ranked by its τ alone it leads
the table ahead of the function whose change moved the cycle.  It stays among the functions
only where the verdict names it as a cause (the run queue of CPU contention, the blocked time
of I/O wait …); otherwise it stands below the functions and the waits, above the rows that did
not change significantly (docs/STATISTICS.md, "Detailed table").
"""
from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Sequence

from perfdiff.analyze.evidence import Finding, FindingCode
from perfdiff.analyze.records import Analysis, DetailRow
from perfdiff.analyze.verdict_records import VerdictClass


def named_by_verdict(findings: Sequence[Finding], verdict: Sequence[VerdictClass]) -> frozenset[int]:
    """The functions (indexes into Analysis.functions) a verdict class names as a cause."""
    return frozenset(f.func for v in verdict for f in (findings[i] for i in v.evidence)
                     if f.code == FindingCode.CAUSE and f.func is not None)


def order_details(c: Analysis, findings: Sequence[Finding], verdict: Sequence[VerdictClass]) -> Analysis:
    """`c` with its detailed table in the order the report shows: significant functions, then
    waits, then the host states the verdict does not name, then the rest; within each tier the
    order the analysis gave (suspicion score, then |τ|)."""
    named = named_by_verdict(findings, verdict)

    def tier(r: DetailRow) -> int:
        f = c.functions[r.func]
        if not (math.isfinite(f.q_t) and f.q_t <= c.alpha):
            return 3
        if f.host_state and r.func not in named:
            return 2
        return 1 if f.wait else 0

    details = tuple(sorted(c.details, key=tier))  # stable: each tier keeps its order
    return c if details == c.details else replace(c, details=details)
