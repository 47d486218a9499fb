"""The in-memory run tables, built from numpy columns without per-row Python work.

Importers and the collectors' trace readers produce columns as numpy arrays and, for names,
integer codes into a list of labels; these helpers turn them into the exact tables of
`schema.SCHEMAS` (categorical string columns, int64 columns with MISSING for unknown optional
integers) and concatenate parts whose categories differ.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from perfdiff.model.schema import BUNDLE_SCHEMAS, MISSING, PROCESS_GROUP_COLUMNS, SCHEMAS

__all__ = ["Part", "at_positions", "categorical", "concat_parts", "constant_categorical", "dense_codes", "empty_table",
           "normalize_table"]


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
    if len(distinct) == len(labels) and len(codes) and int(codes.min()) >= -1 and int(codes.max()) < len(labels):
        # Labels all distinct (the usual case): the codes are the categorical's codes as they
        # are, with no gather of millions of them through label_code.
        return pd.Categorical.from_codes(codes, categories=_index(list(distinct)))
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


_IN_MEMORY = {"process_groups": PROCESS_GROUP_COLUMNS}  # not a bundle table


def empty_table(table: str) -> pd.DataFrame:
    """A zero-row DataFrame with `table`'s columns and in-memory dtypes (a bundle table of
    BUNDLE_SCHEMAS, or "process_groups": PROCESS_GROUP_COLUMNS, in memory only)."""
    cols: dict[str, Any] = {}
    for name, kind in (_IN_MEMORY.get(table) or BUNDLE_SCHEMAS[table]).items():
        if kind == "str":
            cols[name] = pd.Categorical([])
        elif kind == "f8":
            cols[name] = np.array([], dtype=np.float64)
        else:
            cols[name] = np.array([], dtype=np.int64)
    return pd.DataFrame(cols)


def normalize_table(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """Return `df` with exactly `table`'s columns (BUNDLE_SCHEMAS) in their in-memory dtypes.

    Optional integer columns that are absent are filled with MISSING; a required column that
    is absent is a programming error (KeyError).
    """
    out: dict[str, Any] = {}
    n = len(df)
    for name, kind in BUNDLE_SCHEMAS[table].items():
        if name not in df.columns:
            if kind == "i8?":
                out[name] = np.full(n, MISSING, dtype=np.int64)
                continue
            raise KeyError(f"{table} needs column {name!r}")
        col = df[name]
        if kind == "str":
            out[name] = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype(str).astype("category")
        elif kind == "f8":
            out[name] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        elif kind == "i8?":
            out[name] = pd.to_numeric(col).fillna(MISSING).to_numpy(dtype=np.int64)
        else:
            out[name] = col.to_numpy(dtype=np.int64)
    return pd.DataFrame(out)


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


def at_positions(at: np.ndarray, values: np.ndarray, rows: np.ndarray, fill: Any) -> np.ndarray:
    """values[k] for each of `rows` equal to at[k] (positions, as of a sparse column), `fill`
    for the rows not in `at`; an array of `values`' dtype."""
    out = np.full(len(rows), fill, dtype=values.dtype)
    if len(at) and len(rows):
        order = np.argsort(at, kind="stable")
        at, values = at[order], values[order]
        i = np.minimum(np.searchsorted(at, rows), len(at) - 1)
        hit = at[i] == rows
        out[hit] = values[i[hit]]
    return out
