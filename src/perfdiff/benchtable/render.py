"""Render a `BenchResult` as Markdown, CSV or versioned JSON (no arithmetic beyond rounding).

The Markdown report puts the summary first (geometric means per group, the largest wins and
losses), then one table per group with the variants side by side (the table pivoted, so a
group fits on a screen), then the configurations that lack a counterpart.  Names from the
table are user data and are escaped (`perfdiff.render.text.md_escape`).
"""
from __future__ import annotations

import json
import math
import textwrap
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.benchtable.compare import extremes, regressed_pct
from perfdiff.benchtable.records import BenchResult, Comparison, GroupSummary, NoteCode, Significance
from perfdiff.errors import InputError
from perfdiff.render.text import fmt_p, fmt_score, md_escape, shorten
from perfdiff.stats.ratios import MIN_CI_CONFIGS
from perfdiff.version import __version__

JSON_FORMAT = "perfdiff-bench"
JSON_VERSION = 1
MAX_LINE = 200  # characters: a group table wider than this is cut into tables that fit
NAME_WIDTH = 40  # characters of a key value or variant name in a table cell
LABEL_WIDTH = 24  # characters of a variant name in a column header
MAX_LISTED = 8  # configurations without a counterpart named per comparison


def variant_labels(variants: tuple[str, ...]) -> dict[str, str]:
    """Escaped column-header labels of the variants: shortened to 24 characters, or v1, v2 …
    (named in the report's header) when shortening makes two alike."""
    labels = {v: _md(v, LABEL_WIDTH) for v in variants}
    if len(set(labels.values())) == len(variants):
        return labels
    return {v: f"v{i + 1}" for i, v in enumerate(variants)}


def _pair_label(result: BenchResult, c: Comparison) -> str:
    labels = variant_labels(result.variants)
    return f"{labels[c.candidate]} / {labels[c.reference]}"


