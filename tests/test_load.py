"""Load as a covariate (docs/STATISTICS.md): the per-cycle join of the step_* samples, the
comparison at a common load, and what the report says.  Simulations where the truth is known
(tests/load_sim.py): the same cost per token under twice the load names nothing and says the
load differed; a 10 % per-token slowdown under twice the load is found; equal load changes
nothing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from load_sim import step_run
from test_matched import compare
from test_segment_attribute import run_of

import perfdiff
from perfdiff.analyze import FindingCode, NoticeCode
from perfdiff.analyze.findings import build_findings
from perfdiff.analyze.records import NO_SAMPLE
from perfdiff.analyze.load import cycle_load
from perfdiff.analyze.verdict import VerdictCode, build_verdict
from perfdiff.bundle import write_bundle
from perfdiff.model.cycles import Cycles
from perfdiff.model.schema import CycleSource
from perfdiff.stats.adjusted import adjusted_difference, fit_strata, newey_west_lag


def s(metric: str, t0: int, t1: int, v: float) -> dict:
    return {"metric": metric, "device": "Host", "t_start_ns": t0, "t_end_ns": t1, "value": v}


def test_join_sums_the_samples_in_each_cycle_and_leaves_the_rest_unknown() -> None:
    cycles = Cycles(np.array([0, 100, 200]), np.array([100, 200, 300]), CycleSource.WINDOW, "")
    run = run_of([], samples=[
        s("step_tokens", 10, 90, 5), s("step_requests", 10, 90, 2),
        s("step_tokens", 100, 140, 3), s("step_tokens", 150, 200, 4),  # two steps in cycle 1: summed
        s("step_tokens", 400, 450, 9),  # after every cycle: ignored
        s("gpu_usage", 210, 290, 50.0),  # not a step metric
    ])
    load = cycle_load(run, cycles)
    assert load.tokens[:2].tolist() == [5.0, 7.0] and np.isnan(load.tokens[2])
    assert load.requests[0] == 2.0 and np.isnan(load.requests[1:]).all()
    assert load.reason == "" and load.recorded


def test_join_adds_prefill_and_decode_when_tokens_are_not_recorded() -> None:
    cycles = Cycles(np.array([0, 100]), np.array([100, 200]), CycleSource.WINDOW, "")
    run = run_of([], samples=[s("step_prefill_tokens", 0, 100, 64), s("step_decode_tokens", 0, 100, 8),
                              s("step_prefill_tokens", 100, 200, 0), s("step_decode_tokens", 100, 200, 9)])
    assert cycle_load(run, cycles).tokens.tolist() == [72.0, 9.0]
    none = cycle_load(run_of([], samples=[s("gpu_usage", 0, 100, 1.0)]), cycles)
    assert not none.recorded and np.isnan(none.tokens).all() and "no step load" in none.reason


def _newey_west_by_definition(X: np.ndarray, y: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """cᵀβ̂ and its Newey–West variance cᵀ(X'X)⁻¹ (Σ_l w_l Σ_t u_t u_{t-l} x_t x_{t-l}') (X'X)⁻¹ c
    · n/(n − p), for the least-squares fit of y on the design X."""
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    u = y - X @ beta
    bread = np.linalg.inv(X.T @ X)
    n, p = X.shape
    L = newey_west_lag(n)
    meat = (X * u[:, None]).T @ (X * u[:, None])
    for k in range(1, L + 1):
        g = (X[k:] * u[k:, None]).T @ (X[:-k] * u[:-k, None])
        meat += (1 - k / (L + 1)) * (g + g.T)
    return float(c @ beta), float(c @ bread @ meat @ bread @ c * n / (n - p))


def test_strata_fits_and_their_variance_match_the_definition() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(10, 100, 200)
    y = np.vstack([3.0 + 2.0 * x + rng.standard_normal(200), 7.0 + 0.0 * x + rng.standard_normal(200)])
    one = fit_strata(y, x, np.zeros(200, dtype=int), 50.0)
    assert one is not None
    X = np.column_stack([np.ones_like(x), x])
    for r in range(2):
        assert one.slope[r, 0] == pytest.approx(np.polyfit(x, y[r], 1)[0])
        at, var = _newey_west_by_definition(X, y[r], np.array([1.0, 50.0]))
        assert one.at[r] == pytest.approx(at) and one.var[r] == pytest.approx(var)
    # Two strata (interleaved in time, one observation left out), weights 1:3, each at its own x0.
    st = (x > 55).astype(int)
    st[7] = -1
    two = fit_strata(y, x, st, [30.0, 80.0], [1.0, 3.0])
    assert two is not None
    keep = st >= 0
    s1 = st[keep].astype(float)
    Xs = np.column_stack([1 - s1, (1 - s1) * x[keep], s1, s1 * x[keep]])
    at, var = _newey_west_by_definition(Xs, y[0][keep], np.array([0.25, 0.25 * 30.0, 0.75, 0.75 * 80.0]))
    assert two.at[0] == pytest.approx(at) and two.var[0] == pytest.approx(var)
    assert fit_strata(y[:, :5], x[:5], np.zeros(5, dtype=int), 50.0) is None  # too few points
    flat = fit_strata(np.arange(20.0), np.full(20, 4.0), np.zeros(20, dtype=int), 4.0)  # no slope: the mean
    assert flat is not None and flat.at[0] == pytest.approx(9.5) and flat.slope[0, 0] == 0.0


def test_the_interval_at_a_common_load_covers_the_truth() -> None:
    """Heteroscedastic, autocorrelated noise; the two runs' loads differ by ×2; two strata of
    unequal size; 400 pairs."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        fits = []
        for load in (1.0, 2.0):
            x = rng.uniform(10, 100, 300) * load
            e = np.zeros(300)
            shocks = rng.standard_normal(300)
            for t in range(1, 300):  # AR(1), ρ = 0.3
                e[t] = 0.3 * e[t - 1] + shocks[t]
            st = np.where((x > 60) & (x < 100), 1, np.where((x >= 20) & (x <= 60), 0, -1))
            fits.append(fit_strata(50.0 + 2.0 * x + e * (1 + x / 50), x, st, [40.0, 80.0], [2.0, 1.0]))
        d = adjusted_difference(fits[0], fits[1])
        covered += bool(d.lo[0] <= 0.0 <= d.hi[0])
    assert 0.92 <= covered / 400 <= 0.98


@pytest.mark.parametrize("seed", range(6))
def test_same_cost_per_token_under_twice_the_load_is_no_regression(seed: int) -> None:
    """The abnormal run carries twice the tokens at the same cost per token: its steps are
    ~40 % longer, every kernel significantly so as measured, and none is a cause."""
    c = compare(step_run(10 + 2 * seed), step_run(11 + 2 * seed, load=2.0))
    assert c.abnormal.mean_us > 1.3 * c.normal.mean_us
    assert [n.code for n in c.comparability] == [NoticeCode.LOAD]
    assert c.load is not None and c.load.differs and "tokens" in c.load.basis
    findings = build_findings(c)
    assert not [x.function for x in findings if x.code == FindingCode.CAUSE]
    assert not [x for x in findings if x.code in (FindingCode.DEVICE_WIDE, FindingCode.COMMON_MODE)]
    assert [v.code for v in build_verdict(c, findings)] == [VerdictCode.LOAD]
    load = next(x for x in findings if x.code == FindingCode.LOAD)
    assert "gemm" in [c.functions[i].name for i in load.related]  # grew with the load alone
    assert abs(c.load.change_pct) < 2.0


@pytest.mark.parametrize("seed", range(4))
def test_a_cost_convex_in_the_load_is_no_regression_either(seed: int) -> None:
    """Attention's cost grows with the square of the tokens: one line per run over the whole
    load range would compare two different secants; within load strata it does not."""
    c = compare(step_run(60 + 2 * seed, attn_quadratic_ns=3.0), step_run(61 + 2 * seed, load=2.0, attn_quadratic_ns=3.0))
    assert c.load is not None and c.load.n_strata >= 2
    assert [v.code for v in build_verdict(c, build_findings(c))] == [VerdictCode.LOAD]


@pytest.mark.parametrize("seed", range(3))
def test_a_ten_percent_per_token_slowdown_under_twice_the_load_is_found(seed: int) -> None:
    c = compare(step_run(30 + 2 * seed, steps=800),
                step_run(31 + 2 * seed, steps=800, load=2.0, per_token={"gemm": 1.1}))
    findings = build_findings(c)
    causes = [x for x in findings if x.code == FindingCode.CAUSE]
    assert [x.function for x in causes] == ["gemm"] and causes[0].evidence.load_adjusted
    # The truth at the common load x0: 10 % of gemm's per-token time, 0.15 µs per token.
    x0 = c.load.x0_tokens
    assert causes[0].evidence.t_a_us - causes[0].evidence.t_n_us == pytest.approx(0.15 * x0, rel=0.35)
    assert c.load.change_lo_us > 0
    assert [v.code for v in build_verdict(c, findings)] == [VerdictCode.GPU_KERNEL, VerdictCode.LOAD]


def _key(findings: list) -> list:
    return [(x.code, x.function, x.q, x.related) for x in findings]


@pytest.mark.parametrize("per_token", [None, {"gemm": 1.3}])
def test_equal_load_changes_nothing(per_token: dict | None) -> None:
    """The same load in both runs: no notice, and the findings are those of the same runs
    without step samples."""
    with_load = compare(step_run(50), step_run(51, per_token=per_token))
    without = compare(step_run(50, samples=False), step_run(51, per_token=per_token, samples=False))
    assert with_load.load is not None and not with_load.load.differs and with_load.comparability == ()
    assert without.load is None
    assert _key(build_findings(with_load)) == _key(build_findings(without))
    assert not [r for r in with_load.context if r.metric.startswith("step_")]  # a covariate, not a resource


def test_the_report_says_the_load_differed(tmp_path: Path) -> None:
    write_bundle(tmp_path / "n", step_run(1))
    write_bundle(tmp_path / "a", step_run(2, load=2.0, per_token={"gemm": 1.1}))
    c = perfdiff.compare(tmp_path / "n", tmp_path / "a")
    md = c.to_markdown()
    top = md.split("**Verdict:**")[0]
    assert "> **Not like for like:**" in top
    assert ("> - the runs carried different load: median tokens per cycle 41.5 → 82.0, requests per cycle "
            "36.0 → 74.0, prefill share 34.1 → 34.5 % of tokens") in top
    assert ("At a common load (both runs' cycles weighted to their pooled load, median 56.0 tokens per cycle) the "
            "cycle time changed +1.9% (330 µs → 336 µs; 95 % CI +0.9% to +2.9%, p 0.001)") in top
    assert "- **different load**: median tokens per cycle 41.5 → 82.0" in md
    assert "**gemm** on GPU 0 took 7.99 µs more per cycle at a common load (196 µs → 204 µs" in md
    js = json.loads(json.dumps(c.to_json()))
    assert js["load"]["differs"] and js["load"]["x0_tokens"] == 56.0
    gemm = next(f for f in js["load"]["functions"] if js["functions"][f["func"]]["name"] == "gemm")
    assert gemm["q"] <= 0.05 and gemm["lo_us"] > 0 and js["load"]["n_strata"] >= 2
    assert js["comparability"][0]["code"] == "load"
    cyc = c.cycles
    assert {"tokens", "requests", "prefill_tokens", "decode_tokens", "load_note"} <= set(cyc.columns)
    assert cyc["tokens"].notna().all() and (cyc["load_note"] == "").all()
    header, first = c.cycles_csv().decode().splitlines()[:2]
    assert header.startswith("rank,normal_us,abnormal_us,normal_tokens,normal_requests")
    dur = c.cycles[c.cycles.run == "normal"].sort_values("dur_us", ascending=False).iloc[0]
    assert first.split(",")[3] == f"{dur.tokens:g}"  # the slowest cycle's own load beside it


def test_runs_without_step_samples_report_no_load(tmp_path: Path) -> None:
    write_bundle(tmp_path / "n", step_run(1, samples=False))
    write_bundle(tmp_path / "a", step_run(2, load=2.0, samples=False))
    c = perfdiff.compare(tmp_path / "n", tmp_path / "a")
    assert c.analysis.load is None and c.to_json()["load"] is None
    assert list(c.cycles.columns) == ["run", "index", "start_ns", "end_ns", "dur_us"]
    assert c.cycles_csv().decode().splitlines()[0] == "rank,normal_us,abnormal_us"
    assert "different load" not in c.to_markdown()


def test_a_cycle_without_a_step_sample_says_why(tmp_path: Path) -> None:
    run = step_run(1)
    keep = run.samples["t_start_ns"] != run.markers["start_ns"].iloc[3]
    run.samples = run.samples[keep].reset_index(drop=True)
    write_bundle(tmp_path / "n", run)
    write_bundle(tmp_path / "a", step_run(2))
    cyc = perfdiff.compare(tmp_path / "n", tmp_path / "a").cycles
    row = cyc[(cyc.run == "normal") & (cyc["index"] == 3)].iloc[0]
    assert np.isnan(row.tokens) and row.load_note == NO_SAMPLE
    assert isinstance(cyc, pd.DataFrame) and cyc["tokens"].isna().sum() == 1
