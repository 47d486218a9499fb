"""The bundle's manifest and its in-memory run: `RunData`, `base_manifest`, reading and
writing manifest.json (docs/FORMAT.md, manifest)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfdiff.version import __version__
from perfdiff.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


@dataclass
class RunData:
    """One run in memory: the manifest and the three tables (columns as in SCHEMAS).

    `gpu_ranges`: ranges on a GPU stream's timeline that an importer read (columns as in
    GPU_RANGE_COLUMNS; None or empty: none).  Only the range tree reads them; a bundle keeps
    them in its optional table gpu_ranges.  `process_groups`: the process group of each NCCL
    collective kernel of `activity` (columns as in PROCESS_GROUP_COLUMNS; None: the importer
    does not read them, as for bundles and nsys exports).  Not a bundle table."""

    manifest: dict[str, Any]
    activity: pd.DataFrame
    samples: pd.DataFrame
    markers: pd.DataFrame
    path: str = ""
    notes: list[str] = field(default_factory=list)  # load-time remarks (interrupted, dropped rows)
    gpu_ranges: pd.DataFrame | None = None
    process_groups: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        """The run's label in the report: the manifest's run_name, else the path's last part."""
        return str(self.manifest.get("run_name") or Path(self.path).name or "run")


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a directory holding a bundle manifest."""
    return (Path(path) / MANIFEST).is_file()


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


def write_manifest(path: Path, obj: dict[str, Any], *, compact: bool = False) -> None:
    """Write `obj` as JSON to `path` through a temporary file, an fsync and a rename; `compact`:
    on one line, by `json.dumps`, which takes json's C encoder (`json.dump` to a file, or any
    indent, takes the pure-Python one, several times slower)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        if compact:
            fh.write(json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str))
        else:
            json.dump(obj, fh, indent=2, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the bundle at `path`; InputError when absent, not JSON or of another version."""
    mpath = path / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("not a perfdiff run bundle (no manifest.json)", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read the manifest ({exc.strerror or exc})", path=mpath) from None
    except RecursionError:
        raise InputError("manifest is JSON nested too deeply", path=mpath) from None
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
