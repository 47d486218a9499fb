"""Across the rows of one report: Benjamini–Hochberg q-values and the "fragile" flag.

docs/STATISTICS.md, "Multiple comparisons" and "Fragile".
"""
from __future__ import annotations

import math

import numpy as np


def bh_qvalues(p: object) -> np.ndarray:
    """Benjamini–Hochberg q-values (step-up, capped at 1); NaN p stay NaN and do not count in m."""
    arr = np.asarray(p, dtype=np.float64)
    q = np.full(arr.shape, math.nan)
    ok = np.isfinite(arr)
    m = int(ok.sum())
    if m == 0:
        return q
    pv = arr[ok]
    order = np.argsort(pv, kind="stable")
    scaled = pv[order] * m / np.arange(1, m + 1)
    # q_(i) = min over j ≥ i of p_(j)·m/j: a running minimum from the largest p down.
    qs = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = qs
    q[ok] = out
    return q


def is_fragile(p_welch: float, p_mwu: float, alpha: float) -> bool:
    """True when Welch and Mann–Whitney disagree about significance at alpha (pass p or q).

    Both must be computable: when one is n/a the row already carries that reason, and an
    n/a Welch next to a significant U-test is usually a perfect separation (both sides
    constant and different), not a fragile result.
    """
    if not (math.isfinite(p_welch) and math.isfinite(p_mwu)):
        return False
    return (p_welch <= alpha) != (p_mwu <= alpha)

