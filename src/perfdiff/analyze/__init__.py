"""Analysis: per-(function, metric, device) statistics, checks and findings, as records.

`compare_runs` builds an `Analysis` from two loaded, segmented and attributed runs;
`build_findings` orders what it says.  No wording here: perfdiff.render does that.

`Thresholds` (standard library only) is imported at once: the CLI and the API build one
before the runs load.  The rest (numpy, scipy) is imported on first use of a name, so that
building the record does not import the statistics ahead of the runs' loading.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from perfdiff.analyze.thresholds import Thresholds

if TYPE_CHECKING:
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.findings import Finding, FindingCode, build_findings
    from perfdiff.analyze.records import (Analysis, CommonMode, ContextStats, DetailRow, FunctionStats, MuStats,
                                          Notice, NoticeCode, RunSummary)

_LAZY = {
    "compare_runs": "perfdiff.analyze.compare",
    "Finding": "perfdiff.analyze.findings", "FindingCode": "perfdiff.analyze.findings",
    "build_findings": "perfdiff.analyze.findings",
    **{name: "perfdiff.analyze.records" for name in ("Analysis", "CommonMode", "ContextStats", "DetailRow",
                                                     "FunctionStats", "MuStats", "Notice", "NoticeCode",
                                                     "RunSummary")},
}

__all__ = ["Analysis", "CommonMode", "ContextStats", "DetailRow", "Finding", "FindingCode", "FunctionStats",
           "MuStats", "Notice", "NoticeCode", "RunSummary", "Thresholds", "build_findings", "compare_runs"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
