"""Helpers shared by the trace importers: building the run-bundle tables from numpy columns.

Importers produce columns as numpy arrays plus, for names, integer codes into a list of
labels.  These helpers turn them into the exact in-memory tables of `perfdiff.bundle`
(categorical string columns, int64 columns with MISSING for unknown optional integers)
without any per-row Python work, and concatenate parts whose categories differ.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, SCHEMAS, empty_table

__all__ = [
    "COMPARE_UNUSED", "MEMCPY_KINDS", "MEM_KINDS", "Part", "categorical", "concat_parts", "cores_per_run",
    "dense_codes", "memcpy_label", "set_runs_at_once", "strip_api_version",
]

# CUPTI copy kinds and memory kinds, as Kineto names them in "Memcpy HtoD (Pinned -> Device)"
# (nsys ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND hold the same ids; schema 2.9 lacks them).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD (UVM)", 12: "DtoH (UVM)",
                13: "DtoD (UVM)"}
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}

_API_VERSION = re.compile(r"_v\d+$")


def strip_api_version(name: str) -> str:
    """`cudaLaunchKernel_v7000` → `cudaLaunchKernel` (nsys suffixes the API version)."""
    return _API_VERSION.sub("", name)


def memcpy_label(copy_kind: int, src_kind: int | None, dst_kind: int | None) -> str:
    """Kineto's memcpy name for CUPTI kinds, e.g. ``Memcpy HtoD (Pinned -> Device)``."""
    kind = MEMCPY_KINDS.get(int(copy_kind), f"kind {int(copy_kind)}")
    if src_kind is None or dst_kind is None or src_kind < 0 or dst_kind < 0:
        return f"Memcpy {kind}"
    src = MEM_KINDS.get(int(src_kind), f"kind {int(src_kind)}")
    dst = MEM_KINDS.get(int(dst_kind), f"kind {int(dst_kind)}")
    return f"Memcpy {kind} ({src} -> {dst})"


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) of an integer array: values == uniques[codes], uniques sorted.

    For small non-negative ids (string ids, enum values) a lookup table replaces the sort of
    np.unique, which matters at millions of rows.
    """
    values = np.asarray(values, dtype=np.int64)
    if len(values) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if lo >= 0 and hi < max(4 * len(values), 1 << 16):
        present = np.zeros(hi + 1, dtype=bool)
        present[values] = True
        uniques = np.flatnonzero(present)
        lookup = np.empty(hi + 1, dtype=np.int64)
        lookup[uniques] = np.arange(len(uniques))
        return lookup[values], uniques
    uniques, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64), uniques


def categorical(codes: np.ndarray, labels: Sequence[str]) -> pd.Categorical:
    """A categorical of `labels[codes]`; repeated labels are merged, code -1 is NaN."""
    codes = np.asarray(codes, dtype=np.int64)
    if len(labels) == 0:
        return pd.Categorical.from_codes(np.full(len(codes), -1), categories=_index([]))
    label_code, distinct = pd.factorize(_index([str(x) for x in labels]))
    label_code = np.asarray(label_code, dtype=np.int64)
    new = np.where(codes >= 0, label_code[np.clip(codes, 0, None)], -1)
    return pd.Categorical.from_codes(new, categories=_index(list(distinct)))


def _index(labels: list[str]) -> pd.Index:
    # One category dtype everywhere (pandas' default string dtype), so parts concatenate.
    return pd.Index(pd.array(labels, dtype=str))


def constant_categorical(value: str, n: int) -> pd.Categorical:
    """`n` copies of one label as a categorical."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int64), categories=_index([value]))


@dataclass
class Part:
    """Rows of one table in columnar form; `columns` maps a SCHEMAS column to an array.

    String columns are pd.Categorical; a missing optional integer column is MISSING.
    """

    table: str
    columns: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        for v in self.columns.values():
            return len(v)
        return 0


_RUNS_AT_ONCE = 1  # runs being loaded at the same time on this machine (2 in perfdiff.pair's workers)


def set_runs_at_once(n: int) -> None:
    """Say how many runs load at once (perfdiff.pair's workers: 2), for cores_per_run."""
    global _RUNS_AT_ONCE
    _RUNS_AT_ONCE = max(1, n)


def cores_per_run() -> int:
    """CPU cores one run's import may keep busy: all of them, or its share when several runs
    load at once.  Importers start helper threads only where this is ≥ 2: on two cores, a
    helper thread competing with the other run's worker cost ~0.5 s of a 2 M-kernel nsys
    comparison."""
    return max(1, (os.cpu_count() or 1) // _RUNS_AT_ONCE)


# Activity columns a comparison never reads: `perfdiff compare` imports traces without
# writing them out (each is a copy of 8 bytes a row: 48 MB at 6 M rows).
COMPARE_UNUSED = frozenset({"stream", "correlation", "bytes"})


def concat_parts(table: str, parts: Iterable[Part], skip: frozenset[str] = frozenset()) -> pd.DataFrame:
    """One DataFrame of `table` (its exact in-memory dtypes) from parts, categories unified.

    `skip`: optional integer columns left unknown (MISSING) whatever the parts hold, as one
    read-only broadcast value (no memory): for a comparison, see COMPARE_UNUSED."""
    parts = [p for p in parts if len(p) > 0]
    if not parts:
        return empty_table(table)
    sizes = [len(p) for p in parts]
    total = sum(sizes)
    bounds = np.cumsum([0] + sizes)
    out: dict[str, Any] = {}
    for name, kind in SCHEMAS[table].items():
        if kind == "str":
            cats = []
            for p in parts:
                v = p.columns.get(name)
                if v is None:
                    raise KeyError(f"{table} part lacks string column {name!r}")
                if np.isscalar(v):
                    v = constant_categorical(str(v), len(p))
                elif not isinstance(v, pd.Categorical):
                    v = pd.Categorical(np.asarray(v, dtype=object))
                cats.append(v)
            if len({str(c.categories.dtype) for c in cats}) > 1:
                cats = [c.set_categories(_index(list(map(str, c.categories)))) for c in cats]
            out[name] = cats[0] if len(cats) == 1 else pd.api.types.union_categoricals(cats, ignore_order=True)
            continue
        if name in skip and kind == "i8?":
            out[name] = np.broadcast_to(np.int64(MISSING), (total,))
            continue
        dtype = np.float64 if kind == "f8" else np.int64
        col = np.empty(total, dtype=dtype)
        for p, lo, hi in zip(parts, bounds[:-1], bounds[1:], strict=True):
            v = p.columns.get(name)
            if v is None:
                if kind != "i8?":
                    raise KeyError(f"{table} part lacks column {name!r}")
                col[lo:hi] = MISSING
            else:
                col[lo:hi] = v
        out[name] = col
    # The columns already have their in-memory dtypes: copy=False keeps pandas from stacking
    # them into 2-D blocks (a full copy of the table).
    return pd.DataFrame(out, copy=False)
