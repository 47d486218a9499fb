"""The geometric mean of ratios and its t interval, against a simulation where the truth is known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from perfdiff.stats.ratios import MIN_CI_CONFIGS, geomean_ci


def test_geomean_ci_covers_the_true_ratio() -> None:
    """Coverage of the t interval by simulation: 2,000 groups of 8 configurations whose log
    ratios are normal around log 0.8."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(2000):
        g = geomean_ci(0.8 * np.exp(rng.normal(0.0, 0.1, 8)))
        hits += g.ci_low <= 0.8 <= g.ci_high
    assert 0.93 <= hits / 2000 <= 0.97
    assert geomean_ci([]).reason == "no ratio" and math.isnan(geomean_ci([2.0]).ci_low)
    assert geomean_ci([2.0, 2.0]).ratio == pytest.approx(2.0)


def test_no_interval_below_the_minimum_of_configurations() -> None:
    """Two ratios a factor 10 apart: t with 1 degree of freedom would give ×8e-6 – ×1e5."""
    two = geomean_ci([0.1, 1.0])
    assert two.ratio == pytest.approx(math.sqrt(0.1)) and two.n == 2
    assert math.isnan(two.ci_low) and math.isnan(two.ci_high)
    assert two.reason == f"2 configurations; an interval needs {MIN_CI_CONFIGS}" and MIN_CI_CONFIGS == 3
    three = geomean_ci([0.1, 0.3, 1.0])
    assert three.reason == "" and three.ci_low < three.ratio < three.ci_high


def test_geomean_is_symmetric_in_the_reference() -> None:
    r = np.array([0.5, 2.0, 1.3, 0.9])
    a, b = geomean_ci(r), geomean_ci(1 / r)
    assert a.ratio * b.ratio == pytest.approx(1.0)
    assert a.ci_low * b.ci_high == pytest.approx(1.0) and a.ci_high * b.ci_low == pytest.approx(1.0)
