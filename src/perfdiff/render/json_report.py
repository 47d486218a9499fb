"""The JSON twin of the report: the whole comparison result, every number unrounded.

Versioned: `format` is "perfdiff-comparison" and `format_version` says which layout; the
layout of a version is the shape of perfdiff.analyze.result.ComparisonResult and the records
it holds (perfdiff.model.codec writes and reads them by their declared fields).  A reader
(`read_comparison`) refuses another format, another version, and any record whose keys are
not those of its version (an unknown, missing or renamed key), in one line.  A change of any
record's fields makes a new version.  docs/FORMAT.md describes the layout.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from perfdiff.analyze.result import ComparisonResult
from perfdiff.errors import InputError
from perfdiff.model import codec
from perfdiff.version import __version__

FORMAT = "perfdiff-comparison"
FORMAT_VERSION = 3
ENVELOPE = ("format", "format_version", "perfdiff_version")
R = TypeVar("R", bound=ComparisonResult)


def to_json(result: ComparisonResult) -> dict[str, Any]:
    """The comparison as JSON-ready data: the envelope (format, version, perfdiff's version)
    and the result's fields (ComparisonResult.to_data)."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "perfdiff_version": __version__,
            **result.to_data()}


def render_json(result: ComparisonResult) -> str:
    """The JSON text of `to_json` (NaN is never written: it is null)."""
    return json.dumps(to_json(result), indent=1, allow_nan=False) + "\n"


def read_comparison_json(path: str | Path) -> dict[str, Any]:
    """A comparison JSON written by perfdiff, as data; InputError (exit 2) for anything else,
    including a format version this perfdiff does not read."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"not a readable JSON file ({exc.__class__.__name__})", path=p) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a perfdiff comparison (no \"format\": \"{FORMAT}\")", path=p)
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"comparison format version {version!r} is not supported by this perfdiff "
                         f"(it reads version {FORMAT_VERSION}); compare the runs again to write it", path=p)
    return data


def read_comparison(path: str | Path, cls: type[R] = ComparisonResult) -> R:  # type: ignore[assignment]
    """The comparison result a `--json` file holds, as `cls` (a ComparisonResult); InputError
    (exit 2) where the file is no comparison of this version or a record does not match."""
    data = read_comparison_json(path)
    try:
        return cls.from_data({k: v for k, v in data.items() if k not in ENVELOPE})  # type: ignore[return-value]
    except codec.RecordError as exc:
        raise InputError(f"not a perfdiff comparison of version {FORMAT_VERSION}: {exc}", path=Path(path)) from None


def schema() -> list[str]:
    """The records of this format version and their fields (perfdiff.model.codec.schema)."""
    return codec.schema(ComparisonResult)
