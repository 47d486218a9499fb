"""perfdiff.stats.special against scipy.special (the reference it replaces at run time), exact
closed forms, and its own inverses."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from perfdiff.stats import special

RNG = np.random.default_rng(20261129)
# Degrees of freedom as perfdiff's tests make them: Welch–Satterthwaite (fractional, ≥ 1),
# a cycle count less one or two, and the 1e6 that stands for "no limit".
DFS = np.concatenate([[1.0, 1.5, 2.0, 2.5, 3.0, 4.7, 10.0, 30.5, 100.0, 1e3, 1e4],
                      RNG.uniform(1.0, 200.0, 40)])
LARGE_DFS = np.array([1e5, 1e6])


def _rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Relative differences, where the reference is a normal double (scipy.special underflows
    to 0 some subnormal tails that these functions still give)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.where(np.abs(b) > 1e-290, np.abs(a - b) / np.maximum(np.abs(b), 1e-290), 0.0)


def test_ndtr_matches_scipy_and_keeps_small_tails() -> None:
    x = np.concatenate([np.linspace(-37.0, 38.0, 3001), RNG.normal(0.0, 5.0, 500)])
    ours, ref = special.ndtr(x), sp.ndtr(x)
    assert np.max(_rel(ours, ref)) < 1e-12
    assert special.ndtr(-38.0) > 0.0  # a subnormal tail, where scipy's underflows to 0
    assert special.ndtr(math.inf) == 1.0 and special.ndtr(-math.inf) == 0.0
    assert math.isnan(special.ndtr(math.nan))


def test_ndtri_matches_scipy_and_inverts_ndtr() -> None:
    p = np.concatenate([np.logspace(-300, -1, 400), np.linspace(0.01, 0.99, 981), 1.0 - np.logspace(-15, -2, 60)])
    ours = special.ndtri(p)
    assert np.max(_rel(ours, sp.ndtri(p))) < 1e-13
    # Φ's condition number at x is x² (1.4e3 at x = −37): the round trip keeps 1e-12.
    assert np.max(_rel(special.ndtr(ours[p < 0.5]), p[p < 0.5])) < 1e-12
    assert special.ndtri(0.0) == -math.inf and special.ndtri(1.0) == math.inf and special.ndtri(0.5) == 0.0
    assert all(math.isnan(special.ndtri(v)) for v in (-0.1, 1.1, math.nan))


def test_stdtr_matches_scipy() -> None:
    t = np.concatenate([np.linspace(-60.0, 60.0, 481), -np.logspace(-3, 4, 50), np.logspace(-3, 4, 50)])
    d, tt = np.meshgrid(DFS, t)
    assert np.max(_rel(special.stdtr(d, tt), sp.stdtr(d, tt))) < 1e-12
    d, tt = np.meshgrid(LARGE_DFS, t)  # a long continued fraction: a few digits fewer
    assert np.max(_rel(special.stdtr(d, tt), sp.stdtr(d, tt))) < 1e-9


def test_stdtr_closed_forms() -> None:
    """df = 1 (Cauchy) and df = 2 have closed forms; near t = 0 they are more exact than
    scipy.special's own stdtr (1e-9 off for df = 1, t = 1e-8)."""
    t = np.concatenate([np.linspace(-40.0, 40.0, 401), np.logspace(-12, 2, 60), -np.logspace(-12, 2, 60)])
    # Each written so that a small tail (t < 0) is computed without cancellation.
    a = np.abs(t)
    cauchy = np.where(t < 0, np.arctan(1.0 / np.maximum(a, 1e-300)) / math.pi, 0.5 + np.arctan(t) / math.pi)
    assert np.max(_rel(special.stdtr(1.0, t), cauchy)) < 1e-13
    r = np.sqrt(2.0 + t * t)
    two = np.where(t < 0, 1.0 / (r * (r + a)), 0.5 + t / (2.0 * r))
    assert np.max(_rel(special.stdtr(2.0, t), two)) < 1e-13
    assert special.stdtr(7.0, 0.0) == 0.5
    assert special.stdtr(7.0, -math.inf) == 0.0 and special.stdtr(7.0, math.inf) == 1.0
    assert special.stdtr(math.inf, 1.5) == special.ndtr(1.5)
    assert all(math.isnan(special.stdtr(df, 1.0)) for df in (0.0, -1.0, math.nan))


