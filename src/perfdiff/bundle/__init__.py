"""The run bundle (format v1, docs/FORMAT.md): the one writer and the one loader.

A bundle is a directory::

    manifest.json                 format_version, target, host, GPUs, collectors, status ...
    activity/part-000000.parquet  what takes time (kernels, memcpy, cpu ranges, host states)
    samples/part-000000.parquet   resource metrics
    markers/part-000000.parquet   cycle marks
    gpu_ranges/part-000000.parquet  GPU-side ranges (optional: only an import that read some)

A user opens a table with one pandas call: ``pd.read_parquet("run/activity")``.  Modules:
`manifest` (RunData, the manifest), `journal` (rows between parts, as Arrow IPC streams),
`writer` (BundleWriter), `loader` (load_bundle).  In memory the integer columns that may be
unknown (launch_ns, tid, stream, correlation, bytes) hold ``MISSING`` (-1); on disk they are
Parquet nulls.
"""
from __future__ import annotations

from perfdiff.bundle.journal import columns_to_arrow, journal_rows, journal_schema, merge_columns
from perfdiff.bundle.loader import is_bundle, load_bundle
from perfdiff.bundle.manifest import FORMAT_VERSION, MANIFEST, RunData, base_manifest
from perfdiff.bundle.writer import BundleWriter, open_writer, write_bundle
from perfdiff.model.schema import MISSING, OPTIONAL_TABLES, SCHEMAS, TABLES
from perfdiff.model.tables import empty_table, normalize_table

__all__ = [
    "FORMAT_VERSION", "MANIFEST", "MISSING", "OPTIONAL_TABLES", "SCHEMAS", "TABLES", "BundleWriter", "RunData",
    "base_manifest",
    "columns_to_arrow", "empty_table", "is_bundle", "journal_rows", "journal_schema", "load_bundle",
    "merge_columns", "normalize_table", "open_writer", "write_bundle",
]
