"""Loading a bundle: `load_bundle` validates it and returns a `RunData` (docs/FORMAT.md).

Every table's Parquet parts are read, then the journals of parts never sealed (a collector
killed while it ran); any problem is an InputError naming the file.  An optional table
(OPTIONAL_TABLES) whose folder is absent loads empty.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfdiff.bundle.journal import SUFFIXES, check_schema, read_journal
from perfdiff.bundle.manifest import RunData, read_manifest
from perfdiff.errors import InputError
from perfdiff.model.text import TextRepairs
from perfdiff.model.schema import INTERVAL_COLUMNS as _INTERVALS
from perfdiff.model.schema import BUNDLE_SCHEMAS, MISSING, OPTIONAL_TABLES, TABLES
from perfdiff.model.tables import categorical, empty_table


def _read_table(path: Path, table: str, notes: list[str] | None = None,
                text: TextRepairs | None = None) -> pd.DataFrame:
    tdir = path / table
    if not tdir.is_dir():
        raise InputError(f"missing table {table!r} (no folder {table}/)", path=path)
    parts = sorted(p for p in tdir.glob("part-*.parquet"))
    if not parts:
        raise InputError(f"missing table {table!r} (no part-*.parquet in it)", path=tdir)
    str_cols = [c for c, k in BUNDLE_SCHEMAS[table].items() if k == "str"]
    tables = []
    for part in parts:
        try:
            pf = pq.ParquetFile(part)
            cols = check_schema(table, pf.schema_arrow, part)
            tables.append(pq.read_table(part, columns=cols, read_dictionary=str_cols))
        except InputError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"corrupt or truncated Parquet file ({exc})", path=part) from None
    # Journals of parts never sealed (the collector was killed): rows written but not yet in
    # Parquet.  One whose part exists was sealed and its removal interrupted: already read.
    sealed = {p.name for p in parts}
    journals = sorted(j for j in tdir.glob(".part-*") if j.suffix in SUFFIXES)
    for journal in journals:
        if journal.name[1:-len(journal.suffix)] + ".parquet" in sealed:
            continue
        data, torn = read_journal(table, journal, text)
        tables.append(data)
        if notes is not None:
            notes.append(f"{table}: {data.num_rows:,} rows read from the unsealed journal {journal.name}"
                         + (" (its last, half-written batch dropped)" if torn else ""))
    try:
        df = _arrow_to_frame(table, tables)
    except pa.ArrowException as exc:  # a value its column's type cannot hold (docs/FORMAT.md)
        raise InputError(f"a value out of its column's type ({exc})", path=tdir) from None
    start, end = _INTERVALS[table]
    bad = df[end].to_numpy() < df[start].to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{int(bad.sum())} row(s) with {end} < {start} (first at row {i})", path=tdir)
    return df


def _arrow_to_frame(table: str, tables: list[pa.Table]) -> pd.DataFrame:
    schema = BUNDLE_SCHEMAS[table]
    n = sum(t.num_rows for t in tables)
    columns: list[pa.ChunkedArray] = []
    for col, kind in schema.items():
        chunks = []
        for t in tables:
            if col in t.column_names:
                c = t.column(col)
                if kind == "i8?":
                    # Nulls would turn the column into float64 and lose ns precision.
                    c = pc.fill_null(c.cast(pa.int64()), MISSING)
                elif kind in ("i8",):
                    c = c.cast(pa.int64())
                elif kind == "f8":
                    c = c.cast(pa.float64())
                elif not pa.types.is_dictionary(c.type):
                    c = pc.dictionary_encode(c.cast(pa.string()))
                else:
                    c = c.cast(pa.dictionary(pa.int32(), pa.string()))
                chunks.extend(c.chunks)
            else:
                chunks.append(pa.array(np.full(t.num_rows, MISSING, dtype=np.int64)))
        if not chunks:
            typ = pa.dictionary(pa.int32(), pa.string()) if kind == "str" else (
                pa.float64() if kind == "f8" else pa.int64())
            columns.append(pa.chunked_array([], type=typ))
        else:
            columns.append(pa.chunked_array(chunks))
    combined = pa.Table.from_arrays(columns, names=list(schema))
    if combined.num_rows == 0:
        return empty_table(table)
    combined = combined.unify_dictionaries()
    df = combined.to_pandas()
    assert len(df) == n
    return df


def _valid_names(table: str, df: pd.DataFrame, text: TextRepairs) -> None:
    """Replace what UTF-8 cannot encode (lone surrogates) in the names of `table`'s text
    columns, counted in `text`: a JSON journal of an older collector, or a bundle written by
    another tool, may hold them, and no report or JSON could be written with them."""
    for col, kind in BUNDLE_SCHEMAS[table].items():
        if kind != "str" or col not in df.columns or not isinstance(df[col].dtype, pd.CategoricalDtype):
            continue
        labels = [str(x) for x in df[col].cat.categories]
        fixed = [text.fix(x) for x in labels]
        if fixed != labels:  # two labels may become one: categorical() merges them
            df[col] = categorical(df[col].cat.codes.to_numpy(), fixed)


def load_bundle(path: str | os.PathLike[str]) -> RunData:
    """Load and validate the bundle at `path`; raises InputError naming the file on bad input."""
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", path=p)
    if not p.is_dir():
        raise InputError("not a directory", path=p)
    text = TextRepairs(unencodable_only=True)  # the strings load back as written, but encodable
    manifest = text.fix_json(read_manifest(p), "manifest fields")
    notes: list[str] = []
    tables = {t: _read_table(p, t, notes, text) for t in TABLES}
    for t in OPTIONAL_TABLES:
        tables[t] = _read_table(p, t, notes, text) if (p / t).exists() else empty_table(t)
    for t, df in tables.items():
        _valid_names(t, df, text)
    notes += text.lines()
    run = RunData(manifest=manifest, path=str(p), notes=notes, **tables)
    status = manifest.get("status")
    if status == "running":
        run.notes.append("the collector did not finish (status still 'running'): treated as interrupted")
        manifest["status"] = "interrupted"
    return run
