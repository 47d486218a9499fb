"""The run bundle (format v1): the one writer and the one loader.

A bundle is a directory (docs/FORMAT.md)::

    manifest.json                 format_version, target, host, GPUs, collectors, status ...
    activity/part-000000.parquet  what takes time (kernels, memcpy, cpu ranges, host states)
    samples/part-000000.parquet   resource metrics
    markers/part-000000.parquet   cycle marks

Each table is a folder of Parquet parts.  A part is written to a temporary name and renamed,
so a collector killed with SIGKILL leaves only whole parts behind and the bundle still loads
(with its status still "running", which the loader reports as interrupted).  A user opens a
table with one pandas call: ``pd.read_parquet("run/activity")``.

While it runs, a collector appends its rows every fraction of a second to a *journal*
(``activity/.part-000003.jsonl`` for column lists, ``.arrows`` for Arrow tables: an append is
one write, where a Parquet part costs ~1 ms and more on a cold CPU) and seals the journal into
Parquet part 3 every few tens of seconds and at the end.  The loader reads a journal whose part
was never written (a killed collector), up to its last whole record; pandas and pyarrow skip
it (dot-files are hidden from dataset discovery).

In memory the integer columns that may be unknown (launch_ns, tid, stream, correlation,
bytes) use ``MISSING`` (-1): none of them can be negative.  On disk they are Parquet nulls.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import sys
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from perfdiff import __version__
from perfdiff.errors import InputError
from perfdiff.model.schema import INTERVAL_COLUMNS as _INTERVALS
from perfdiff.model.schema import MISSING, SCHEMAS, TABLES
from perfdiff.model.tables import empty_table, normalize_table

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
JOURNAL_SUFFIXES = (".jsonl", ".arrows")
# A packed journal column (docs/FORMAT.md): {"q": base64 of little-endian int64} for integer
# columns, {"d": ... float64} for float ones, {"s": the strings joined by STR_SEP}.
STR_SEP = "\x1f"  # ASCII unit separator: a string column holding it is written as a list



@dataclass
class RunData:
    """One run in memory: the manifest and the three tables (columns as in SCHEMAS)."""

    manifest: dict[str, Any]
    activity: pd.DataFrame
    samples: pd.DataFrame
    markers: pd.DataFrame
    path: str = ""
    notes: list[str] = field(default_factory=list)  # load-time remarks (interrupted, dropped rows)

    @property
    def name(self) -> str:
        """The run's label in the report: the manifest's run_name, else the path's last part."""
        return str(self.manifest.get("run_name") or Path(self.path).name or "run")


def base_manifest(**fields: Any) -> dict[str, Any]:
    """A manifest with every v1 key present, updated with `fields`."""
    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "perfdiff_version": __version__,
        "run_name": "",
        "created_ns": time.time_ns(),
        "source": {"kind": "unknown"},
        "target": {},
        "host": {},
        "gpus": [],
        "clock": {"domain": "CLOCK_REALTIME", "anchors": []},
        "collectors": [],
        "unsupported": [],
        "dropped": {},
        "status": "complete",
        "files": {},
    }
    manifest.update(fields)
    return manifest


def _to_arrow(table: str, df: pd.DataFrame) -> pa.Table:
    df = normalize_table(table, df)
    arrays = []
    names = []
    for name, kind in SCHEMAS[table].items():
        col = df[name]
        if kind == "str":
            cat = col.cat
            arr = pa.DictionaryArray.from_arrays(
                pa.array(cat.codes.to_numpy(dtype=np.int32)),
                pa.array(np.asarray(cat.categories, dtype=object).astype(str), type=pa.string()),
            )
        elif kind == "i8?":
            values = col.to_numpy(dtype=np.int64)
            arr = pa.array(values, type=pa.int64(), mask=values == MISSING)
        elif kind == "f8":
            arr = pa.array(col.to_numpy(dtype=np.float64), type=pa.float64())
        else:
            arr = pa.array(col.to_numpy(dtype=np.int64), type=pa.int64())
        arrays.append(arr)
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def journal_schema(table: str) -> pa.Schema:
    """The Arrow schema of `table`'s journal and of the collector's row batches: the on-disk
    types with plain (not dictionary) strings, so batches append without dictionary deltas."""
    types = {"str": pa.string(), "i8": pa.int64(), "i8?": pa.int64(), "f8": pa.float64()}
    return pa.schema([pa.field(c, types[k], nullable=k == "i8?") for c, k in SCHEMAS[table].items()])


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


