"""Welch's unequal-variance t-test, two-sided (docs/STATISTICS.md, "Welch").

The same p as ``scipy.stats.ttest_ind(a, n, equal_var=False)``, with the constant-side
cases decided here instead of returned as NaN or ±∞ statistics.
"""
from __future__ import annotations

import math

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.describe import _is_constant, drop_nonfinite


def welch_p(a: object, n: object) -> float:
    """Welch two-sided t-test p (scipy ttest_ind equal_var=False).

    NaN when n < 2 on a side; both constant and equal → 1.0; both constant and different
    → NaN (a t statistic of ±∞ is not a p-value: the row is n/a, its reason says why); NaN
    when the variances are too small for floats to hold their squares.
    """
    av, _ = drop_nonfinite(a)
    nv, _ = drop_nonfinite(n)
    return _welch(av, nv)[0]


def _welch(av: np.ndarray, nv: np.ndarray) -> tuple[float, str]:
    if av.size < 2 or nv.size < 2:
        return math.nan, "n < 2 on a side"
    const_a, const_n = _is_constant(av), _is_constant(nv)
    if const_a and const_n:
        if av[0] == nv[0]:
            return 1.0, ""
        return math.nan, "both constant and different"
    va = 0.0 if const_a else float(np.var(av, ddof=1)) / av.size
    vn = 0.0 if const_n else float(np.var(nv, ddof=1)) / nv.size
    se2 = va + vn
    den = va**2 / (av.size - 1) + vn**2 / (nv.size - 1)
    if se2 == 0.0 or den == 0.0:  # the variances' squares underflow (values ~1e-160 apart, subnormals)
        return math.nan, "variance below the floats' resolution"
    t = (float(np.mean(av)) - float(np.mean(nv))) / math.sqrt(se2)
    df = se2**2 / den
    return float(min(1.0, 2.0 * special.stdtr(df, -abs(t)))), ""

