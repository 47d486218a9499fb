"""Benchmark-table comparison: ratios of the shipped sample against values computed by hand from
its text, geometric means per stage × b_dtype, and the statistics of repetitions against
seeded simulations where the truth is known."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bench_read import SAMPLE

from perfdiff.benchtable.compare import compare_tables, gate
from perfdiff.benchtable.read import read_table
from perfdiff.benchtable.records import Kind, Outcome, Significance
from perfdiff.errors import InputError


@pytest.fixture(scope="module")
def sample_result():
    if not SAMPLE.is_file():
        pytest.skip(f"sample absent: {SAMPLE}")
    return compare_tables([("kernel-bench-table.txt", read_table(SAMPLE))], by="backend")


def _row(result, reference: str, candidate: str, **keys) -> pd.Series:
    i = next(j for j, c in enumerate(result.comparisons) if (c.reference, c.candidate) == (reference, candidate))
    rows = result.rows[result.rows["comparison"] == i]
    for k, v in keys.items():
        rows = rows[rows[k] == str(v)]
    assert len(rows) == 1, keys
    return rows.iloc[0]


def test_the_sample_pairs_every_variant_with_the_baseline_and_the_two_head_to_head(sample_result) -> None:
    r = sample_result
    assert r.variants == ("torch-f16", "bitblas", "mutis") and r.baseline == "torch-f16"
    pairs = [(c.reference, c.candidate, c.kind) for c in r.comparisons]
    assert pairs == [("torch-f16", "bitblas", Kind.BASELINE), ("torch-f16", "mutis", Kind.BASELINE),
                     ("bitblas", "mutis", Kind.PAIR)]
    assert r.keys == ("device", "stage", "mode", "model", "a_dtype", "b_dtype", "bs", "tokens", "group_size")
    # torch-f16 runs float16 weights without groups: matched on everything else
    assert r.comparisons[0].variant_keys == ("b_dtype", "group_size")
    assert r.comparisons[2].variant_keys == () and r.comparisons[2].n_matched == 24
    assert r.comparisons[0].n_matched == 9 and r.comparisons[0].n_candidate_only == 15
    assert r.groupings == (("stage", "b_dtype"), ("model",))  # per stage × dtype, per model


def test_ratios_match_hand_computed_values(sample_result) -> None:
    r = sample_result
    # decode, gemma-2-9b, uint4b, bs 16: bitblas 86.588142 ms, mutis 13.225680 ms (the ×6.5 of the story)
    row = _row(r, "bitblas", "mutis", stage="decode", model="google/gemma-2-9b", b_dtype="uint4b", bs=16)
    assert row["ratio"] == pytest.approx(13.225680 / 86.588142, rel=1e-9)
    assert 1 / row["ratio"] == pytest.approx(6.547, abs=1e-3)
    assert row["outcome"] == Outcome.BETTER.value and row["test"] == Significance.SINGLE.value
    # decode, gemma-2-9b, uint8, bs 1 against the float16 baseline (33.604448 ms)
    row = _row(r, "torch-f16", "bitblas", stage="decode", model="google/gemma-2-9b", b_dtype="uint8", bs=1)
    assert row["ratio"] == pytest.approx(19.506271 / 33.604448, rel=1e-9)
    # prefill, Llama-3-70B, uint2b: the last line of the sample
    row = _row(r, "bitblas", "mutis", stage="prefill", model="meta-llama/Meta-Llama-3-70B-Instruct",
               b_dtype="uint2b", bs=1)
    assert row["ratio"] == pytest.approx(2291.803955 / 2814.191772, rel=1e-9)
    # Qwen has no torch-f16 row: present for one variant only
    row = _row(r, "torch-f16", "mutis", stage="decode", model="Qwen/Qwen2.5-Coder-32B-Instruct",
               b_dtype="uint8", bs=1)
    assert row["outcome"] == Outcome.MISSING.value and math.isnan(row["ratio"])


def test_a_quantised_baseline_is_matched_the_other_way_round() -> None:
    if not SAMPLE.is_file():
        pytest.skip(f"sample absent: {SAMPLE}")
    r = compare_tables([("k", read_table(SAMPLE))], by="backend", baseline="bitblas")
    assert [(c.reference, c.candidate) for c in r.comparisons] == [("bitblas", "torch-f16"), ("bitblas", "mutis"),
                                                                   ("torch-f16", "mutis")]
    # rows are bitblas's configurations, torch-f16's float16 value beside each
    row = _row(r, "bitblas", "torch-f16", stage="decode", model="google/gemma-2-9b", b_dtype="uint4b", bs=16)
    assert row["ratio"] == pytest.approx(35.047136 / 86.588142, rel=1e-9)
    row = _row(r, "torch-f16", "mutis", stage="decode", model="google/gemma-2-9b", b_dtype="uint4b", bs=16)
    assert row["ratio"] == pytest.approx(13.225680 / 35.047136, rel=1e-9)
    wide = r.configs[(r.configs["b_dtype"] == "uint4b") & (r.configs["model"] == "google/gemma-2-9b")]
    assert len(wide) == 3 and wide["ratio:0"].notna().all()  # decode bs 1 and 16, prefill bs 1


def test_geometric_mean_per_stage_and_b_dtype(sample_result) -> None:
    r = sample_result
    s = next(s for s in r.summaries if s.comparison == 2 and s.group == (("stage", "prefill"), ("b_dtype", "uint2b")))
    ratios = [310.080994 / 367.203506, 1081.579712 / 1367.239990, 2291.803955 / 2814.191772]
    assert s.n_configs == 3 and (s.better, s.worse, s.same) == (3, 0, 0)
    assert s.geomean == pytest.approx(math.prod(ratios) ** (1 / 3), rel=1e-9)
    logs = np.log(ratios)
    half = 4.302652729911275 * logs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 df)
    assert s.ci_low == pytest.approx(math.exp(logs.mean() - half), rel=1e-9)
    assert s.ci_high == pytest.approx(math.exp(logs.mean() + half), rel=1e-9)
    groups = {s.group for s in r.summaries if s.comparison == 2 and s.grouping == ("stage", "b_dtype")}
    assert len(groups) == 6  # 2 stages × 3 quantised dtypes
    per_model = {s.group[0][1]: s.n_configs for s in r.summaries if s.comparison == 2 and s.grouping == ("model",)}
    assert per_model == {"google/gemma-2-9b": 9, "Qwen/Qwen2.5-Coder-32B-Instruct": 9,
                         "meta-llama/Meta-Llama-3-70B-Instruct": 6}
    one = next(s for s in r.summaries if s.comparison == 0 and s.group == (("stage", "prefill"), ("b_dtype", "uint8")))
    assert one.n_configs == 1 and math.isnan(one.ci_low) and one.ci_reason == "one configuration"


def _reps(rng: np.random.Generator, shift: float, n_configs: int = 1, n: int = 10, sd: float = 0.02) -> pd.DataFrame:
    """n repetitions per configuration and variant: lognormal noise of sd around 10 (a) and
    10·(1 + shift) (b)."""
    rows = []
    for cfg in range(n_configs):
        for variant, scale in (("a", 1.0), ("b", 1.0 + shift)):
            vals = 10.0 * scale * np.exp(rng.normal(0.0, sd, n))
            rows += [{"kernel": f"k{cfg}", "impl": variant, "ms": v} for v in vals]
    return pd.DataFrame(rows)


def test_repetitions_of_one_distribution_give_tilde() -> None:
    r = compare_tables([("t", _reps(np.random.default_rng(1), 0.0))], by="impl")
    row = r.rows.iloc[0]
    assert row["test"] == Significance.NOT_SIGNIFICANT.value and row["outcome"] == Outcome.SAME.value
    assert row["n_ref"] == 10 and row["n_cand"] == 10 and row["p_value"] > 0.05
    assert np.isfinite(row["ref_ci_low"]) and row["ref_ci_low"] <= row["ref_median"] <= row["ref_ci_high"]


def test_a_ten_percent_shift_is_significant() -> None:
    r = compare_tables([("t", _reps(np.random.default_rng(2), 0.10))], by="impl")
    row = r.rows.iloc[0]
    assert row["test"] == Significance.SIGNIFICANT.value and row["p_value"] < 0.001
    assert row["ratio"] == pytest.approx(1.10, rel=0.03) and row["outcome"] == Outcome.WORSE.value
    better = compare_tables([("t", _reps(np.random.default_rng(2), 0.10))], by="impl", higher_is_better=True)
    assert better.rows.iloc[0]["outcome"] == Outcome.BETTER.value


def test_null_pairs_stay_quiet() -> None:
    """200 configurations with no difference: about alpha of them may differ, the geometric
    mean is ~1 and its CI holds 1."""
    r = compare_tables([("t", _reps(np.random.default_rng(3), 0.0, n_configs=200))], by="impl")
    flagged = (r.rows["test"] == Significance.SIGNIFICANT.value).mean()
    assert flagged <= 0.08
    s = r.overall(0)
    assert s.ci_low < 1.0 < s.ci_high and s.geomean == pytest.approx(1.0, abs=0.005)


def test_too_few_repetitions_are_said_so() -> None:
    r = compare_tables([("t", _reps(np.random.default_rng(4), 0.5, n=2))], by="impl")
    row = r.rows.iloc[0]
    assert row["test"] == Significance.TOO_FEW.value and row["outcome"] == Outcome.WORSE.value  # decided by --tie


def test_failed_runs_marked_zero_negative_or_infinite_are_left_out_and_said() -> None:
    """A latency of 0 or -1 marks a failed run: its configuration left the geometric mean with
    no word; an inf in the first row made the second variant the baseline, against the
    documented "first in the table"."""
    from perfdiff.benchtable.records import NoteCode
    from perfdiff.benchtable.render import render_markdown

    df = pd.DataFrame({"impl": ["torch", "triton"] * 3, "op": ["mm", "mm", "conv", "conv", "attn", "attn"],
                       "us": [np.inf, 5.5, 0.0, 4.5, -1.0, 3.5]})
    df = pd.concat([df, pd.DataFrame({"impl": ["torch", "triton"], "op": ["gemv", "gemv"], "us": [2.5, 3.75]})])
    r = compare_tables([("t", df)], by="impl")
    assert r.baseline == "torch" and r.variants == ("torch", "triton")
    notes = {n.code: n.values for n in r.notes}
    assert notes[NoteCode.ROWS_WITHOUT_VALUE] == {"rows": 1} and notes[NoteCode.ROWS_NOT_POSITIVE] == {"rows": 2}
    assert r.overall(0).n_configs == 1 and r.overall(0).geomean == pytest.approx(1.5)
    assert "2 rows with a us of 0 or less (a failed run's marker?) are left out" in render_markdown(r)
    failed = df.assign(us=np.where(df["impl"] == "triton", -1.0, df["us"]))
    with pytest.raises(InputError, match=r"impl 'triton' has no us value in any row above 0 \(0 or less marks a "
                                         r"failed run\)"):
        compare_tables([("t", failed)], by="impl")


def test_two_tables_are_before_and_after_and_gate_on_regression() -> None:
    rng = np.random.default_rng(6)
    before = pd.DataFrame({"op": ["mm", "conv", "attn"] * 5, "bs": [1, 1, 1, 8, 8, 8] * 2 + [1, 8, 16],
                           "us": rng.uniform(10, 100, 15)})
    after = before.assign(us=before["us"] * 1.2)
    r = compare_tables([("before.csv", before), ("after.csv", after)])
    assert r.variants == ("before.csv", "after.csv") and r.by == "table"
    assert r.overall(0).geomean == pytest.approx(1.2)
    assert gate(r, 10.0) and not gate(r, 25.0)
    up = compare_tables([("before.csv", before), ("after.csv", after)], higher_is_better=True)
    assert not gate(up, 10.0)


def test_baseline_option_and_groups() -> None:
    df = pd.DataFrame({"impl": ["x", "y", "z"] * 4, "stage": ["decode"] * 6 + ["prefill"] * 6,
                       "model": ["m1"] * 3 + ["m2"] * 3 + ["m1"] * 3 + ["m2"] * 3,
                       "t": np.arange(1.5, 13.5)})
    r = compare_tables([("t", df)], by="impl", baseline="z", groupings=[("model",), ("stage", "model")])
    assert [(c.reference, c.candidate) for c in r.comparisons] == [("z", "x"), ("z", "y"), ("x", "y")]
    assert {s.grouping for s in r.summaries} == {(), ("model",), ("stage", "model")}


@pytest.mark.parametrize("frame,kwargs,match", [
    (pd.DataFrame({"a": ["x", "y"], "b": ["p", "q"]}), {"by": "a"}, "no numeric column"),
    (pd.DataFrame({"v": ["x", "y"], "t": [1.5, 2.5]}), {"by": "v"}, "no key column"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, np.nan]}), {"by": "v"}, "'y' has no t value"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5]}), {"by": "v", "baseline": "w"},
     "no row has v 'w'"),
    (pd.DataFrame({"v": ["x", "x"], "k": ["a", "b"], "t": [1.5, 2.5]}), {"by": "v"}, "only one variant"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5]}), {"by": "backend"}, "unknown --by"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5]}), {"by": "v", "metric": "ms"},
     "unknown --metric"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5], "u": [0.5, 0.7]}), {"by": "v"},
     "several candidates"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5]}), {}, "needs --by"),
    (pd.DataFrame({"v": ["x", "y"], "k": ["a", "a"], "t": [1.5, 2.5]}), {"by": "v", "groupings": [("z",)]},
     "not a key column"),
])
def test_bad_tables_are_input_errors(frame, kwargs, match) -> None:
    with pytest.raises(InputError, match=match) as exc:
        compare_tables([("t.csv", frame)], **kwargs)
    assert "\n" not in str(exc.value)


def test_two_tables_must_share_columns() -> None:
    a = pd.DataFrame({"k": ["a"], "t": [1.5]})
    with pytest.raises(InputError, match="different columns"):
        compare_tables([("a", a), ("b", a.rename(columns={"k": "kernel"}))])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_ratios_and_geomean_agree_with_a_plain_groupby(data) -> None:
    """Random tables (configurations missing on either side, 1–4 repetitions): every matched
    ratio is the ratio of the two medians, the overall geometric mean their log-mean."""
    # Both variants at (a, 1) and (b, 2): each key has two values on each side, so no key
    # describes a variant and every pair is matched on both keys.
    rows = [{"k1": k1, "k2": k2, "v": v, "t": data.draw(st.floats(0.5, 100.0))}
            for v in ("x", "y") for k1, k2 in (("a", 1), ("b", 2))]
    for k1 in ("a", "b", "c"):
        for k2 in (1, 2):
            for v in ("x", "y"):
                for _ in range(data.draw(st.integers(0, 3))):
                    rows.append({"k1": k1, "k2": k2, "v": v, "t": data.draw(st.floats(0.5, 100.0))})
    df = pd.DataFrame(rows, columns=["k1", "k2", "v", "t"]).sample(frac=1.0, random_state=0)
    r = compare_tables([("t", df)], by="v", metric="t")
    ref, cand = r.comparisons[0].reference, r.comparisons[0].candidate
    assert ref == df["v"].iloc[0]  # the baseline: the first variant in table order
    med = df.groupby(["v", "k1", "k2"])["t"].median()
    want = {}
    for (k1, k2), base in med[ref].items():
        if (k1, k2) in med[cand].index:
            want[(k1, str(k2))] = med[cand][(k1, k2)] / base
    got = {(row["k1"], row["k2"]): row["ratio"] for _, row in r.rows.iterrows() if row["outcome"] != "missing"}
    assert got.keys() == want.keys()
    for key, ratio in want.items():
        assert got[key] == pytest.approx(ratio, rel=1e-12)
    if want:
        assert r.overall(0).geomean == pytest.approx(math.exp(np.mean(np.log(list(want.values())))), rel=1e-9)
    missing = len(r.rows) - len(want)
    assert missing == r.comparisons[0].n_reference_only + r.comparisons[0].n_candidate_only
