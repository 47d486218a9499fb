"""Benchmark-table comparison: `perfdiff bench` (docs/BENCH_TABLES.md).

The Python API, in the order the data flows::

    df = read_table("kernel-bench-table.txt")          # CSV, TSV, JSON lines or pandas text
    result = compare_tables([("kernels", df)], by="backend")
    text = render_markdown(result)                      # or render_csv, render_json, bench_to_dict

Modules, each importing only those before it: `aligned` (pandas-printed text), `read` (formats),
`columns` (metric, keys, groups), `records` (the result as data), `compare` (medians, ratios,
tests, geometric means), `render` (Markdown, CSV, JSON).  Values keep the metric's own unit.
"""
from __future__ import annotations

from perfdiff.benchtable.aligned import parse_aligned
from perfdiff.benchtable.compare import compare_tables, extremes, gate, regressed_pct
from perfdiff.benchtable.read import read_table, sniff_format
from perfdiff.benchtable.records import (BenchResult, Comparison, GroupSummary, Kind, Note, NoteCode, Outcome,
                                         Significance)
from perfdiff.benchtable.render import (JSON_FORMAT, JSON_VERSION, bench_to_dict, read_bench_json, render_csv,
                                        render_json, render_markdown)

__all__ = [
    "JSON_FORMAT",
    "JSON_VERSION",
    "BenchResult",
    "Comparison",
    "GroupSummary",
    "Kind",
    "Note",
    "NoteCode",
    "Outcome",
    "Significance",
    "bench_to_dict",
    "compare_tables",
    "extremes",
    "gate",
    "parse_aligned",
    "read_bench_json",
    "read_table",
    "regressed_pct",
    "render_csv",
    "render_json",
    "render_markdown",
    "sniff_format",
]
