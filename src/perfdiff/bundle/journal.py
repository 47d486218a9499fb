"""Journals: a table's rows since its last Parquet part, as an Arrow IPC stream on disk.

A collector appends its rows every fraction of a second to ``TABLE/.part-NNNNNN.arrows``
(docs/FORMAT.md, crash safety): the stream's schema, then one record batch per flush, each
one write, strings plain (not dictionary-encoded) so batches append without dictionary
deltas.  The writer seals the journal into part NNNNNN; the loader reads a journal whose part
was never written (a killed collector) up to its last whole batch.  Journals of older
collectors (``.jsonl``, JSON lines of packed columns) are still read.

Rows come in as column lists (`Columns`, MISSING = -1 for unknown) or as pandas DataFrames
(the GPU sampler's); `journal_rows` turns a flush's chunks into one Arrow table.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import sys
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from perfdiff.errors import InputError
from perfdiff.model.schema import BUNDLE_SCHEMAS, MISSING, SCHEMAS
from perfdiff.model.tables import normalize_table
from perfdiff.model.text import TextRepairs

SUFFIX = ".arrows"
LEGACY_SUFFIX = ".jsonl"  # read only
SUFFIXES = (SUFFIX, LEGACY_SUFFIX)
_TYPES = {"str": pa.string(), "i8": pa.int64(), "i8?": pa.int64(), "f8": pa.float64()}
_SCHEMAS = {t: pa.schema([pa.field(c, _TYPES[k], nullable=k == "i8?") for c, k in cols.items()])
            for t, cols in BUNDLE_SCHEMAS.items()}
_COLUMNS = {t: [(c, k, _TYPES[k]) for c, k in cols.items()] for t, cols in BUNDLE_SCHEMAS.items()}

_ARROW_OK = {
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
    or (pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))),
    "i8": lambda t: pa.types.is_integer(t),
    "i8?": lambda t: pa.types.is_integer(t) or pa.types.is_null(t),
    "f8": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
}


def journal_schema(table: str) -> pa.Schema:
    """The Arrow schema of `table`'s journal and of the collector's row batches: the on-disk
    types with plain (not dictionary) strings."""
    return _SCHEMAS[table]


def check_schema(table: str, schema: pa.Schema, path: Path) -> list[str]:
    """The columns of `schema` to read for `table` (raises InputError on a missing or mistyped one)."""
    names = schema.names
    for col, kind in BUNDLE_SCHEMAS[table].items():
        if col not in names:
            if kind == "i8?":
                continue
            raise InputError(f"column {col!r} is missing", path=path)
        atype = schema.field(col).type
        if not _ARROW_OK[kind](atype):
            raise InputError(f"column {col!r} has type {atype}, expected {kind.rstrip('?')}", path=path)
    return [c for c in BUNDLE_SCHEMAS[table] if c in names]


# ---------------------------------------------------------------------------- rows → Arrow


def merge_columns(table: str, chunks: list[dict[str, list[Any]]], unknown: Any = None) -> dict[str, list[Any]]:
    """Column-list chunks of `table` (SCHEMAS[table]'s columns; an absent optional one is
    unknown) → one dict of every column, absent values filled with `unknown`.  Raises KeyError
    for an absent required column, ValueError for columns of different lengths."""
    merged: dict[str, list[Any]] = {col: [] for col in SCHEMAS[table]}
    for chunk in chunks:
        n = len(next(iter(chunk.values()))) if chunk else 0
        for col, kind in SCHEMAS[table].items():
            values = chunk.get(col)
            if values is None:
                if kind != "i8?":
                    raise KeyError(f"{table} rows lack column {col!r}")
                values = [unknown] * n
            elif len(values) != n:
                raise ValueError(f"{table} column {col!r} has {len(values)} values, not {n}")
            merged[col].extend(values)
    return merged


def columns_to_arrow(table: str, chunks: list[dict[str, list[Any]]]) -> pa.RecordBatch:
    """Rows as column lists (see merge_columns) → one Arrow record batch of
    `journal_schema(table)`.  MISSING (-1) and None become null.  Raises KeyError for an
    absent required column, ValueError or pa.ArrowException for a wrong value type or length."""
    cols = chunks[0] if len(chunks) == 1 else merge_columns(table, chunks)
    n = len(next(iter(cols.values()), ()))
    arrays = []
    for col, kind, typ in _COLUMNS[table]:
        values = cols.get(col)
        if values is None:
            if kind != "i8?":
                raise KeyError(f"{table} rows lack column {col!r}")
            arrays.append(pa.nulls(n, typ))
            continue
        if len(values) != n:
            raise ValueError(f"{table} column {col!r} has {len(values)} values, not {n}")
        if kind == "i8?" and MISSING in values:
            values = [None if v == MISSING else v for v in values]
        arrays.append(pa.array(values, type=typ))
    return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMAS[table])


def frame_to_arrow(table: str, df: Any) -> pa.Table:
    """A sampler's DataFrame in the journal schema of `table`; NaN samples dropped (unknown)."""
    df = normalize_table(table, df)
    if table == "samples":
        df = df[np.isfinite(df["value"].to_numpy())]
    arrays = []
    for col, kind in SCHEMAS[table].items():
        values = df[col]
        if kind == "str":
            arrays.append(pa.array(values.astype(str).to_numpy(dtype=object), type=pa.string()))
        elif kind == "i8?":
            v = values.to_numpy(dtype=np.int64)
            arrays.append(pa.array(v, type=pa.int64(), mask=v == MISSING))
        else:
            arrays.append(pa.array(values.to_numpy(), type=_SCHEMAS[table].field(col).type))
    return pa.Table.from_arrays(arrays, schema=_SCHEMAS[table])


