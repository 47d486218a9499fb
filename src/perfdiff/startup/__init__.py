"""Startup phases of vLLM and SGLang servers, read from their logs (docs/STARTUP.md).

The Python API behind `perfdiff startup`, in the order the data flows::

    columns = [read_startup_log(p, n) for p, n in zip(paths, column_names(paths))]
    table = build_startup_table(columns, group_regex=None)
    text = render_markdown(table)   # or render_csv, render_json, table_to_dict

Modules, each importing only those before it: `rules` (the patterns), `scan` (candidate lines,
launches, time stamps), `parse` (one log into one column), `group` (the table, groups and their
statistics), `render` (Markdown, CSV, JSON).  Every value is in seconds.
"""
from __future__ import annotations

from perfdiff.startup.group import (
    GroupCell,
    RowComparison,
    StartupGroups,
    StartupTable,
    build_startup_table,
    table_rows,
)
from perfdiff.startup.parse import (
    PhaseValue,
    StartupColumn,
    column_names,
    parse_startup_log,
    read_startup_log,
)
from perfdiff.startup.render import render_csv, render_json, render_markdown, table_to_dict
from perfdiff.startup.rules import REFERENCE_ROWS, Rule, parse_phase_regex

__all__ = [
    "REFERENCE_ROWS",
    "GroupCell",
    "PhaseValue",
    "RowComparison",
    "Rule",
    "StartupColumn",
    "StartupGroups",
    "StartupTable",
    "build_startup_table",
    "column_names",
    "parse_phase_regex",
    "parse_startup_log",
    "read_startup_log",
    "render_csv",
    "render_json",
    "render_markdown",
    "table_rows",
    "table_to_dict",
]
