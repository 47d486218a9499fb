"""Analysis: per-(function, metric, device) statistics, checks and findings, as records.

`compare_runs` builds an `Analysis` from two loaded, segmented and attributed runs;
`build_findings` orders what it says.  No wording here: perfdiff.render does that.
"""
from perfdiff.analyze.compare import compare_runs
from perfdiff.analyze.findings import Finding, FindingCode, build_findings
from perfdiff.analyze.records import (Analysis, CommonMode, ContextStats, DetailRow, FunctionStats, MuStats, Notice,
                                      NoticeCode, RunSummary)

__all__ = ["Analysis", "CommonMode", "ContextStats", "DetailRow", "Finding", "FindingCode", "FunctionStats",
           "MuStats", "Notice", "NoticeCode", "RunSummary", "build_findings", "compare_runs"]
