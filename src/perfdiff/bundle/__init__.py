"""The run bundle (format v1, docs/FORMAT.md): the one writer and the one loader.

A bundle is a directory::

    manifest.json                 format_version, target, host, GPUs, collectors, status ...
    activity/part-000000.parquet  what takes time (kernels, memcpy, cpu ranges, host states)
    samples/part-000000.parquet   resource metrics
    markers/part-000000.parquet   cycle marks
    gpu_ranges/part-000000.parquet  GPU-side ranges (optional: only an import that read some)

A user opens a table with one pandas call: ``pd.read_parquet("run/activity")``.  Modules:
`manifest` (RunData, the manifest), `journal` (rows between parts, as Arrow IPC streams),
`writer` (BundleWriter), `loader` (load_bundle); each imported on the first use of a name it
exports.  In memory the integer columns that may be unknown (launch_ns, tid, stream,
correlation, bytes) hold ``MISSING`` (-1); on disk they are Parquet nulls.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfdiff.bundle.journal import columns_to_arrow, journal_rows, journal_schema, merge_columns
    from perfdiff.bundle.loader import load_bundle
    from perfdiff.bundle.manifest import FORMAT_VERSION, MANIFEST, RunData, base_manifest, is_bundle
    from perfdiff.bundle.writer import BundleWriter, open_writer, write_bundle
    from perfdiff.model.schema import MISSING, OPTIONAL_TABLES, SCHEMAS, TABLES
    from perfdiff.model.tables import empty_table, normalize_table

# Each name's module, imported on first use (PEP 562): telling a bundle from a trace, or reading
# a manifest, needs neither pandas nor Arrow, which the tables' modules import.
_HOME = {
    **dict.fromkeys(("columns_to_arrow", "journal_rows", "journal_schema", "merge_columns"), "perfdiff.bundle.journal"),
    "load_bundle": "perfdiff.bundle.loader",
    **dict.fromkeys(("FORMAT_VERSION", "MANIFEST", "RunData", "base_manifest", "is_bundle"), "perfdiff.bundle.manifest"),
    **dict.fromkeys(("BundleWriter", "open_writer", "write_bundle"), "perfdiff.bundle.writer"),
    **dict.fromkeys(("MISSING", "OPTIONAL_TABLES", "SCHEMAS", "TABLES"), "perfdiff.model.schema"),
    **dict.fromkeys(("empty_table", "normalize_table"), "perfdiff.model.tables"),
}


def __getattr__(name: str) -> object:
    """The exported `name`, from its module (imported now, kept here after)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMAT_VERSION", "MANIFEST", "MISSING", "OPTIONAL_TABLES", "SCHEMAS", "TABLES", "BundleWriter", "RunData",
    "base_manifest",
    "columns_to_arrow", "empty_table", "is_bundle", "journal_rows", "journal_schema", "load_bundle",
    "merge_columns", "normalize_table", "open_writer", "write_bundle",
]
