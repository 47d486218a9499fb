"""Columns assembled into the startup table: the rows in display order and, with a grouping
regex, mean ± sd per configuration and row with, for two configurations, the change and a
Mann–Whitney U-test (docs/STARTUP.md, Groups; display rules in docs/STATISTICS.md).  Seconds.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from perfdiff.errors import InputError
from perfdiff.startup.parse import StartupColumn
from perfdiff.startup.rules import EXTRA_ROWS_AFTER, EXTRA_ROWS_BEFORE, REFERENCE_ROWS


@dataclass(frozen=True)
class GroupCell:
    """mean ± sd of one row over the runs of one group (complete runs only)."""

    n: int
    mean_s: float
    sd_s: float  # ddof 1; NaN for one run
    decimals: int
    derived: bool


@dataclass(frozen=True)
class RowComparison:
    """Two groups: change of the mean (second minus first) and the Mann–Whitney p."""

    delta_s: float
    delta_pct: float
    p: float  # NaN when not computable or when α cannot be reached (see `p_note`)
    p_note: str | None
    min_p: float


@dataclass(frozen=True)
class StartupGroups:
    """Columns grouped by `--group REGEX`: per group and row a summary, and for two groups a test."""

    regex: str
    keys: tuple[str, ...]
    members: dict[str, tuple[str, ...]]
    left_out: tuple[str, ...]  # incomplete runs, not summarised
    cells: dict[str, dict[str, GroupCell]]  # key -> row -> cell
    comparison: dict[str, RowComparison]  # row -> comparison (two groups only)
    alpha: float
    runs_needed: int | None  # per group, for the U-test to be able to reach alpha


@dataclass(frozen=True)
class StartupTable:
    """The comparison: rows in display order, one column per log, optional groups."""

    rows: tuple[str, ...]
    columns: tuple[StartupColumn, ...]
    groups: StartupGroups | None = None


# ---------------------------------------------------------------------------------------------
# The table


def table_rows(columns: Sequence[StartupColumn], extra_rows: Sequence[str] = ()) -> tuple[str, ...]:
    """The reference rows, plus the extra rows that some column has, next to their neighbour."""
    present = {r for c in columns for r in c.phases}
    rows = list(REFERENCE_ROWS)
    for row, before in EXTRA_ROWS_BEFORE.items():
        if row in present:
            rows.insert(rows.index(before), row)
    for row, after in EXTRA_ROWS_AFTER.items():
        if row in present:
            rows.insert(rows.index(after) + 1, row)
    for row in extra_rows:  # user rows go before the totals
        if row not in rows and row in present:
            rows.insert(rows.index("total_time"), row)
    return tuple(rows)


def build_startup_table(columns: Sequence[StartupColumn], group_regex: str | None = None,
                        alpha: float = 0.05, extra_rows: Sequence[str] = ()) -> StartupTable:
    """Assemble the table; with `group_regex`, summarise the columns per configuration."""
    rows = table_rows(columns, extra_rows)
    groups = group_columns(columns, rows, group_regex, alpha) if group_regex else None
    return StartupTable(rows=rows, columns=tuple(columns), groups=groups)


# ---------------------------------------------------------------------------------------------
# Groups of repeated runs


def group_key(name: str, pattern: re.Pattern[str]) -> str | None:
    """The configuration of a column: the regex's first group if it has one, else its match."""
    m = pattern.search(name)
    if m is None:
        return None
    return m.group(1) if pattern.groups and m.group(1) is not None else m.group(0)


def group_columns(columns: Sequence[StartupColumn], rows: Sequence[str], regex: str,
                  alpha: float = 0.05) -> StartupGroups:
    """mean ± sd per group and row over complete runs; for two groups Δ and a U-test p.

    The test is perfdiff.stats' Mann–Whitney (exact with ties up to C(n1+n2, n1) = 200 000).
    """
    # imported here: numpy and the statistics take time to import, and reading logs needs neither
    import numpy as np

    from perfdiff.stats import cycles_needed, mann_whitney_p, min_attainable_p

    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise InputError(f"--group {regex!r}: invalid regular expression ({exc})") from None
    members: dict[str, list[StartupColumn]] = {}
    left_out: list[str] = []
    for col in columns:
        key = group_key(col.name, pattern)
        if key is None:
            raise InputError(f"--group {regex!r} does not match this file's name {col.name!r}",
                             path=col.file or col.name)
        members.setdefault(key, [])
        if col.status == "complete":
            members[key].append(col)
        else:
            left_out.append(col.name)
    cells: dict[str, dict[str, GroupCell]] = {}
    for key, cols in members.items():
        cells[key] = {}
        for row in rows:
            vals = [c.phases[row] for c in cols if row in c.phases]
            if not vals:
                continue
            arr = np.array([v.value_s for v in vals])
            cells[key][row] = GroupCell(
                n=len(arr), mean_s=float(arr.mean()),
                sd_s=float(arr.std(ddof=1)) if len(arr) > 1 else math.nan,
                decimals=max(v.decimals for v in vals),
                derived=any(v.derived for v in vals))
    comparison: dict[str, RowComparison] = {}
    runs_needed = None
    keys = tuple(members)
    if len(keys) == 2:
        a_cols, b_cols = members[keys[0]], members[keys[1]]
        for row in rows:
            a = np.array([c.phases[row].value_s for c in a_cols if row in c.phases])
            b = np.array([c.phases[row].value_s for c in b_cols if row in c.phases])
            if len(a) == 0 or len(b) == 0:
                continue
            p, method = mann_whitney_p(a, b)
            min_p = 1.0 if method == "all-tied" else min_attainable_p(len(a), len(b))
            note = "all values tied" if method == "all-tied" else None
            if note is None and min_p > alpha:  # docs/STATISTICS.md: n/a, and how many runs it needs
                note = f"the U-test cannot reach alpha={alpha:g} with {len(a)} and {len(b)} runs"
                p = math.nan
            delta = float(b.mean() - a.mean())
            comparison[row] = RowComparison(
                delta_s=delta, delta_pct=100.0 * delta / a.mean() if a.mean() else math.nan,
                p=p, p_note=note, min_p=min_p)
        if any(c.p_note and c.p_note.startswith("the U-test cannot") for c in comparison.values()):
            runs_needed = cycles_needed(1, alpha)  # one test: runs per group to reach alpha
    return StartupGroups(
        regex=regex, keys=keys, members={k: tuple(c.name for c in v) for k, v in members.items()},
        left_out=tuple(left_out), cells=cells, comparison=comparison, alpha=alpha,
        runs_needed=runs_needed)
