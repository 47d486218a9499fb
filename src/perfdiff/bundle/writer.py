"""Writing a bundle: `BundleWriter` (parts, journals, manifest, sealing) and `write_bundle`.

Each table is a folder of Parquet parts, written under a temporary name and renamed, so a
writer killed at any moment leaves only whole parts (docs/FORMAT.md, crash safety).  A
collector appends rows to a table's journal (perfdiff.bundle.journal) between parts.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfdiff.bundle.journal import SUFFIX, Journal, columns_to_arrow, journal_schema
from perfdiff.bundle.manifest import MANIFEST, RunData, base_manifest, write_manifest
from perfdiff.errors import InputError
from perfdiff.model.schema import BUNDLE_SCHEMAS, MISSING, SCHEMAS, TABLES
from perfdiff.model.tables import empty_table, normalize_table


def _to_arrow(table: str, df: pd.DataFrame) -> pa.Table:
    """A DataFrame of `table` in the on-disk schema: dictionary strings, MISSING as null."""
    df = normalize_table(table, df)
    arrays = []
    names = []
    for name, kind in BUNDLE_SCHEMAS[table].items():
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


def _dictionary_strings(table: str, data: pa.Table) -> pa.Table:
    """`data` with its string columns dictionary-encoded (int32 indices), the Parquet parts' form."""
    cols = []
    for name, kind in BUNDLE_SCHEMAS[table].items():
        col = data.column(name)
        cols.append(pc.dictionary_encode(col) if kind == "str" and not pa.types.is_dictionary(col.type) else col)
    return pa.Table.from_arrays(cols, names=list(BUNDLE_SCHEMAS[table]))


class BundleWriter:
    """Writes a bundle incrementally: `append` adds a part to a table, `journal` appends rows
    to the table's journal, `close` seals it.  An optional table (OPTIONAL_TABLES) gets its
    folder at its first part and is absent from a bundle that never wrote one.

    The manifest is written first with status "running"; a crash leaves that status and the
    whole parts (and journaled rows) written so far.
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
        self._journals: dict[str, Journal] = {}  # per table: rows since its last part
        for t in TABLES:
            (self.path / t).mkdir(exist_ok=True)
        write_manifest(self.path / MANIFEST, self.manifest)

    def append(self, table: str, df: pd.DataFrame) -> None:
        """Write `df` (columns of BUNDLE_SCHEMAS[table]) as the next part of `table`."""
        if table not in BUNDLE_SCHEMAS:
            raise KeyError(table)
        if table not in self._parts:  # an optional table's first part
            (self.path / table).mkdir(exist_ok=True)
            self._parts[table] = self._rows[table] = 0
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
        """Write `data`, already in `table`'s on-disk schema, as the next part (no pandas)."""
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

    def journal(self, table: str, data: pa.Table | pa.RecordBatch | dict[str, list[Any]]) -> None:
        """Append `data` to `table`'s journal: on disk at once, readable by the loader, sealed
        into the next Parquet part by `seal_journal`.  `data`: column lists (columns of
        SCHEMAS[table], an optional one may be absent, MISSING for unknown) or an Arrow table
        or record batch of `journal_schema(table)`."""
        if isinstance(data, dict):
            if not len(next(iter(data.values()), ())):
                return
            data = columns_to_arrow(table, [data])
        if data.num_rows == 0:
            return
        j = self._journals.get(table)
        if j is None:
            path = self.path / table / f".part-{self._parts[table]:06d}{SUFFIX}"
            j = self._journals[table] = Journal(path, journal_schema(table))
        j.append(data)

    def rows(self, table: str) -> int:
        """Rows of `table` written so far: sealed parts and the journal."""
        return self._rows[table] + self.journaled_rows(table)

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
        if j.batches:
            self._write_part(table, _dictionary_strings(table, j.table()))
        j.path.unlink(missing_ok=True)

    def update_manifest(self, **fields: Any) -> None:
        """Merge `fields` into the manifest and rewrite it atomically, as compact JSON (a
        collector does this while it runs; `close` writes the final one indented)."""
        self.manifest.update(fields)
        write_manifest(self.path / MANIFEST, self.manifest, compact=True)

    def close(self, status: str = "complete") -> Path:
        """Seal the journals, give every table at least one (possibly empty) part, record the
        files, set status."""
        for t in TABLES:
            self.seal_journal(t)
            if self._parts[t] == 0:
                self.append(t, empty_table(t))
        self.manifest["files"] = {
            t: {"parts": self._parts[t], "rows": self._rows[t]} for t in self._parts
        }
        self.manifest["status"] = status
        write_manifest(self.path / MANIFEST, self.manifest)
        return self.path


def open_writer(path: Path, manifest: dict[str, Any]) -> BundleWriter:
    """A BundleWriter whose every table has a part from the start, so a bundle killed at any
    moment loads (the loader needs at least one part per table)."""
    writer = BundleWriter(path, manifest)
    for table in SCHEMAS:
        writer.append(table, empty_table(table))
    return writer


def write_bundle(path: str | os.PathLike[str], run: RunData, status: str | None = None) -> Path:
    """Write a whole in-memory run as a bundle at `path` (which must be absent or empty); its
    GPU-side ranges as the optional table gpu_ranges when it has any."""
    writer = BundleWriter(path, dict(run.manifest))
    writer.append("activity", run.activity)
    writer.append("samples", run.samples)
    writer.append("markers", run.markers)
    if run.gpu_ranges is not None and len(run.gpu_ranges):
        writer.append("gpu_ranges", run.gpu_ranges)
    return writer.close(status or run.manifest.get("status") or "complete")
