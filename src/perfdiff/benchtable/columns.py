"""The roles of a benchmark table's columns: the metric, the variant column, the keys.

A configuration is one combination of the key columns: every non-numeric column and every
numeric column whose values are all integers (bs, tokens, group_size), except the metric and
the variant column.  The metric is named (`--metric`) or, by default, the one numeric column
that is not integer-valued.  docs/BENCH_TABLES.md, "Columns".
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from perfdiff.errors import InputError

# Default groups: key columns named like a phase or a data type (per stage × dtype).
_GROUP_NAME = re.compile(r"stage|phase|dtype|precision|quant|layout", re.IGNORECASE)
MAX_DEFAULT_GROUPS = 12  # values of a key summarised on its own by default


def is_numeric(s: pd.Series) -> bool:
    return is_numeric_dtype(s) and not is_bool_dtype(s)


def integer_valued(s: pd.Series) -> bool:
    """A numeric column whose finite values are all whole numbers (a parameter, not a measure)."""
    if not is_numeric(s):
        return False
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    return v.size > 0 and bool(np.all(v == np.round(v)))


def _find(df: pd.DataFrame, name: str, what: str) -> str:
    """Column `name` (exact, else the one case-insensitive match); InputError listing them."""
    if name in df.columns:
        return name
    folded = [c for c in df.columns if c.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise InputError(f"unknown {what} column {name!r} (columns: {', '.join(map(str, df.columns))})")


def resolve_columns(df: pd.DataFrame, metric: str | None, by: str | None,
                    extra_keys: tuple[str, ...] = ()) -> tuple[str, str | None, tuple[str, ...], tuple[str, ...]]:
    """(metric, by, keys, ignored numeric columns) of a table; InputError when there is no
    numeric column, the metric is ambiguous or unknown, or no column is left as a key."""
    by = _find(df, by, "--by") if by else None
    numeric = [c for c in df.columns if is_numeric(df[c]) and c != by]
    if not numeric:
        raise InputError("no numeric column: nothing to compare (columns: "
                         f"{', '.join(map(str, df.columns))})")
    if metric:
        metric = _find(df, metric, "--metric")
        if metric == by:
            raise InputError(f"--metric {metric!r} is the --by column")
        if not is_numeric(df[metric]):
            raise InputError(f"--metric {metric!r} is not numeric")
    else:
        measures = [c for c in numeric if not integer_valued(df[c])]
        if len(measures) != 1:
            raise InputError("cannot tell the metric column: " +
                             (f"several candidates ({', '.join(measures)})" if measures else
                              f"every numeric column holds whole numbers ({', '.join(numeric)})")
                             + "; name it with --metric")
        metric = measures[0]
    extra = tuple(_find(df, k, "--key") for k in extra_keys)
    keys = tuple(c for c in df.columns if c not in (metric, by) and
                 (c in extra or not is_numeric(df[c]) or integer_valued(df[c])))
    ignored = tuple(c for c in numeric if c != metric and c not in keys)
    if not keys:
        raise InputError(f"no key column: besides {metric!r} every column is a non-integer number, "
                         "so no row says which configuration it measured (add one with --key)")
    return metric, by, keys, ignored


def key_text(df: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    """The key columns as text, the form configurations are matched in: whole numbers without
    a decimal point, a missing value as "n/a"."""
    out = {}
    for k in keys:
        s = df[k]
        if integer_valued(s):
            v = pd.to_numeric(s, errors="coerce")
            out[k] = v.map(lambda x: "n/a" if pd.isna(x) else str(int(x)))
        else:
            out[k] = s.map(lambda x: "n/a" if pd.isna(x) else str(x).strip())
    return pd.DataFrame(out, index=df.index)


def variant_keys(ref: pd.DataFrame, cand: pd.DataFrame, keys: tuple[str, ...]) -> tuple[str, ...]:
    """Key columns where one side holds one value that the other never has: they describe the
    variant (a float16 baseline against uint4b kernels), so pairs are not matched on them."""
    out = []
    for k in keys:
        a, b = set(ref[k]), set(cand[k])
        if a.isdisjoint(b) and (len(a) == 1 or len(b) == 1):
            out.append(k)
    return tuple(out)


def default_groupings(configs: pd.DataFrame, keys: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The summaries a report shows unless told: first, the varying key columns named like a
    phase or a data type together (stage × b_dtype), else the varying text key with the fewest
    values; then each other varying text key alone (per model), when it has at most
    MAX_DEFAULT_GROUPS values and fewer values than there are configurations."""
    varying = [k for k in keys if configs[k].nunique() > 1]
    text = [k for k in varying if not configs[k].str.fullmatch(r"-?\d+|n/a").all()
            and configs[k].nunique() < len(configs)]
    first = tuple(k for k in varying if _GROUP_NAME.search(k))
    if not first and text:
        first = (min(text, key=lambda k: configs[k].nunique()),)
    rest = [(k,) for k in text if k not in first and configs[k].nunique() <= MAX_DEFAULT_GROUPS]
    return [g for g in [first, *rest] if g]


def check_grouping(grouping: tuple[str, ...], keys: tuple[str, ...]) -> tuple[str, ...]:
    """A `--group` list of key columns (case-insensitive); InputError for any other column."""
    out = []
    for g in grouping:
        match = [k for k in keys if k == g] or [k for k in keys if k.lower() == g.lower()]
        if not match:
            raise InputError(f"--group {g!r} is not a key column (keys: {', '.join(keys)})")
        out.append(match[0])
    return tuple(out)