def columns_to_arrow(table: str, chunks: list[dict[str, list[Any]]]) -> pa.Table:
    """Rows as column lists (see merge_columns) → one Arrow table of `journal_schema(table)`.
    MISSING (-1) becomes null.  Raises KeyError for an absent required column, ValueError or
    pa.ArrowException for a wrong value type."""
    merged = merge_columns(table, chunks)
    schema = journal_schema(table)
    arrays = []
    for col, kind in SCHEMAS[table].items():
        values = merged[col]
        if kind == "i8?":
            values = [None if v == MISSING else v for v in values]
        arrays.append(pa.array(values, type=schema.field(col).type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _pack_column(kind: str, values: list[Any]) -> Any:
    """One journal column in its packed JSON form (see STR_SEP), or `values` unchanged when
    they do not fit it (a None, a string holding STR_SEP): JSON-encoding numbers one by one
    was most of a flush's cost, and a base64 of their bytes is ten times cheaper."""
    try:
        if kind == "str":
            joined = STR_SEP.join(values)
            return {"s": joined} if joined.count(STR_SEP) == len(values) - 1 else values
        code = "d" if kind == "f8" else "q"
        packed = array(code, values)
    except (TypeError, OverflowError):
        return values
    if sys.byteorder == "big":
        packed.byteswap()
    return {code: base64.b64encode(packed.tobytes()).decode("ascii")}


def _unpack_column(value: Any) -> list[Any]:
    """A journal column as written by `_pack_column` (or a plain list) → its values; raises
    ValueError when it is neither."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (code, text), = value.items()
        if isinstance(text, str):
            if code == "s":
                return text.split(STR_SEP)
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


class _Journal:
    """One table's rows since its last part: the two journal files and the rows in memory."""

    __slots__ = ("base", "fd", "ipc_sink", "ipc_writer", "columns", "batches", "rows")

    def __init__(self, base: Path):
        self.base = base  # .../table/.part-NNNNNN (the suffixes are added)
        self.fd = -1
        self.ipc_sink: pa.NativeFile | None = None
        self.ipc_writer: ipc.RecordBatchStreamWriter | None = None
        self.columns: list[dict[str, list[Any]]] = []
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0

    def paths(self) -> list[Path]:
        return [self.base.with_name(self.base.name + sfx) for sfx in JOURNAL_SUFFIXES]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.ipc_writer is not None:
            self.ipc_writer.close()
            assert self.ipc_sink is not None
            self.ipc_sink.close()
            self.ipc_writer = self.ipc_sink = None


def _dictionary_strings(table: str, data: pa.Table) -> pa.Table:
    """`data` with its string columns dictionary-encoded (int32 indices), the Parquet parts' form."""
    cols = []
    for name, kind in SCHEMAS[table].items():
        col = data.column(name)
        cols.append(pc.dictionary_encode(col) if kind == "str" and not pa.types.is_dictionary(col.type) else col)
    return pa.Table.from_arrays(cols, names=list(SCHEMAS[table]))


def _atomic_write_json(path: Path, obj: dict[str, Any], *, compact: bool = False) -> None:
    """Write `obj` as JSON to `path` through a temporary file and a rename; `compact`: on one
    line, by `json.dumps`, which takes json's C encoder (`json.dump` to a file, or any indent,
    takes the pure-Python one: 0.15 against 0.04 ms for a 3 KB collector manifest, warm)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        if compact:
            fh.write(json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str))
        else:
            json.dump(obj, fh, indent=2, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class BundleWriter:
    """Writes a bundle incrementally: `append` adds a part to a table, `close` seals it.

    The manifest is written first with status "running"; a crash leaves that status and the
    whole parts written so far.  Parts are written under a temporary name and renamed.
    """

    def __init__(self, path: str | os.PathLike[str], manifest: dict[str, Any]):
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()):
            raise InputError("output directory exists and is not empty", path=self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.manifest = base_manifest(**manifest)
        self.manifest["status"] = "running"
        self._parts = {t: 0 for t in TABLES}
        self._rows = {t: 0 for t in TABLES}
        self._journals: dict[str, _Journal] = {}  # per table: rows since its last part
        for t in TABLES:
            (self.path / t).mkdir(exist_ok=True)
        _atomic_write_json(self.path / MANIFEST, self.manifest)

    def append(self, table: str, df: pd.DataFrame) -> None:
        """Write `df` (columns of SCHEMAS[table]) as the next part of `table`."""
        if table not in SCHEMAS:
            raise KeyError(table)
        if len(df) == 0 and self._parts[table] > 0:
            return
        self.seal_journal(table)  # rows journaled earlier come first
        part = self.path / table / f"part-{self._parts[table]:06d}.parquet"
        tmp = part.with_name("." + part.name + ".tmp")
        pq.write_table(_to_arrow(table, df), tmp, compression="lz4")
        os.replace(tmp, part)
        self._parts[table] += 1
        self._rows[table] += len(df)

    def append_arrow(self, table: str, data: pa.Table) -> None:
        """Write `data`, already in `table`'s on-disk schema, as the next part (no pandas: ~1 ms).

        The collector's hot path: it builds Arrow columns directly from its buffers.
        """
        if table not in SCHEMAS:
            raise KeyError(table)
        self.seal_journal(table)  # rows journaled earlier come first
        self._write_part(table, data)

    def _write_part(self, table: str, data: pa.Table) -> None:
        part = self.path / table / f"part-{self._parts[table]:06d}.parquet"
        tmp = part.with_name("." + part.name + ".tmp")
        # Serialised in memory, then one write: cheaper than Arrow's file I/O for small parts.
        sink = pa.BufferOutputStream()
        pq.write_table(data, sink, compression="lz4", write_statistics=False)
        buf = memoryview(sink.getvalue())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            while buf:
                buf = buf[os.write(fd, buf):]
        finally:
            os.close(fd)
        os.replace(tmp, part)
        self._parts[table] += 1
        self._rows[table] += data.num_rows

    def journal(self, table: str, data: pa.Table | dict[str, list[Any]]) -> None:
        """Append `data` to `table`'s journal: on disk at once (one write, no fsync: a killed
        process loses nothing written), readable by the loader, sealed into the next Parquet
        part by `seal_journal`.  `data`: column lists (columns of SCHEMAS[table], an optional
        one may be absent, MISSING for unknown; JSON-serialisable values) or an Arrow table of
        `journal_schema(table)`."""
        j = self._journals.get(table)
        if j is None:
            j = self._journals[table] = _Journal(self.path / table / f".part-{self._parts[table]:06d}")
        if isinstance(data, dict):
            n = len(next(iter(data.values()), ()))
            if not n:
                return
            schema = SCHEMAS[table]
            packed = {c: _pack_column(schema.get(c, ""), v) for c, v in data.items()}
            try:
                text = json.dumps(packed, separators=(",", ":"), allow_nan=False)
            except ValueError:  # a NaN or infinity in an unpacked column: as an Arrow batch
                self.journal(table, columns_to_arrow(table, [data]))
                return
            if j.fd < 0:
                j.fd = os.open(j.paths()[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            line = memoryview(text.encode() + b"\n")
            while line:
                line = line[os.write(j.fd, line):]
            j.columns.append(data)
            j.rows += n
            return
        if data.num_rows == 0:
            return
        if j.ipc_writer is None:
            j.ipc_sink = pa.OSFile(str(j.paths()[1]), "wb")
            j.ipc_writer = ipc.new_stream(j.ipc_sink, journal_schema(table))
        for batch in data.to_batches():
            j.ipc_writer.write_batch(batch)
            j.batches.append(batch)
        j.rows += data.num_rows

    def journaled_rows(self, table: str) -> int:
        """Rows in `table`'s journal, not sealed yet."""
        j = self._journals.get(table)
        return j.rows if j is not None else 0

    def seal_journal(self, table: str) -> None:
        """Write `table`'s journaled rows as its next Parquet part and drop the journal.

        Crash order: the part is renamed into place before the journal is removed, and the
        loader ignores a journal whose part exists, so a kill in between neither loses nor
        doubles rows."""
        j = self._journals.pop(table, None)
        if j is None:
            return
        j.close()
        parts = [columns_to_arrow(table, j.columns)] if j.columns else []
        if j.batches:
            parts.append(pa.Table.from_batches(j.batches, journal_schema(table)))
        if parts:
            self._write_part(table, _dictionary_strings(table, pa.concat_tables(parts)))
        for path in j.paths():
            path.unlink(missing_ok=True)

    def update_manifest(self, **fields: Any) -> None:
        """Merge `fields` into the manifest and rewrite it atomically, as compact JSON (a
        collector does this while it runs; `close` writes the final one indented)."""
        self.manifest.update(fields)
        _atomic_write_json(self.path / MANIFEST, self.manifest, compact=True)

    def close(self, status: str = "complete") -> Path:
        """Seal the journals, give every table at least one (possibly empty) part, record the
        files, set status."""
        for t in TABLES:
            self.seal_journal(t)
            if self._parts[t] == 0:
                self.append(t, empty_table(t))
        self.manifest["files"] = {
            t: {"parts": self._parts[t], "rows": self._rows[t]} for t in TABLES
        }
        self.manifest["status"] = status
        _atomic_write_json(self.path / MANIFEST, self.manifest)
        return self.path


def _frame_to_arrow(table: str, df: Any) -> pa.Table:
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
            arrays.append(pa.array(values.to_numpy(), type=journal_schema(table).field(col).type))
    return pa.Table.from_arrays(arrays, schema=journal_schema(table))


def journal_rows(table: str, chunks: list[Any]) -> tuple[dict[str, list[Any]], pa.Table | None]:
    """Buffered chunks of one table → (the Columns chunks merged into one, every column there
    with MISSING for an absent one, or a lone Columns chunk as it is; the DataFrame chunks as
    one Arrow table in the journal schema or None): what BundleWriter.journal takes."""
    columns = [c for c in chunks if isinstance(c, dict)]
    frames = [_frame_to_arrow(table, c) for c in chunks if not isinstance(c, dict)]
    if len(columns) == 1 and len(frames) == 0:
        return columns[0], None  # the usual flush (the host sampler's rows): no copy
    merged = merge_columns(table, columns, unknown=MISSING) if columns else {}
    return merged, (pa.concat_tables(frames) if frames else None)


def open_writer(path: Path, manifest: dict[str, Any]) -> BundleWriter:
    """A BundleWriter whose every table has a part from the start, so a bundle killed at any
    moment loads (the loader needs at least one part per table)."""
    writer = BundleWriter(path, manifest)
    for table in SCHEMAS:
        writer.append(table, empty_table(table))
    return writer


def write_bundle(path: str | os.PathLike[str], run: RunData, status: str | None = None) -> Path:
    """Write a whole in-memory run as a bundle at `path` (which must be absent or empty)."""
    writer = BundleWriter(path, dict(run.manifest))
    writer.append("activity", run.activity)
    writer.append("samples", run.samples)
    writer.append("markers", run.markers)
    return writer.close(status or run.manifest.get("status") or "complete")


# ---------------------------------------------------------------------------- loading

_ARROW_OK = {
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
    or (pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))),
    "i8": lambda t: pa.types.is_integer(t),
    "i8?": lambda t: pa.types.is_integer(t) or pa.types.is_null(t),
    "f8": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
}


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a directory holding a bundle manifest."""
    return (Path(path) / MANIFEST).is_file()


def _read_manifest(path: Path) -> dict[str, Any]:
    mpath = path / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("not a perfdiff run bundle (no manifest.json)", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"manifest is not valid JSON ({exc.__class__.__name__}: {exc})", path=mpath) from None
    if not isinstance(manifest, dict):
        raise InputError("manifest is not a JSON object", path=mpath)
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(
            f"unknown format_version {version!r} (this perfdiff {__version__} reads {FORMAT_VERSION})",
            path=mpath,
        )
    return manifest


def _check_schema(table: str, schema: pa.Schema, path: Path) -> list[str]:
    """The columns of `schema` to read for `table` (raises InputError on a missing or mistyped one)."""
    names = schema.names
    for col, kind in SCHEMAS[table].items():
        if col not in names:
            if kind == "i8?":
                continue
            raise InputError(f"column {col!r} is missing", path=path)
        atype = schema.field(col).type
        if not _ARROW_OK[kind](atype):
            raise InputError(f"column {col!r} has type {atype}, expected {kind.rstrip('?')}", path=path)
    return [c for c in SCHEMAS[table] if c in names]


def _read_journal(table: str, path: Path) -> tuple[pa.Table, bool]:
    """A journal's whole records, and whether a torn last one (a write cut by a kill) was dropped."""
    if path.suffix == ".jsonl":
        return _read_jsonl_journal(table, path)
    try:
        reader = ipc.open_stream(pa.memory_map(str(path)))
    except (pa.ArrowException, OSError):
        # The stream opens with its schema, written with the first batch in several writes: a
        # kill in the middle leaves no whole record, which is all such a file can hold.
        return journal_schema(table).empty_table(), path.stat().st_size > 0
    cols = _check_schema(table, reader.schema, path)
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


