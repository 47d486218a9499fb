"""Analysis: per-(function, metric, device) statistics, checks and findings, as records.

The package's names are the result records, what rendering and users read: `Analysis` and
its rows (records.py), `Finding` and the evidence records (evidence.py), the verdict's records
(verdict_records.py), the range tree's (tree_records.py), `ComparisonResult` (result.py) and
`Thresholds`.  The computations are their modules' own: `compare.compare_runs` builds an
`Analysis` from two loaded, cut and attributed runs, `findings.build_findings` states what it
says, `verdict.build_verdict` names the classes of change.  No wording here: perfdiff.render.

`Thresholds` (standard library only) is imported at once: the CLI and the API build one
before the runs load.  The rest (numpy, the statistics) is imported on first use of a name, so that
building the record does not import the statistics ahead of the runs' loading.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from perfdiff.analyze.thresholds import Thresholds

if TYPE_CHECKING:
    from perfdiff.analyze.evidence import Finding, FindingCode
    from perfdiff.analyze.records import (Analysis, CommonMode, ContextStats, DetailRow, FunctionStats, MuStats,
                                          Notice, NoticeCode, RunSummary)
    from perfdiff.analyze.result import ComparisonResult
    from perfdiff.analyze.verdict_records import VerdictClass, VerdictCode

_LAZY = {
    "Finding": "perfdiff.analyze.evidence", "FindingCode": "perfdiff.analyze.evidence",
    "ComparisonResult": "perfdiff.analyze.result",
    "VerdictClass": "perfdiff.analyze.verdict_records", "VerdictCode": "perfdiff.analyze.verdict_records",
    **{name: "perfdiff.analyze.records" for name in ("Analysis", "CommonMode", "ContextStats", "DetailRow",
                                                     "FunctionStats", "MuStats", "Notice", "NoticeCode",
                                                     "RunSummary")},
}

__all__ = ["Analysis", "CommonMode", "ComparisonResult", "ContextStats", "DetailRow", "Finding", "FindingCode",
           "FunctionStats", "MuStats", "Notice", "NoticeCode", "RunSummary", "Thresholds", "VerdictClass",
           "VerdictCode"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
