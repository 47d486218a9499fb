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
from scipy import special

from perfdiff.stats.describe import drop_nonfinite


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
    measured.  NaN with reason "no ratio" (n = 0) or "one configuration" (n = 1); a zero
    spread gives a zero-width interval.
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
    sd = float(logs.std(ddof=1))
    t = float(special.stdtrit(n - 1, 1.0 - (1.0 - level) / 2.0))
    half = t * sd / math.sqrt(n)
    return GeoMean(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)