def _read_jsonl_journal(table: str, path: Path) -> tuple[pa.Table, bool]:
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = bool(lines[-1])  # every whole record ends with a newline
    chunks = []
    for i, line in enumerate(lines[:-1]):
        try:
            chunk = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"corrupt journal (line {i + 1}: {exc})", path=path) from None
        if not isinstance(chunk, dict):
            raise InputError(f"corrupt journal (line {i + 1} is not an object of columns)", path=path)
        try:
            chunks.append({c: _unpack_column(v) for c, v in chunk.items()})
        except ValueError as exc:
            raise InputError(f"corrupt journal (line {i + 1}: {exc})", path=path) from None
    try:
        return columns_to_arrow(table, chunks), torn
    except KeyError as exc:
        raise InputError(f"corrupt journal ({exc.args[0]})", path=path) from None
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise InputError(f"corrupt journal ({exc})", path=path) from None


def _read_table(path: Path, table: str, notes: list[str] | None = None) -> pd.DataFrame:
    tdir = path / table
    if not tdir.is_dir():
        raise InputError(f"missing table {table!r} (no folder {table}/)", path=path)
    parts = sorted(p for p in tdir.glob("part-*.parquet"))
    if not parts:
        raise InputError(f"missing table {table!r} (no part-*.parquet in it)", path=tdir)
    str_cols = [c for c, k in SCHEMAS[table].items() if k == "str"]
    tables = []
    for part in parts:
        try:
            pf = pq.ParquetFile(part)
            cols = _check_schema(table, pf.schema_arrow, part)
            tables.append(pq.read_table(part, columns=cols, read_dictionary=str_cols))
        except InputError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"corrupt or truncated Parquet file ({exc})", path=part) from None
    # Journals of parts never sealed (the collector was killed): rows written but not yet in
    # Parquet.  One whose part exists was sealed and its removal interrupted: already read.
    sealed = {p.name for p in parts}
    journals = sorted(j for j in tdir.glob(".part-*") if j.suffix in JOURNAL_SUFFIXES)
    for journal in journals:
        if journal.name[1:-len(journal.suffix)] + ".parquet" in sealed:
            continue
        data, torn = _read_journal(table, journal)
        tables.append(data)
        if notes is not None:
            notes.append(f"{table}: {data.num_rows:,} rows read from the unsealed journal {journal.name}"
                         + (" (its last, half-written batch dropped)" if torn else ""))
    df = _arrow_to_frame(table, tables)
    start, end = _INTERVALS[table]
    bad = df[end].to_numpy() < df[start].to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{int(bad.sum())} row(s) with {end} < {start} (first at row {i})", path=tdir)
    return df


def _arrow_to_frame(table: str, tables: list[pa.Table]) -> pd.DataFrame:
    schema = SCHEMAS[table]
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


def load_bundle(path: str | os.PathLike[str]) -> RunData:
    """Load and validate the bundle at `path`; raises InputError naming the file on bad input."""
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", path=p)
    if not p.is_dir():
        raise InputError("not a directory", path=p)
    manifest = _read_manifest(p)
    notes: list[str] = []
    tables = {t: _read_table(p, t, notes) for t in TABLES}
    run = RunData(manifest=manifest, path=str(p), notes=notes, **tables)
    status = manifest.get("status")
    if status == "running":
        run.notes.append("the collector did not finish (status still 'running'): treated as interrupted")
        manifest["status"] = "interrupted"
    return run
