"""Read one benchmark table: CSV, TSV, JSON lines, or text as pandas prints it.

The format comes from `fmt` or, by default, from the file name (.csv, .tsv/.tab,
.jsonl/.ndjson/.json) and else from the first line (`{`: JSON lines; a tab: TSV; commas in
equal numbers on the first two lines: CSV; otherwise aligned text).  Every failure a user can
cause is an InputError naming the file.  The file is only read.
"""
from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from perfdiff.benchtable.aligned import parse_aligned
from perfdiff.errors import InputError, read_input_file

FORMATS = ("auto", "csv", "tsv", "jsonl", "text")
_SUFFIX = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


def sniff_format(path: Path, text: str) -> str:
    """The format of a table: by file suffix, else by its first lines."""
    by_name = _SUFFIX.get(path.suffix.lower())
    if by_name:
        return by_name
    lines = [ln for ln in text.splitlines() if ln.strip()][:2]
    if not lines:
        return "text"
    first = lines[0].lstrip()
    if first.startswith(("{", "[")):
        return "jsonl"
    if "\t" in lines[0]:
        return "tsv"
    if "," in lines[0] and (len(lines) < 2 or lines[0].count(",") == lines[1].count(",")):
        return "csv"
    return "text"


def read_table(path: str | Path, fmt: str = "auto") -> pd.DataFrame:
    """The table in `path` as a DataFrame (column names stripped); InputError when unreadable,
    empty, or without a row."""
    p = Path(path)
    try:
        text = read_input_file(p, "a table").decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not a text table (not UTF-8)", path=p) from None
    if fmt not in FORMATS:
        raise InputError(f"unknown table format {fmt!r} (one of {', '.join(FORMATS)})")
    kind = sniff_format(p, text) if fmt == "auto" else fmt
    if not text.strip():
        raise InputError("empty table", path=p)
    try:
        if kind == "text":
            df = parse_aligned(text, source=p)
        elif kind == "jsonl":
            stripped = text.lstrip()
            df = pd.read_json(io.StringIO(text), lines=not stripped.startswith("["), orient="records")
        else:
            df = pd.read_csv(io.StringIO(text), sep="," if kind == "csv" else "\t", skipinitialspace=True)
    except InputError:
        raise
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"cannot read as {kind}: {str(exc).splitlines()[0] if str(exc) else exc}",
                         path=p) from None
    df.columns = [str(c).strip() for c in df.columns]
    if df.empty or len(df.columns) == 0:
        raise InputError("the table has no rows", path=p)
    if any(c.startswith("Unnamed: ") for c in df.columns) and kind in ("csv", "tsv"):
        # A column without a name is how to_csv writes the index: it only numbers the rows.
        unnamed = [c for c in df.columns if c.startswith("Unnamed: ")]
        df = df.drop(columns=unnamed)
    if df.columns.duplicated().any():
        raise InputError(f"column {df.columns[df.columns.duplicated()][0]!r} appears twice", path=p)
    return df
