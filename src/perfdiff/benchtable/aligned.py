"""Read a table as pandas prints it (`print(df)`, `df.to_string()`): whitespace-aligned text.

Columns are found by position, not by splitting words: a character column that is blank on
every line separates two fields, so names and values may hold single spaces.  Handled: the
index column (dropped when it only numbers the rows, kept under its name otherwise), an index
name line, sparsified MultiIndex rows, right- or left-justified cells, NaN/None, frames that
pandas wrapped into blocks (`\\` after the header of every block but the last), headers over
several lines (the levels of a MultiIndex header, joined by `_`), the `[n rows x m columns]`
footer, and pivoted tables (the name of the column level printed above the index names:
melted back into that column and `value`).  A table
pandas truncated (`...`) is refused: its values are not in the text.  docs/BENCH_TABLES.md,
"Inputs".
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfdiff.errors import InputError

# How pandas prints a missing value, whatever the dtype.
NA_TOKENS = frozenset({"", "NaN", "nan", "None", "<NA>", "NA", "NaT", "null", "N/A", "n/a"})
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf", re.IGNORECASE)
_FOOTER = re.compile(r"\[\d+ rows x \d+ columns\]")
_ELLIPSIS = frozenset({"...", ".."})


def is_number(text: str) -> bool:
    """Whether a printed cell is a number (NaN tokens are not)."""
    return bool(_NUMBER.fullmatch(text))


def parse_aligned(text: str, source: object = None) -> pd.DataFrame:
    """The DataFrame of a pandas-printed table; numeric columns as int64/float64, others str.

    Raises InputError (naming `source`) when there is no header and data line, when pandas
    truncated the table, or when wrapped blocks disagree in their number of rows.
    """
    lines = [ln.rstrip() for ln in text.expandtabs(8).splitlines()]
    lines = [ln for ln in lines if not _FOOTER.fullmatch(ln.strip())]
    blocks = _blocks(lines)
    if not blocks:
        raise InputError("empty table", path=source)
    frames = [_parse_block(b, source) for b in blocks]
    first, index_cols, level = frames[0]
    out = [first]
    for frame, idx, _ in frames[1:]:
        if len(frame) != len(first):
            raise InputError("the wrapped blocks of the printed table have different numbers of rows",
                             path=source)
        out.append(frame.drop(columns=idx))
    df = pd.concat([f.reset_index(drop=True) for f in out], axis=1)
    if df.columns.duplicated().any():
        dup = df.columns[df.columns.duplicated()][0]
        raise InputError(f"column {dup!r} appears twice", path=source)
    if level:
        # A pivoted table (one column per variant): back to one row per value.
        value = "value" if "value" not in index_cols else "value_"
        df = df.melt(id_vars=index_cols, var_name=level, value_name=value)
    return _typed(df)


def _blocks(lines: list[str]) -> list[list[str]]:
    """Blank-line separated blocks; the continuation mark `\\` is cut from header lines."""
    blocks: list[list[str]] = []
    cur: list[str] = []
    for ln in [*lines, ""]:
        if ln.strip():
            cur.append(ln)
        elif cur:
            blocks.append(cur)
            cur = []
    for b in blocks:
        if b[0].endswith("\\"):
            b[0] = b[0][:-1].rstrip()
    return blocks


def _fields(lines: list[str]) -> list[tuple[int, int]]:
    """[start, end) character spans separated by character columns blank on every line."""
    width = max(len(ln) for ln in lines)
    grid = np.array([list(ln.ljust(width)) for ln in lines], dtype="<U1")
    filled = (grid != " ").any(axis=0)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], filled, [False])).astype(np.int8)))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def _cells(lines: list[str], spans: list[tuple[int, int]]) -> list[list[str]]:
    return [[ln[s:e].strip() for s, e in spans] for ln in lines]


def _merge(spans: list[tuple[int, int]], i: int, j: int) -> list[tuple[int, int]]:
    """Spans i and j (neighbours) as one."""
    a, b = sorted((i, j))
    return spans[:a] + [(spans[a][0], spans[b][1])] + spans[b + 1:]


def _nearer(spans: list[tuple[int, int]], i: int) -> int:
    """The neighbour of span i across the narrower gap (right on a tie: pandas right-justifies)."""
    if i == len(spans) - 1:
        return i - 1
    if i == 0:
        return 1
    left_gap = spans[i][0] - spans[i - 1][1]
    right_gap = spans[i + 1][0] - spans[i][1]
    return i - 1 if left_gap < right_gap else i + 1


def _index_name_line(line: list[str], below: list[list[str]]) -> int:
    """How many leading fields `line` names when it is pandas' index-name line (text in leading
    fields only, blank over the columns, with data below them); 0 when it is not."""
    filled = [k for k, c in enumerate(line) if c]
    if not below or not filled or filled[-1] + 1 >= len(line):
        return 0
    k0 = filled[-1] + 1
    return k0 if any(r[k] for r in below for k in range(k0, len(line))) else 0


def _label_line(cells: list[list[str]], n: int) -> bool:
    """Whether line n labels columns (a level of a MultiIndex header): it has text that is not a
    number over a column whose cells below are all numbers."""
    below = cells[n + 1:]
    for k, text in enumerate(cells[n]):
        if not text or text in NA_TOKENS or is_number(text):
            continue
        col = [r[k] for r in below]
        if all(is_number(c) or c in NA_TOKENS for c in col) and any(is_number(c) for c in col):
            return True
    return False


def _layout(cells: list[list[str]]) -> tuple[int, int]:
    """(header lines, index fields named by an index-name line or 0).  The first line is a
    header; then the levels of a MultiIndex header; an index-name line ends the header."""
    n = 1
    while n < len(cells) - 1:
        k0 = _index_name_line(cells[n], cells[n + 1:])
        if k0:
            return n + 1, k0
        if not _label_line(cells, n):
            break
        n += 1
    return n, 0


def _join_pieces(lines: list[str], spans: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int, int]:
    """Merge the pieces of a column that a blank character column split (`group size` over
    `128`, or `a b` values under a short header).  Returns the spans, the header lines and how
    many leading spans are index fields (named by the index-name line, or without a header)."""
    n_head, named = _layout(_cells(lines, spans))
    while True:
        cells = _cells(lines, spans)
        head = [any(cells[h][k] for h in range(n_head)) for k in range(len(spans))]
        data = [any(row[k] for row in cells[n_head:]) for k in range(len(spans))]
        n_index = named or next((k for k, h in enumerate(head) if h), len(spans))
        piece = next((k for k in range(n_index, len(spans))
                      if len(spans) > 1 and (not head[k] or not data[k])), None)
        if piece is None:
            return spans, n_head, n_index
        spans = _merge(spans, piece, _nearer(spans, piece))


def _column_names(cells: list[list[str]], n_labels: int, n_index: int) -> list[str]:
    """One name per field from the label lines, levels joined by "_"; an upper level that pandas
    printed once over several columns is carried to the columns right of it."""
    labels = [list(row) for row in cells[:n_labels]]
    for h in range(n_labels - 1):
        last = ""
        for k in range(n_index, len(labels[h])):
            lower = any(labels[j][k] for j in range(h + 1, n_labels))
            if labels[h][k]:
                last = labels[h][k]
            elif lower:
                labels[h][k] = last
    return ["_".join(row[k] for row in labels if row[k]) for k in range(len(cells[0]))]


def _parse_block(lines: list[str], source: object) -> tuple[pd.DataFrame, list[str], str]:
    """One block: its DataFrame of strings, the names of its index columns, and the name of
    the column level when the table is pivoted ("" when not)."""
    if len(lines) < 2:
        raise InputError("a printed table needs a header line and at least one row", path=source)
    spans, n_head, n_index = _join_pieces(lines, _fields(lines))
    cells = _cells(lines, spans)
    if any(c in _ELLIPSIS for row in cells[:n_head] for c in row) or \
            any(all(c in _ELLIPSIS or c == "" for c in row) for row in cells[n_head:]):
        raise InputError("pandas truncated this table ('...'): print it with df.to_string() or "
                         "save it with df.to_csv()", path=source)
    named = n_head >= 2 and _index_name_line(cells[n_head - 1], cells[n_head:]) > 0
    n_labels = n_head - 1 if named else n_head
    names = _column_names(cells, n_labels, n_index)
    # Above a lone index-name line, the index area holds the name of the column level (pivot).
    level = " ".join(c for c in cells[0][:n_index] if c) if named and n_head == 2 else ""
    rows = cells[n_head:]
    df = pd.DataFrame(rows, columns=[f"\0{k}" for k in range(len(spans))], dtype=object)
    index_names: list[str] = []
    drop: list[str] = []
    for k in range(n_index):
        col = f"\0{k}"
        # Sparsified MultiIndex rows print a level only where it changes.
        df[col] = df[col].replace("", np.nan).ffill().fillna("")
        if named and cells[n_head - 1][k]:
            names[k] = cells[n_head - 1][k]
        elif all(re.fullmatch(r"-?\d+", v) for v in df[col]):
            drop.append(col)  # an unnamed integer index only numbers the rows
            continue
        else:
            names[k] = "index" if n_index == 1 else f"index_{k}"
        index_names.append(names[k])
    df = df.drop(columns=drop)
    df.columns = [names[int(c[1:])] for c in df.columns]
    return df, index_names, level


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as int64/float64 (NaN tokens as NaN); any other column as str, NaN tokens as NaN."""
    out = {}
    for col in df.columns:
        s = df[col].astype(str)
        na = s.isin(NA_TOKENS)
        present = s[~na]
        if len(present) and present.map(is_number).all():
            num = pd.to_numeric(s.where(~na, "nan"), errors="coerce")
            if not na.any() and present.str.fullmatch(r"[-+]?\d+").all():
                num = num.astype(np.int64)
            out[col] = num
        else:
            out[col] = s.where(~na, np.nan)
    return pd.DataFrame(out)
