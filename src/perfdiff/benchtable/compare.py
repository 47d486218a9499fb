"""Compare the variants of a benchmark table configuration by configuration.

Per configuration and variant: the median of its repetitions and the median's distribution-free
CI; per compared pair: the ratio of medians (candidate / reference), a two-sided Mann–Whitney
test when there are repetitions ("~" when p > alpha, as benchstat), the outcome; per group of
configurations: the geometric-mean ratio with a t interval on the log ratios, and counts of
wins, losses and ties.  docs/BENCH_TABLES.md and docs/STATISTICS.md, "Benchmark tables".
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfdiff.benchtable.columns import (check_grouping, default_groupings, key_text, resolve_columns,
                                         variant_keys)
from perfdiff.benchtable.records import (BenchResult, Comparison, GroupSummary, Kind, Note, NoteCode, Outcome,
                                         Significance)
from perfdiff.errors import InputError
from perfdiff.stats.describe import quantile_ci
from perfdiff.stats.mannwhitney import mann_whitney_p, min_attainable_p
from perfdiff.stats.ratios import geomean_ci

TABLE_COLUMN = "table"  # the variant column of a before/after pair of tables


def _combine(tables: list[tuple[str, pd.DataFrame]], by: str | None) -> tuple[pd.DataFrame, str | None]:
    """One frame: a single table as is; two tables stacked with a `table` column naming each."""
    if len(tables) == 1:
        if not by:
            raise InputError("one table needs --by COLUMN, the column naming the compared variants "
                             "(or give two tables: before and after)")
        return tables[0][1], by
    if len(tables) != 2:
        raise InputError("give one table (with --by) or two (before and after)")
    if by:
        raise InputError("--by names the variant column of one table; two tables are compared "
                         "as before and after")
    (name_a, a), (name_b, b) = tables
    if set(a.columns) != set(b.columns):
        only = sorted(set(a.columns) ^ set(b.columns))
        raise InputError(f"the two tables have different columns ({', '.join(only)})")
    if name_a == name_b:
        name_a, name_b = f"{name_a} (1)", f"{name_b} (2)"
    col = TABLE_COLUMN
    while col in a.columns:
        col += "_"
    both = pd.concat([a.assign(**{col: name_a}), b[list(a.columns)].assign(**{col: name_b})],
                     ignore_index=True)
    return both, col


def _cells(data: pd.DataFrame, keys: tuple[str, ...], level: float) -> pd.DataFrame:
    """One row per (variant, configuration): n, median, the median's CI, the values, order."""
    grouped = data.groupby(["variant", *keys], sort=False)
    cells = grouped["value"].agg(values=lambda s: s.to_numpy(np.float64)).reset_index()
    cells["order"] = grouped["order"].min().to_numpy()
    cells["n"] = cells["values"].map(len)
    cells["median"] = cells["values"].map(np.median)
    ci = [quantile_ci(v, 0.5, level) if len(v) > 1 else (math.nan, math.nan) for v in cells["values"]]
    cells["ci_low"] = [c[0] for c in ci]
    cells["ci_high"] = [c[1] for c in ci]
    return cells


def _test(ref: np.ndarray, cand: np.ndarray, alpha: float) -> tuple[Significance, float]:
    if len(ref) == 0 or len(cand) == 0:
        return Significance.MISSING, math.nan
    if len(ref) == 1 and len(cand) == 1:
        return Significance.SINGLE, math.nan
    p, _ = mann_whitney_p(cand, ref)
    if min_attainable_p(len(ref), len(cand)) > alpha:
        return Significance.TOO_FEW, p
    return (Significance.SIGNIFICANT if p <= alpha else Significance.NOT_SIGNIFICANT), p


def _outcome(ratio: float, test: Significance, higher_is_better: bool, tie_pct: float) -> Outcome:
    if test is Significance.MISSING or not math.isfinite(ratio):
        return Outcome.MISSING
    if test is Significance.NOT_SIGNIFICANT or ratio == 1.0:
        return Outcome.SAME
    if test in (Significance.SINGLE, Significance.TOO_FEW) and abs(math.log(ratio)) <= math.log1p(tie_pct / 100.0):
        return Outcome.SAME
    return Outcome.BETTER if (ratio > 1.0) == higher_is_better else Outcome.WORSE