def _para(text: str, indent: str = "") -> list[str]:
    """A paragraph (or bullet) wrapped at 100 characters; Markdown joins the lines again."""
    return textwrap.wrap(text, 100, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _md(text: object, width: int = NAME_WIDTH) -> str:
    return md_escape(shorten(str(text), width))


def fmt_ratio(r: float) -> str:
    """×0.153, ×6.55, ×1,234; "--" when unknown."""
    if r is None or not math.isfinite(r):
        return "--"
    return f"×{r:,.0f}" if r >= 100 else f"×{r:.3g}"


def _value(median: float, lo: float, hi: float, n: int) -> str:
    if n == 0 or not math.isfinite(median):
        return "--"
    text = fmt_score(median)
    if n > 1:
        if math.isfinite(lo) and math.isfinite(hi) and median != 0:
            text += f" ±{max(hi - median, median - lo) / abs(median) * 100:.2g}%"
        else:
            text += f" (n={n})"
    return text


def _ratio_cell(ratio: float, test: str, p: float) -> str:
    if test == Significance.MISSING.value or not isinstance(test, str):
        return "--"
    if test == Significance.NOT_SIGNIFICANT.value:
        return f"~ (p={fmt_p(p)})"
    if test == Significance.SIGNIFICANT.value:
        return f"{fmt_ratio(ratio)} (p={fmt_p(p)})"
    if test == Significance.TOO_FEW.value:
        return f"{fmt_ratio(ratio)} (too few)"
    return fmt_ratio(ratio)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _group_text(group: tuple[tuple[str, str], ...]) -> str:
    return " · ".join(f"{_md(k)} {_md(v)}" for k, v in group) if group else "all"


def _ci_text(s: GroupSummary) -> str:
    if not math.isfinite(s.ci_low):
        return "—"  # why is in ci_reason (JSON) and under the summary table
    return f"{fmt_ratio(s.ci_low)} – {fmt_ratio(s.ci_high)}"


def _config_text(row: pd.Series, cols: list[str]) -> str:
    return ", ".join(f"{_md(k)} {_md(row[k])}" for k in cols) or "the only configuration"


def _varying(result: BenchResult, skip: tuple[str, ...] = ()) -> list[str]:
    constant = {k for k, _ in result.constant_keys}
    return [k for k in result.keys if k not in constant and k not in skip]


def _header(result: BenchResult, lines: list[str]) -> None:
    better = "higher" if result.higher_is_better else "lower"
    lines.append(f"# Benchmark comparison: {_md(result.metric)} ({better} is better)")
    lines.append("")
    sources = " and ".join(f"`{_md(s, 80)}`" for s in result.sources)
    labels = variant_labels(result.variants)
    short = any(labels[v] == f"v{i + 1}" for i, v in enumerate(result.variants))
    names = ", ".join((f"{labels[v]} = " if short else "") + f"**{_md(v, 200)}**" +
                      (" (baseline)" if v == result.baseline else "") for v in result.variants)
    lines += _para(f"*perfdiff {__version__}* · {sources} · {len(result.configs)} configurations · "
                   f"variants by {_md(result.by)}: {names}")
    lines.append("")
    facts = []
    own = {}  # key -> (variant, its own value) where a variant differs in a key of its own
    for note in result.notes:
        if note.code is NoteCode.VARIANT_KEYS:
            own.update({k: tuple(v) for k, v in note.values["single"].items()})
    if result.constant_keys:
        facts.append("Same in every configuration: " + ", ".join(
            f"{_md(k)} {_md(v)}" + (f" ({_md(own[k][0])}: {_md(own[k][1])})" if k in own else "")
            for k, v in result.constant_keys) + ".")
    for note in result.notes:
        if note.code is NoteCode.VARIANT_KEYS:
            c = result.comparisons[note.values["comparison"]]
            by_side: dict[str, list[str]] = {}
            for k, (side, v) in note.values["single"].items():
                by_side.setdefault(side, []).append(f"{_md(k)} {_md(v)}")
            why = "; ".join(f"{_md(side)} has only {' and '.join(kv)}" for side, kv in by_side.items())
            facts.append(f"**{_md(c.candidate)}** is matched with **{_md(c.reference)}** on every key but "
                         f"{', '.join(_md(k) for k in c.variant_keys)} ({why}, which the other never has).")
        elif note.code is NoteCode.ROWS_WITHOUT_VALUE:
            facts.append(f"{note.values['rows']} rows without a {_md(result.metric)} value are left out.")
        elif note.code is NoteCode.ROWS_NOT_POSITIVE:
            facts.append(f"{note.values['rows']} rows with a {_md(result.metric)} of 0 or less (a failed run's "
                         "marker?) are left out: a ratio needs positive values.")
        elif note.code is NoteCode.ROWS_WITHOUT_VARIANT:
            facts.append(f"{note.values['rows']} rows without a {_md(result.by)} are left out.")
        elif note.code is NoteCode.IGNORED_COLUMNS:
            facts.append("Numeric columns neither key nor metric (ignored): " +
                         ", ".join(_md(c) for c in note.values["columns"]) + ".")
        elif note.code is NoteCode.REPETITIONS:
            facts.append(f"{note.values['configurations']} configurations were measured more than once "
                         f"(up to {note.values['max_n']} times): their medians are compared.")
    for f in facts:
        lines += _para(f) + [""]


def _summary(result: BenchResult, lines: list[str]) -> None:
    lines.append("## Summary")
    lines.append("")
    level = f"{result.level * 100:g}%"
    lines += _para(f"Ratio = candidate / reference of the {_md(result.metric)} per configuration; geometric "
                   f"mean over the configurations of a group, with its {level} CI (t interval on the log "
                   "ratios). better / worse / same count configurations from the candidate's side.")
    lines.append("")
    rows = []
    for s in result.summaries:
        comp = result.comparisons[s.comparison]
        label = _pair_label(result, comp)
        gate = regressed_pct(result, s)
        change = "--" if not math.isfinite(gate) else (f"{abs(gate):.1f}% " + ("worse" if gate > 0 else "better"))
        rows.append([label if not s.grouping else "", _group_text(s.group), str(s.n_configs),
                     fmt_ratio(s.geomean), _ci_text(s), change, str(s.better), str(s.worse), str(s.same)])
    lines += _table(["comparison", "group", "configs", "geomean", f"{level} CI", "change", "better",
                     "worse", "same"], rows)
    lines.append("")
    if any(not math.isfinite(s.ci_low) for s in result.summaries):
        lines += _para(f"— : no CI for a group of fewer than {MIN_CI_CONFIGS} configurations (with two, "
                       "the t interval on one degree of freedom spans far more than the two ratios).")
        lines.append("")
    rows = []
    cols = _varying(result)
    for i, c in enumerate(result.comparisons):
        best, worst = extremes(result, i)
        label = _pair_label(result, c)
        for what, part in (("wins", best), ("loses", worst)):
            for _, r in part.iterrows():
                rows.append([label, what, fmt_ratio(r["ratio"]), _config_text(r, cols)])
                label = ""
    if rows:
        lines.append("Largest wins and losses:")
        lines.append("")
        lines += _table(["comparison", "", "ratio", "configuration"], rows)
        lines.append("")


def _section_rows(result: BenchResult, part: pd.DataFrame, cols: list[str]) -> tuple[list[str], list[list[str]],
                                                                                    list[str], list[list[str]]]:
    """(value header, value rows, ratio header, ratio rows) of one group's configurations."""
    labels = variant_labels(result.variants)
    vh = [_md(k) for k in cols] + [labels[v] for v in result.variants]
    rh = [_md(k) for k in cols] + [_pair_label(result, c) for c in result.comparisons]
    rh.append("best")
    vrows, rrows = [], []
    for _, row in part.iterrows():
        keys = [_md(row[k]) for k in cols]
        vals = []
        for v in result.variants:
            vals.append(_value(row[f"median:{v}"], row[f"ci_low:{v}"], row[f"ci_high:{v}"], int(row[f"n:{v}"])))
        ratios = [_ratio_cell(row[f"ratio:{i}"], row[f"test:{i}"], row[f"p_value:{i}"])
                  for i in range(len(result.comparisons))]
        best = labels[row["best"]] if isinstance(row["best"], str) else "--"
        vrows.append(keys + vals)
        rrows.append(keys + ratios + [best])
    return vh, vrows, rh, rrows


def _sections(result: BenchResult, lines: list[str]) -> None:
    grouping = list(result.groupings[0]) if result.groupings else []
    cols = _varying(result, tuple(grouping))
    configs = result.configs
    groups = configs.groupby(grouping, sort=False) if grouping else [((), configs)]
    for vals, part in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        title = _group_text(tuple(zip(grouping, map(str, vals), strict=True))) if grouping else "All configurations"
        lines.append(f"## {title}")
        lines.append("")
        vh, vrows, rh, rrows = _section_rows(result, part, cols)
        n_keys = len(cols)
        header = vh + rh[n_keys:]
        rows = [v + r[n_keys:] for v, r in zip(vrows, rrows, strict=True)]
        for chunk in _fit(header, rows, n_keys):
            lines += _table([header[j] for j in chunk], [[r[j] for j in chunk] for r in rows]) + [""]


def _fit(header: list[str], rows: list[list[str]], n_keys: int) -> list[list[int]]:
    """Column indices of the tables one wide table is cut into so that no line exceeds
    MAX_LINE: every table repeats the key columns and takes as many others as fit."""
    width = np.array([[len(c) + 3 for c in r] for r in [header, *rows]])  # "| " + cell + " "
    base = width[:, :n_keys].sum(axis=1) + 1
    chunks: list[list[int]] = []
    cur: list[int] = []
    used = base.copy()
    for j in range(n_keys, len(header)):
        if cur and (used + width[:, j]).max() > MAX_LINE:
            chunks.append(list(range(n_keys)) + cur)
            cur, used = [], base.copy()
        cur.append(j)
        used = used + width[:, j]
    chunks.append(list(range(n_keys)) + cur)
    return chunks


def _explain(lack: pd.DataFrame, have: pd.DataFrame, cols: list[str]) -> str | None:
    """A key whose values among the unmatched rows never occur among the matched ones."""
    for k in cols:
        missing = list(dict.fromkeys(lack[k]))
        if have.empty or set(missing).isdisjoint(set(have[k])):
            return f"every configuration with {_md(k)} " + ", ".join(_md(v) for v in missing)
    return None


def _unmatched(result: BenchResult, lines: list[str]) -> None:
    rows = result.rows
    cols = _varying(result)
    items: list[str] = []
    for i, c in enumerate(result.comparisons):
        sub = rows[rows["comparison"] == i]
        matched = sub[(sub["n_ref"] > 0) & (sub["n_cand"] > 0)]
        for missing, present, side in ((c.reference, c.candidate, "n_ref"), (c.candidate, c.reference, "n_cand")):
            lack = sub[sub[side] == 0]
            if lack.empty:
                continue
            head = f"- {len(lack)} configurations of **{_md(present)}** without **{_md(missing)}**: "
            why = _explain(lack, matched, cols)
            if why:
                items += _para(head + why + ".", "  ")
                continue
            items += _para(head.rstrip(": ") + ":", "  ")
            listed = [[_md(r[k]) for k in cols] for _, r in lack.head(MAX_LISTED).iterrows()]
            items += [""] + _table([_md(k) for k in cols], listed)
            if len(lack) > MAX_LISTED:
                items.append(f"| and {len(lack) - MAX_LISTED} more (CSV, JSON) |" + " |" * (len(cols) - 1))
            items.append("")
    if items:
        lines.append("## Present for one variant only")
        lines.append("")
        lines += items
        lines.append("")


def render_markdown(result: BenchResult) -> str:
    """The Markdown report of a benchmark-table comparison."""
    lines: list[str] = []
    _header(result, lines)
    _summary(result, lines)
    _sections(result, lines)
    _unmatched(result, lines)
    alpha = fmt_p(result.alpha)
    lines.append("---")
    lines.append("")
    lines += _para(f"Values: the median of a configuration's rows, ±: the half-width of its {result.level * 100:g}% "
                   "CI in % (distribution-free, 6 rows or more), (n=k): k rows, too few for a CI. Ratios: "
                   f"candidate / reference. ~: a Mann–Whitney test of the repetitions finds no difference "
                   f"(p > {alpha}); (too few): repetitions too few for any p ≤ {alpha}. A ratio without a "
                   f"p compares single values: within ±{result.tie_pct:g}% it counts as same. "
                   "docs/BENCH_TABLES.md.")
    return "\n".join(lines) + "\n"


def rows_frame(result: BenchResult) -> pd.DataFrame:
    """The per-(comparison, configuration) table of the CSV: reference and candidate by name."""
    rows = result.rows.copy()
    rows.insert(0, "reference", [result.comparisons[i].reference for i in rows["comparison"]])
    rows.insert(1, "candidate", [result.comparisons[i].candidate for i in rows["comparison"]])
    return rows.drop(columns=["comparison", "order"])


def render_csv(result: BenchResult) -> str:
    """Every (comparison, configuration) row: keys, n, medians and CIs, ratio, p, test, outcome."""
    return rows_frame(result).to_csv(index=False, lineterminator="\n")


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, Enum):
        return x.value
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _comparison(c: Comparison) -> dict[str, Any]:
    return {k: getattr(c, k) for k in c.__dataclass_fields__}


