"""The exact one-sided binomial test: is a count of successes larger than chance?"""
from __future__ import annotations

import math

from perfdiff.stats import special

__all__ = ["binomial_greater_p"]


def binomial_greater_p(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p): the p-value of `k` successes in `n` trials against a
    success probability `p`, one-sided ("greater").  The same value as
    scipy.stats.binomtest(k, n, p, alternative="greater").pvalue, from the binomial tail
    (perfdiff.stats.special.bdtrc).  NaN without trials or for p outside [0, 1]."""
    if n <= 0 or not 0.0 <= p <= 1.0 or k < 0 or k > n:
        return math.nan
    return float(special.bdtrc(k - 1, n, p)) if k > 0 else 1.0