def _pair_rows(cells: pd.DataFrame, ref: str, cand: str, keys: tuple[str, ...], alpha: float,
               higher_is_better: bool, tie_pct: float) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The configurations of one pair, matched on the keys that are not variant keys."""
    r = cells[cells["variant"] == ref].drop(columns="variant")
    c = cells[cells["variant"] == cand].drop(columns="variant")
    vkeys = variant_keys(r, c, keys)
    match = [k for k in keys if k not in vkeys]
    if vkeys:
        rn = r.groupby(match, sort=False).size() if match else pd.Series([len(r)])
        cn = c.groupby(match, sort=False).size() if match else pd.Series([len(c)])
        both = pd.concat([rn.rename("r"), cn.rename("c")], axis=1).dropna()
        if ((both["r"] > 1) & (both["c"] > 1)).any():
            raise InputError(f"cannot pair {cand!r} with {ref!r}: both have several configurations "
                             f"that differ only in {', '.join(vkeys)}")
    on = match if match else None
    if on is None:
        r = r.assign(_all=0)
        c = c.assign(_all=0)
        on = ["_all"]
    m = pd.merge(r, c, on=on, how="outer", suffixes=("_r", "_c"), sort=False)
    # The rows are the configurations of the side that varies in a variant key (the candidate
    # unless only the reference does): they take its values, the other side's single value
    # stands beside each of them.
    own_ref = any(c[k].nunique() == 1 and r[k].nunique() > 1 for k in vkeys)
    for k in vkeys:
        first, second = (f"{k}_r", f"{k}_c") if own_ref else (f"{k}_c", f"{k}_r")
        m[k] = m[first].where(m[first].notna(), m[second])
    out = pd.DataFrame({k: m[k] for k in keys})
    empty = np.empty(0)
    vr = [v if isinstance(v, np.ndarray) else empty for v in m["values_r"]]
    vc = [v if isinstance(v, np.ndarray) else empty for v in m["values_c"]]
    order_r, order_c = m["order_r"].to_numpy(np.float64), m["order_c"].to_numpy(np.float64)
    if not vkeys:
        out["order"] = np.fmin(order_r, order_c)
    elif own_ref:
        out["order"] = np.where(np.isfinite(order_r), order_r, order_c)
    else:
        out["order"] = np.where(np.isfinite(order_c), order_c, order_r)
    out["n_ref"] = [len(v) for v in vr]
    out["n_cand"] = [len(v) for v in vc]
    for side, tag in (("ref", "r"), ("cand", "c")):
        for col in ("median", "ci_low", "ci_high"):
            out[f"{side}_{col}"] = m[f"{col}_{tag}"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = out["cand_median"].to_numpy() / out["ref_median"].to_numpy()
    ratio[~(out["ref_median"].to_numpy() > 0) | ~(out["cand_median"].to_numpy() > 0)] = np.nan
    out["ratio"] = ratio
    tests = [_test(a, b, alpha) for a, b in zip(vr, vc, strict=True)]
    out["p_value"] = [t[1] for t in tests]
    out["test"] = [t[0].value for t in tests]
    out["outcome"] = [_outcome(x, t[0], higher_is_better, tie_pct).value
                      for x, t in zip(ratio.tolist(), tests, strict=True)]
    return out.sort_values("order", kind="stable").reset_index(drop=True), vkeys


def _single_side(cells: pd.DataFrame, ref: str, cand: str, vkeys: tuple[str, ...]) -> dict:
    """For each variant key, the side that holds a single value there, and that value."""
    single = {}
    for k in vkeys:
        for name in (ref, cand):
            values = cells.loc[cells["variant"] == name, k].unique()
            if len(values) == 1:
                single[k] = [name, str(values[0])]
                break
    return {"single": single}


def _summary(idx: int, grouping: tuple[str, ...], group: tuple[tuple[str, str], ...], rows: pd.DataFrame,
             level: float) -> GroupSummary:
    matched = rows[rows["outcome"] != Outcome.MISSING.value]
    g = geomean_ci(matched["ratio"].to_numpy(), level)
    counts = matched["outcome"].value_counts()
    untested = int(matched["test"].isin([Significance.SINGLE.value, Significance.TOO_FEW.value]).sum())
    return GroupSummary(idx, grouping, group, int(len(matched)), g.ratio, g.ci_low, g.ci_high, g.reason,
                        int(counts.get(Outcome.BETTER.value, 0)), int(counts.get(Outcome.WORSE.value, 0)),
                        int(counts.get(Outcome.SAME.value, 0)), untested)


def _wide(rows: pd.DataFrame, comparisons: list[Comparison], keys: tuple[str, ...], variants: tuple[str, ...],
          higher_is_better: bool) -> pd.DataFrame:
    """One row per configuration: each variant's median, its CI and n, each comparison's ratio, test,
    p and outcome, and the best variant."""
    parts = []
    for i, comp in enumerate(comparisons):
        sub = rows[rows["comparison"] == i]
        for side, name in (("ref", comp.reference), ("cand", comp.candidate)):
            have = sub[sub[f"n_{side}"] > 0]
            parts.append(pd.DataFrame({**{k: have[k] for k in keys}, "order": have["order"], "variant": name,
                                       "median": have[f"{side}_median"], "n": have[f"n_{side}"],
                                       "ci_low": have[f"{side}_ci_low"], "ci_high": have[f"{side}_ci_high"]}))
    long = pd.concat(parts, ignore_index=True).drop_duplicates([*keys, "variant"])
    wide = long.pivot(index=list(keys), columns="variant", values=["median", "n", "ci_low", "ci_high"])
    wide.columns = [f"{a}:{b}" for a, b in wide.columns]
    wide = wide.reset_index()
    order = long.groupby(list(keys), sort=False)["order"].min()
    wide = wide.merge(order.reset_index(), on=list(keys))
    for v in variants:
        for col in (f"median:{v}", f"n:{v}", f"ci_low:{v}", f"ci_high:{v}"):
            if col not in wide:
                wide[col] = np.nan
        wide[f"n:{v}"] = wide[f"n:{v}"].fillna(0).astype(np.int64)
    for i in range(len(comparisons)):
        sub = rows[rows["comparison"] == i][[*keys, "ratio", "p_value", "test", "outcome"]]
        sub = sub.rename(columns={c: f"{c}:{i}" for c in ("ratio", "p_value", "test", "outcome")})
        wide = wide.merge(sub, on=list(keys), how="left")
    medians = wide[[f"median:{v}" for v in variants]].to_numpy(np.float64)
    has = np.isfinite(medians).any(axis=1)
    filled = np.where(np.isfinite(medians), medians, -np.inf if higher_is_better else np.inf)
    best = filled.argmax(axis=1) if higher_is_better else filled.argmin(axis=1)
    wide["best"] = np.where(has, np.asarray(variants, dtype=object)[best], None)
    return wide.sort_values("order", kind="stable").reset_index(drop=True)


def compare_tables(tables: list[tuple[str, pd.DataFrame]], *, by: str | None = None,
                   baseline: str | None = None, metric: str | None = None, higher_is_better: bool = False,
                   keys: tuple[str, ...] = (), groupings: list[tuple[str, ...]] | None = None,
                   alpha: float = 0.05, level: float = 0.95, tie_pct: float = 2.0) -> BenchResult:
    """Compare the variants of one table (`by` names their column) or two tables (before, after).

    `tables` are (name, DataFrame) pairs.  The baseline is `baseline` or the first variant in
    table order; every other variant is compared with it, and when two variants remain beside
    it they are also compared head to head (the later against the earlier).  `groupings`:
    key-column tuples to summarise by; the first also sections the report (default:
    `default_groupings`, per stage × dtype and per model).
    InputError for anything in the input that prevents the comparison.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < level < 1.0:
        raise InputError("alpha and the confidence level must lie between 0 and 1")
    if tie_pct < 0:
        raise InputError("--tie must not be negative")
    df, by_col = _combine(tables, by)
    metric, by_col, keys, ignored = resolve_columns(df, metric, by_col, keys)
    notes: list[Note] = []
    if ignored:
        notes.append(Note(NoteCode.IGNORED_COLUMNS, {"columns": list(ignored)}))
    variant = df[by_col].map(lambda x: None if pd.isna(x) else str(x).strip())
    value = pd.to_numeric(df[metric], errors="coerce").astype(np.float64)
    no_variant = variant.isna()
    if no_variant.any():
        notes.append(Note(NoteCode.ROWS_WITHOUT_VARIANT, {"rows": int(no_variant.sum())}))
    variants_all = tuple(dict.fromkeys(variant[~no_variant]))
    no_value = ~np.isfinite(value) & ~no_variant
    # A ratio needs positive values: 0 or -1 is a failed run's marker, not a time or a rate.
    not_positive = np.isfinite(value) & (value <= 0) & ~no_variant
    keep = ~no_variant & ~no_value & ~not_positive
    valued = set(variant[keep])
    variants = tuple(v for v in variants_all if v in valued)  # in the table's order, rows without values too
    empty = [v for v in variants_all if v not in variants]
    if empty:
        failed = bool((not_positive & (variant == empty[0])).any())
        raise InputError(f"{by_col} {empty[0]!r} has no {metric} value in any row"
                         + (" above 0 (0 or less marks a failed run)" if failed else ""))
    if no_value.any():
        notes.append(Note(NoteCode.ROWS_WITHOUT_VALUE, {"rows": int(no_value.sum())}))
    if not_positive.any():
        notes.append(Note(NoteCode.ROWS_NOT_POSITIVE, {"rows": int(not_positive.sum())}))
    if baseline is not None and baseline not in variants:
        raise InputError(f"--baseline {baseline!r}: no row has {by_col} {baseline!r} "
                         f"(variants: {', '.join(variants)})")
    if len(variants) < 2:
        raise InputError(f"{by_col} names only one variant ({', '.join(variants) or 'none'}): nothing to compare")
    base = baseline or variants[0]
    data = key_text(df[keep], keys)
    data["variant"] = variant[keep].to_numpy()
    data["value"] = value[keep].to_numpy()
    data["order"] = np.arange(len(df))[keep.to_numpy()]
    cells = _cells(data, keys, level)
    if (cells["n"] > 1).any():
        notes.append(Note(NoteCode.REPETITIONS, {"configurations": int((cells["n"] > 1).sum()),
                                                  "max_n": int(cells["n"].max())}))
    others = [v for v in variants if v != base]
    pairs = [(base, v, Kind.BASELINE) for v in others]
    if len(others) == 2 and len(tables) == 1:
        pairs.append((others[0], others[1], Kind.PAIR))
    comparisons: list[Comparison] = []
    parts = []
    for i, (ref, cand, kind) in enumerate(pairs):
        rows, vkeys = _pair_rows(cells, ref, cand, keys, alpha, higher_is_better, tie_pct)
        rows.insert(0, "comparison", i)
        parts.append(rows)
        comparisons.append(Comparison(ref, cand, kind, tuple(k for k in keys if k not in vkeys), vkeys,
                                      int(((rows["n_ref"] > 0) & (rows["n_cand"] > 0)).sum()),
                                      int((rows["n_cand"] == 0).sum()), int((rows["n_ref"] == 0).sum())))
        if vkeys:
            notes.append(Note(NoteCode.VARIANT_KEYS, {"comparison": i, "columns": list(vkeys),
                                                      **_single_side(cells, ref, cand, vkeys)}))
    rows = pd.concat(parts, ignore_index=True)
    configs = _wide(rows, comparisons, keys, variants, higher_is_better)
    if groupings is None:
        groupings = default_groupings(configs, keys)
    groupings = [check_grouping(g, keys) for g in groupings]
    groupings = [g for g in dict.fromkeys(groupings) if g]
    summaries = []
    for i in range(len(comparisons)):
        sub = rows[rows["comparison"] == i]
        summaries.append(_summary(i, (), (), sub, level))
        for g in groupings:
            for vals, part in sub.groupby(list(g), sort=False):
                vals = vals if isinstance(vals, tuple) else (vals,)
                summary = _summary(i, g, tuple(zip(g, map(str, vals), strict=True)), part, level)
                if summary.n_configs:  # a group with no pair matched is listed as one-sided instead
                    summaries.append(summary)
    constant = tuple((k, str(configs[k].iloc[0])) for k in keys if configs[k].nunique() == 1)
    sources = tuple(name for name, _ in tables)
    return BenchResult(sources, metric, by_col, higher_is_better, alpha, level, tie_pct, variants, base, keys,
                       constant, tuple(groupings), tuple(comparisons), rows, configs, tuple(summaries),
                       tuple(notes))