def test_stdtrit_matches_scipy_and_inverts_stdtr() -> None:
    p = np.concatenate([np.logspace(-100, -1, 60), np.linspace(0.01, 0.99, 99), [0.975, 0.995, 0.9995]])
    d, pp = np.meshgrid(DFS, p)
    ours = special.stdtrit(d, pp)
    assert np.max(_rel(ours, sp.stdtrit(d, pp))) < 1e-11
    lower = pp < 0.5
    assert np.max(_rel(special.stdtr(d[lower], ours[lower]), pp[lower])) < 1e-12
    # Deep tails, where scipy.special's stdtrit is itself off: the inverse is what counts.
    for df, q in ((1.5, 1e-150), (2.5, 1e-150), (2.5, 1e-250), (3.0, 1e-250), (10.0, 1e-250)):
        t = special.stdtrit(df, q)  # |t| up to 1e100
        assert abs(special.stdtr(df, t) - q) / q < 1e-12
    d, pp = np.meshgrid(LARGE_DFS, p)
    assert np.max(_rel(special.stdtrit(d, pp), sp.stdtrit(d, pp))) < 1e-9


def test_stdtrit_known_values_and_edges() -> None:
    assert special.stdtrit(1.0, 0.975) == pytest.approx(12.706204736174694, rel=1e-14)
    assert special.stdtrit(2.0, 0.975) == pytest.approx(4.302652729749464, rel=1e-14)
    assert special.stdtrit(10.0, 0.975) == pytest.approx(2.228138851986274, rel=1e-13)
    assert special.stdtrit(5.0, 0.5) == 0.0
    assert special.stdtrit(5.0, 0.0) == -math.inf and special.stdtrit(5.0, 1.0) == math.inf
    assert special.stdtrit(0.05, 1e-300) == -math.inf  # a root whose square is no double
    assert all(math.isnan(special.stdtrit(df, p)) for df, p in ((0.0, 0.3), (3.0, 1.5), (math.nan, 0.3)))


def test_bdtrc_matches_scipy() -> None:
    rows = [(k, n, p) for n in (1, 2, 5, 10, 64, 100, 1000, 5000) for k in range(-1, n + 1, max(1, n // 25))
            for p in (0.001, 0.01, 1 / 8, 0.5, 0.9, 0.999)]
    k, n, p = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    assert np.max(_rel(special.bdtrc(k, n, p), sp.bdtrc(k.astype(int), n.astype(int), p))) < 1e-10
    assert special.bdtrc(-1, 10, 0.3) == 1.0 and special.bdtrc(10, 10, 0.3) == 0.0
    # The exact sum for a small case: P(X > 2), X ~ Binomial(6, 0.25).
    exact = sum(math.comb(6, j) * 0.25 ** j * 0.75 ** (6 - j) for j in range(3, 7))
    assert special.bdtrc(2, 6, 0.25) == pytest.approx(exact, rel=1e-14)


def test_kolmogorov_matches_scipy() -> None:
    y = np.concatenate([np.linspace(0.0, 10.0, 2001), [0.999999, 1.0, 1.000001]])
    assert np.max(_rel(special.kolmogorov(y), sp.kolmogorov(y))) < 1e-13
    assert special.kolmogorov(-1.0) == 1.0


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e4), st.floats(-200.0, 200.0))
def test_stdtr_at_random(df: float, t: float) -> None:
    assert special.stdtr(df, t) == pytest.approx(float(sp.stdtr(df, t)), rel=1e-11, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e4), st.floats(1e-30, 1.0 - 1e-12))