def journal_rows(table: str, chunks: list[Any]) -> tuple[dict[str, list[Any]], pa.Table | None]:
    """Buffered chunks of one table → (the Columns chunks merged into one, every column there
    with MISSING for an absent one, or a lone Columns chunk as it is; the DataFrame chunks as
    one Arrow table in the journal schema or None): what BundleWriter.journal takes."""
    columns = [c for c in chunks if isinstance(c, dict)]
    frames = [frame_to_arrow(table, c) for c in chunks if not isinstance(c, dict)]
    if len(columns) == 1 and len(frames) == 0:
        return columns[0], None  # the usual flush (the host sampler's rows): no copy
    merged = merge_columns(table, columns, unknown=MISSING) if columns else {}
    return merged, (pa.concat_tables(frames) if frames else None)


# ---------------------------------------------------------------------------- writing


class Journal:
    """One table's journal file and the batches written to it since its last part."""

    __slots__ = ("path", "schema", "fd", "batches", "rows")

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path  # .../table/.part-NNNNNN.arrows
        self.schema = schema
        self.fd = -1
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0

    def append(self, data: pa.Table | pa.RecordBatch) -> None:
        """Append `data`'s rows, one write per batch (no fsync: a killed process loses nothing
        written); the file is created with the stream's schema at the first rows."""
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            _write_all(self.fd, self.schema.serialize())
        for batch in (data,) if isinstance(data, pa.RecordBatch) else data.to_batches():
            _write_all(self.fd, batch.serialize())
            self.batches.append(batch)
        self.rows += data.num_rows

    def table(self) -> pa.Table:
        """Every row journaled, as one table."""
        return pa.Table.from_batches(self.batches, self.schema)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------------------- reading


def read_journal(table: str, path: Path, text: TextRepairs | None = None) -> tuple[pa.Table, bool]:
    """A journal's whole records, and whether a torn last one (a write cut by a kill) was
    dropped.  A JSON-lines journal's strings holding what UTF-8 cannot encode (a lone
    surrogate escape) are made encodable where they are read, counted in `text`."""
    if path.suffix == LEGACY_SUFFIX:
        return _read_jsonl(table, path, text if text is not None else TextRepairs(unencodable_only=True))
    try:
        reader = ipc.open_stream(pa.memory_map(str(path)))
    except (pa.ArrowException, OSError):
        # The schema is the stream's first write: a kill in the middle of it leaves no whole
        # record, which is all such a file can hold.
        return journal_schema(table).empty_table(), path.stat().st_size > 0
    cols = check_schema(table, reader.schema, path)
    batches, torn = [], False
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            break
        except (pa.ArrowException, OSError):
            torn = True  # the write in progress when the collector died
            break
    return pa.Table.from_batches(batches, reader.schema).select(cols), torn


def _read_jsonl(table: str, path: Path, text: TextRepairs) -> tuple[pa.Table, bool]:
    """An older collector's journal: one JSON object of columns per line, each column a list
    or packed ({"q"|"d": base64 of little-endian int64|float64, "s": strings joined by U+001F})."""
    lines = path.read_bytes().split(b"\n")
    torn = bool(lines[-1])  # every whole record ends with a newline
    str_cols = BUNDLE_SCHEMAS.get(table, {})
    chunks = []
    for i, line in enumerate(lines[:-1]):
        try:
            chunk = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"corrupt journal (line {i + 1}: {exc})", path=path) from None
        if not isinstance(chunk, dict):
            raise InputError(f"corrupt journal (line {i + 1} is not an object of columns)", path=path)
        try:
            chunks.append({c: _unpack_column(v) if str_cols.get(c) != "str" else
                           [text.fix(x) if isinstance(x, str) else x for x in _unpack_column(v)]
                           for c, v in chunk.items()})
        except ValueError as exc:
            raise InputError(f"corrupt journal (line {i + 1}: {exc})", path=path) from None
    try:
        return pa.Table.from_batches([columns_to_arrow(table, chunks)]), torn
    except KeyError as exc:
        raise InputError(f"corrupt journal ({exc.args[0]})", path=path) from None
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise InputError(f"corrupt journal ({exc})", path=path) from None


def _unpack_column(value: Any) -> list[Any]:
    """A column of a .jsonl journal (a packed column or a plain list) → its values; raises
    ValueError when it is neither."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (code, text), = value.items()
        if isinstance(text, str):
            if code == "s":
                return text.split("\x1f")
            if code in ("q", "d"):
                try:
                    raw = base64.b64decode(text, validate=True)
                except binascii.Error as exc:
                    raise ValueError(f"bad base64 in a packed column: {exc}") from None
                if len(raw) % 8:
                    raise ValueError("a packed column's bytes are not whole 8-byte values")
                out = array(code)
                out.frombytes(raw)
                if sys.byteorder == "big":
                    out.byteswap()
                return out.tolist()
    raise ValueError("a column is neither a list of values nor a packed column")
