"""perfdiff: compare a normal and an abnormal run of a GPU process and say what changed and why.

    import perfdiff
    c = perfdiff.compare("normal/", "abnormal/")
    c.functions            # a DataFrame: own time, τ, β, q … per function
    c.findings, c.warnings # typed records
    c.to_markdown()        # the report

`perfdiff.cycle()` / `mark_cycle()` are the target-side cycle markers (standard library only).
The analysis API is imported on first use, so `import perfdiff` in a target stays cheap.
"""
from __future__ import annotations

from typing import Any

from perfdiff.version import __version__

from perfdiff.marker import cycle, mark_cycle  # noqa: E402

_API = ("compare", "load", "tree", "compare_ranks", "compare_processes", "read_comparison", "Comparison",
        "ProcessComparison", "RangeTree", "RankComparison", "Run")


def __getattr__(name: str) -> Any:
    if name in _API:
        from perfdiff import api

        return getattr(api, name)
    raise AttributeError(f"module 'perfdiff' has no attribute {name!r}")


__all__ = ["Comparison", "ProcessComparison", "RangeTree", "RankComparison", "Run", "__version__", "compare",
           "compare_processes", "compare_ranks", "cycle", "load", "mark_cycle", "read_comparison", "tree"]