def test_stdtrit_at_random(df: float, p: float) -> None:
    assert special.stdtrit(df, p) == pytest.approx(float(sp.stdtrit(df, p)), rel=1e-10)


def test_scalars_in_floats_out_arrays_broadcast() -> None:
    assert type(special.stdtr(3.0, 1.0)) is float and type(special.ndtr(np.float64(0.2))) is float
    out = special.stdtr(np.array([1.0, 2.0, 3.0])[:, None], np.array([-1.0, 1.0]))
    assert out.shape == (3, 2) and out.dtype == np.float64


def test_arrays_give_what_each_element_gives_alone() -> None:
    """The array paths of stdtr and stdtrit (all elements at once) agree with the scalar path,
    unusual elements included (those go one by one)."""
    df = np.concatenate([DFS, LARGE_DFS, [0.3, 1e-200, 0.0, -1.0, math.inf, math.nan]])
    t = np.array([-1e5, -30.0, -2.0, -1e-6, 0.0, 1e-6, 0.7, 3.0, 1e160, math.inf, -math.inf, math.nan])
    d, tt = np.meshgrid(df, t)
    by_one = np.array([[special.stdtr(float(a), float(b)) for a, b in zip(ra, rb, strict=True)]
                       for ra, rb in zip(d, tt, strict=True)])
    np.testing.assert_allclose(special.stdtr(d, tt), by_one, rtol=1e-12, atol=0)
    p = np.array([0.0, 1e-250, 1e-30, 0.025, 0.3, 0.5, 0.7, 0.975, 1.0 - 1e-12, 1.0, 1.5, math.nan])
    d, pp = np.meshgrid(df, p)
    by_one = np.array([[special.stdtrit(float(a), float(b)) for a, b in zip(ra, rb, strict=True)]
                       for ra, rb in zip(d, pp, strict=True)])
    large = np.isin(d, LARGE_DFS)  # a few digits fewer there (test_stdtrit_matches_scipy...)
    got = special.stdtrit(d, pp)
    np.testing.assert_allclose(got[~large], by_one[~large], rtol=1e-11, atol=0)
    np.testing.assert_allclose(got[large], by_one[large], rtol=1e-9, atol=0)


def test_edges_give_a_value_not_an_error() -> None:
    assert special.kolmogorov(1e-200) == 1.0 and special.kolmogorov(0.05) == 1.0
    assert -39.0 < special.ndtri(1e-320) < -38.0  # a subnormal p: Acklam's value, unrefined
    assert math.isnan(special.bdtrc(math.inf, 10, 0.5)) and math.isnan(special.bdtrc(1, math.inf, 0.5))
    assert special.bdtrc(0, 10.5, 0.5) == pytest.approx(float(sp.bdtrc(0, 10, 0.5)), rel=1e-14)
    assert math.isnan(special.stdtr(5e-324, 1.0)) and math.isnan(special.stdtrit(5e-324, 0.3))
    # Near ½ the quantile's residual is taken where it does not cancel.
    for p in (0.5 + 1e-8, 0.5 - 1e-12, 0.5 + 3e-5):
        assert special.ndtri(p) == pytest.approx(float(sp.ndtri(p)), rel=1e-13)


def test_a_comparison_imports_no_scipy(tmp_path) -> None:
    """A whole comparison, statistics and report, runs without importing scipy (0.1-0.2 s of
    every command's start, on its critical path)."""
    code = ("import sys; from perfdiff.cli import main; "
            "rc = main(['compare', 'examples/cpufreq/normal', 'examples/cpufreq/abnormal', '--no-plots', "
            f"'-o', {str(tmp_path / 'r.md')!r}]); "
            "print(rc, sorted(m for m in sys.modules if m.startswith('scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    assert out.strip() == "0 []"