def bench_to_dict(result: BenchResult) -> dict[str, Any]:
    """Every number unrounded, as plain JSON types (NaN as null)."""
    return _clean({
        "format": JSON_FORMAT, "format_version": JSON_VERSION, "perfdiff": __version__,
        "sources": result.sources, "metric": result.metric, "by": result.by,
        "higher_is_better": result.higher_is_better, "alpha": result.alpha, "level": result.level,
        "tie_pct": result.tie_pct, "variants": result.variants, "baseline": result.baseline,
        "keys": result.keys, "constant_keys": dict(result.constant_keys), "groupings": result.groupings,
        "comparisons": [_comparison(c) for c in result.comparisons],
        "summaries": [{**{k: getattr(s, k) for k in s.__dataclass_fields__ if k != "group"},
                       "group": dict(s.group), "regressed_pct": regressed_pct(result, s)}
                      for s in result.summaries],
        "notes": [{"code": n.code, "values": n.values} for n in result.notes],
        "rows": rows_frame(result).astype(object).where(rows_frame(result).notna(), None).to_dict("records"),
    })


def render_json(result: BenchResult) -> str:
    return json.dumps(bench_to_dict(result), indent=1, ensure_ascii=False) + "\n"


def read_bench_json(text: str, source: object = None) -> dict[str, Any]:
    """A bench JSON document; InputError unless it is `perfdiff-bench` of a known version."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg}", path=source) from None
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise InputError(f"not a {JSON_FORMAT} document", path=source)
    if doc.get("format_version") != JSON_VERSION:
        raise InputError(f"{JSON_FORMAT} format_version {doc.get('format_version')!r} is not "
                         f"{JSON_VERSION}", path=source)
    return doc
