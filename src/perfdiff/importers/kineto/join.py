"""The launch join of a Kineto trace: each GPU event's runtime call, by correlation id."""
from __future__ import annotations

import numpy as np

__all__ = ["correlate"]


def correlate(corr_all: np.ndarray, api_rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row (into the event columns) of the runtime call with each correlation id, or -1.

    `api_rows`: the rows of runtime calls; `query`: the correlation ids to look up.  Of
    several calls with one id the first wins."""
    out = np.full(len(query), -1, dtype=np.int64)
    if len(api_rows) == 0:
        return out
    rc = corr_all[api_rows]
    ok = rc >= 0
    rows, rc = api_rows[ok], rc[ok]
    order = np.argsort(rc, kind="stable")  # the first call of an id wins
    rs = rc[order]
    pos = np.searchsorted(rs, query, side="left")
    pos_c = np.minimum(pos, len(rs) - 1) if len(rs) else pos
    if len(rs):
        hit = (pos < len(rs)) & (rs[pos_c] == query) & (query >= 0)
        out[hit] = rows[order[pos_c[hit]]]
    return out
