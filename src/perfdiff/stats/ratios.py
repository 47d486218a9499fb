"""Summaries of ratios across benchmark configurations (docs/STATISTICS.md, "Benchmark tables").

A ratio is candidate / reference of one configuration's metric (dimensionless, > 0).  The
summary of many is their geometric mean, which is the only mean of ratios that does not
depend on which side is the reference (Fleming & Wallace 1986); its confidence interval is
Student's t interval on the log ratios, transformed back.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from perfdiff.stats import special

from perfdiff.stats.describe import drop_nonfinite

#: The fewest ratios whose t interval is given.  With n = 2 the spread rests on one difference
#: d of two log ratios and t₀.₉₇₅ with 1 degree of freedom is 12.71, so the half-width is
#: 12.71 · (|d|/√2) / √2 = 6.4 |d|: two ratios 10 % apart give ×0.53 – ×1.9, two a factor 2
#: apart ×0.02 – ×50, an interval that says nothing the two ratios do not.  From n = 3 (t with 2
#: degrees of freedom 4.30, the half-width 2.5 sd) it narrows like the spread of the ratios.
MIN_CI_CONFIGS = 3


@dataclass(frozen=True)
class GeoMean:
    """Geometric mean of ratios and its CI (dimensionless); `reason` says why the CI is NaN."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int
    reason: str = ""


def geomean_ci(ratios: object, level: float = 0.95) -> GeoMean:
    """exp(mean(log r)) and exp(mean ± t_{n-1} · sd / √n) over the finite, positive ratios.

    The interval treats the configurations as a sample of the configurations one could have
    measured.  NaN with reason "no ratio" (n = 0), "one configuration" (n = 1) or "2
    configurations; an interval needs 3" (n below MIN_CI_CONFIGS); a zero spread gives a zero-width
    interval.
    """
    r, _ = drop_nonfinite(ratios)
    r = r[r > 0]
    n = int(r.size)
    if n == 0:
        return GeoMean(math.nan, math.nan, math.nan, 0, "no ratio")
    logs = np.log(r)
    mean = float(logs.mean())
    if n == 1:
        return GeoMean(math.exp(mean), math.nan, math.nan, 1, "one configuration")
    if n < MIN_CI_CONFIGS:
        return GeoMean(math.exp(mean), math.nan, math.nan, n, f"{n} configurations; an interval needs {MIN_CI_CONFIGS}")
    sd = float(logs.std(ddof=1))
    t = float(special.stdtrit(n - 1, 1.0 - (1.0 - level) / 2.0))
    half = t * sd / math.sqrt(n)
    return GeoMean(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)