def extremes(result: BenchResult, comparison: int, k: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The k configurations where the candidate wins most and loses most (by the ratio)."""
    rows = result.rows[result.rows["comparison"] == comparison]
    better = rows[rows["outcome"] == Outcome.BETTER.value]
    worse = rows[rows["outcome"] == Outcome.WORSE.value]
    asc = not result.higher_is_better  # the best ratio first
    return (better.sort_values("ratio", ascending=asc).head(k),
            worse.sort_values("ratio", ascending=not asc).head(k))


def regressed_pct(result: BenchResult, summary: GroupSummary) -> float:
    """How much worse the candidate is, in %, by the geometric mean (negative: better)."""
    r = summary.geomean
    if not math.isfinite(r):
        return math.nan
    return (1.0 - r) * 100.0 if result.higher_is_better else (r - 1.0) * 100.0


def gate(result: BenchResult, fail_on_pct: float) -> list[GroupSummary]:
    """The overall summaries of comparisons against the baseline that regress by more than
    `fail_on_pct` % (the `--fail-on` gate; head-to-head pairs do not count)."""
    out = []
    for i, comp in enumerate(result.comparisons):
        if comp.kind is Kind.BASELINE:
            s = result.overall(i)
            if regressed_pct(result, s) > fail_on_pct:
                out.append(s)
    return out
