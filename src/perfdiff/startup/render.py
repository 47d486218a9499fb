"""Render a `StartupTable` as Markdown, CSV or JSON (no arithmetic beyond display rounding)."""
from __future__ import annotations

import csv
import io
import json
import math
import re
from typing import Any

from perfdiff.startup.group import StartupGroups, StartupTable
from perfdiff.startup.parse import PhaseValue, StartupColumn
from perfdiff.render.text import fmt_p, md_escape

JSON_FORMAT = "perfdiff.startup"
JSON_VERSION = 1

LEGEND = (
    "Seconds. `--`: the log does not show the phase. `~x`: derived, not printed by the engine "
    "(how: the note). `(max of n)`: the slowest of the n ranks that printed the line - every "
    "phase ends in a collective, so the slowest rank gates startup (the fastest is in the JSON). "
    "`[k]`: note k below."
)
ROW_SEMANTICS = (
    ("Nested rows, never added to totals: kv_cache_profiling (vLLM <= 0.17) contains "
     "torch.compile and graph_compile_cached (compilation runs in the first profiling forward); "
     "init_engine contains kv_cache_profiling, the KV cache allocation, graph_capturing and the "
     "sampler warm-up; model_loading = load_weights + model_init."),
    ("torch.compile is Dynamo plus fresh compiles only up to vLLM 0.11 (a cache hit shows "
     "torch.compile equal to dynamo_transform_time and excludes the load time in "
     "graph_compile_cached); 0.12-0.17 add the cache-load time; from 0.18 it is the wall time of "
     "the whole compile / AOT-load step. With compile ranges (0.18+) the ranges of one pass "
     "compile interleaved, so a pass counts its longest line and passes add up; repeated Dynamo "
     "and torch.compile lines of one rank (compile units, a drafter, a recompile after an AOT "
     "load failure) add up."),
    "graph_capturing from vLLM is printed in whole seconds.",
    ("total_time adds the top-level blocks that do not overlap: vLLM model_loading + init_engine "
     "+ tokenizer_init; SGLang dist_init + model_loading + kv_cache_init + graph_capturing "
     "(those present)."),
    ("actual_total_time runs from the first time-stamped line of the launch to its readiness "
     "marker (or the harness's 'initialize_engine took'); vLLM time stamps have 1 s resolution. "
     "It excludes the Python import time before the first log line (typically 5-15 s). "
     "unaccounted = actual_total_time - total_time (API server setup, config and HF resolution, "
     "process spawn)."),
)

def format_seconds(value: float, decimals: int) -> str:
    """Fixed decimals; "--" when unknown; never "-0"."""
    if value is None or not math.isfinite(value):
        return "--"
    text = f"{value:.{decimals}f}"
    return text[1:] if re.fullmatch(r"-0(\.0*)?", text) else text


class _Notes:
    """Footnotes numbered in order of first use; the same text gets the same number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def _cell_text(row: str, value: PhaseValue | None, notes: _Notes) -> str:
    if value is None:
        return "--"
    text = ("~" if value.derived else "") + format_seconds(value.value_s, value.decimals)
    if value.n_ranks > 1:
        text += f" (max of {value.n_ranks})"
    refs = []
    if value.derived:
        refs.append(notes.ref(f"{row} = {value.derived}"))
    refs.extend(notes.ref(f"{row}: {n}") for n in value.notes)
    return text + (" " + " ".join(refs) if refs else "")


def _column_facts(col: StartupColumn) -> str:
    facts = [col.engine + (f" {col.version}" if col.version else " (version not printed)")]
    if col.tp is not None:
        facts.append(f"TP {col.tp} in the arguments")
    shown = ", ".join(col.ranks_seen[:4]) + (", ..." if len(col.ranks_seen) > 4 else "")
    facts.append(f"ranks seen: {len(col.ranks_seen)} ({shown})")
    facts.append(f"compile cache: {col.compile_cache or 'no compile lines'}")
    if col.compile_units:
        facts.append("compile units: " + ", ".join(col.compile_units))
    facts.append(f"launch {col.launch} of {col.n_launches} (lines {col.first_line}-"
                 f"{col.last_line})")
    facts.append(f"ready: {col.ready_marker} at line {col.ready_line}" if col.ready_marker
                 else "never ready (incomplete)")
    if "init_engine_compilation_s" in col.extras:
        facts.append(f"init engine says compilation {col.extras['init_engine_compilation_s']:g} s")
    facts.extend(col.notes)
    return "; ".join(facts)


def _table(header: list[str], align: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return lines


_PLAIN_ROW = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9.])?")  # no Markdown: underscores inside words


def _row_name(row: str) -> str:
    """A row's name in a table: as it is where Markdown reads nothing in it (load_weights),
    escaped otherwise (a --phase-regex row is the user's text)."""
    return row if _PLAIN_ROW.fullmatch(row) else md_escape(row)


def _group_section(groups: StartupGroups, rows: tuple[str, ...], notes: _Notes) -> list[str]:
    out = ["## By configuration", ""]
    keys = groups.keys
    header = ["phase"] + [f"{md_escape(k)} (n={len(groups.members[k])})" for k in keys]
    two = len(keys) == 2
    if two:
        header += [f"delta {md_escape(keys[1])} - {md_escape(keys[0])}", "delta %", "U-test p"]
    body = []
    for row in rows:
        line = [_row_name(row)]
        for k in keys:
            c = groups.cells[k].get(row)
            if c is None:
                line.append("--")
                continue
            text = ("~" if c.derived else "") + format_seconds(c.mean_s, c.decimals)
            if c.n > 1:
                text += " ± " + format_seconds(c.sd_s, c.decimals)
            if c.n != len(groups.members[k]):
                text += f" (n={c.n})"
            line.append(text)
        if two:
            cmp_ = groups.comparison.get(row)
            if cmp_ is None:  # absent everywhere: "--"; on one side only: not computable
                present = any(row in groups.cells[k] for k in keys)
                line += ["--", "--", "n/a" if present else "--"]
            else:
                dec = max(groups.cells[k][row].decimals for k in keys)
                pct = "n/a" if not math.isfinite(cmp_.delta_pct) else f"{cmp_.delta_pct:+.1f} %"
                p = fmt_p(cmp_.p) + (" " + notes.ref(cmp_.p_note) if cmp_.p_note else "")
                line += [format_seconds(cmp_.delta_s, dec), pct, p]
        body.append(line)
    out += _table(header, [":--"] + ["--:"] * (len(header) - 1), body)
    out.append("")
    text = (f"Groups by `--group` on the file names ({md_escape(groups.regex)}): "
            + "; ".join(f"{md_escape(k)}: " + ", ".join(md_escape(n) for n in groups.members[k])
                        for k in keys) + ". mean ± sd (ddof 1) over the runs that reached "
            "readiness; (n=k) when fewer runs show the phase.")
    if two:
        text += (" U-test p: two-sided Mann-Whitney on the runs of the two groups (exact with "
                 f"ties up to 200000 assignments), one test per row, not corrected for the "
                 f"number of rows; alpha = {groups.alpha:g}.")
    if groups.runs_needed:
        text += f" Collect at least {groups.runs_needed} runs per group for the test to be able " \
                f"to reach alpha."
    if groups.left_out:
        text += " Left out (never ready): " + ", ".join(md_escape(n) for n in groups.left_out) + "."
    out += [text, ""]
    return out


def render_markdown(table: StartupTable) -> str:
    """The comparison as a Markdown document: groups (if any), the per-log table, notes."""
    notes = _Notes()
    out = ["# Startup phases", ""]
    if table.groups is not None:
        out += _group_section(table.groups, table.rows, notes)
        out += ["## Per run", ""]
    header = ["phase"] + [md_escape(c.name) for c in table.columns]
    body = [[_row_name(row)] + [_cell_text(row, c.phases.get(row), notes) for c in table.columns]
            for row in table.rows]
    body.append(["status"] + [c.status for c in table.columns])
    out += _table(header, [":--"] + ["--:"] * len(table.columns), body)
    out += ["", LEGEND, ""]
    if notes.texts:
        out += ["Notes:", ""]
        out += [f"{i}. {md_escape(t)}" for i, t in enumerate(notes.texts, 1)]
        out.append("")
    out += ["Logs:", ""]
    # stripped: "**" next to a space would not make bold
    out += [f"- **{md_escape(c.name.strip())}** ({md_escape(c.file)}): {md_escape(_column_facts(c))}"
            for c in table.columns]
    out += ["", "Reading the rows:", ""]
    out += [f"- {s}" for s in ROW_SEMANTICS]
    return "\n".join(out) + "\n"


CSV_FIELDS = ("log", "file", "phase", "value_s", "derived", "derivation", "n_ranks", "min_s",
              "notes", "status")


def _num(v: float) -> str:
    return "" if v is None or not math.isfinite(v) else repr(round(float(v), 6))


def render_csv(table: StartupTable) -> str:
    """Long format, one line per (log, phase) of the table; empty value_s = absent."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for c in table.columns:
        for row in table.rows:
            v = c.phases.get(row)
            w.writerow([c.name, c.file, row,
                        _num(v.value_s) if v else "",
                        "" if v is None else int(bool(v.derived)),
                        (v.derived or "") if v else "",
                        v.n_ranks if v else "",
                        _num(v.min_s) if v else "",
                        "; ".join(v.notes) if v else "",
                        c.status])
    return buf.getvalue()


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        return None if not math.isfinite(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def table_to_dict(table: StartupTable) -> dict[str, Any]:
    """Everything the table knows, as plain data (NaN → null)."""
    cols = []
    for c in table.columns:
        cols.append({
            "name": c.name, "file": c.file, "engine": c.engine, "version": c.version,
            "status": c.status, "ready_marker": c.ready_marker, "ready_line": c.ready_line,
            "launch": c.launch, "n_launches": c.n_launches, "first_line": c.first_line,
            "last_line": c.last_line, "ranks_seen": list(c.ranks_seen), "tp": c.tp,
            "compile_cache": c.compile_cache, "compile_units": list(c.compile_units),
            "notes": list(c.notes), "extras": c.extras,
            "phases": {row: {"value_s": v.value_s, "decimals": v.decimals,
                             "derived": v.derived, "n_ranks": v.n_ranks, "min_s": v.min_s,
                             "notes": list(v.notes)}
                       for row, v in c.phases.items()},
        })
    out: dict[str, Any] = {"format": JSON_FORMAT, "version": JSON_VERSION, "unit": "s",
                           "rows": list(table.rows), "columns": cols, "groups": None}
    g = table.groups
    if g is not None:
        out["groups"] = {
            "regex": g.regex, "keys": list(g.keys),
            "members": {k: list(v) for k, v in g.members.items()},
            "left_out": list(g.left_out), "alpha": g.alpha, "runs_needed": g.runs_needed,
            "cells": {k: {row: vars(c) for row, c in rows.items()} for k, rows in g.cells.items()},
            "comparison": {row: vars(c) for row, c in g.comparison.items()},
        }
    return _jsonable(out)


def render_json(table: StartupTable) -> str:
    """`table_to_dict` as indented JSON."""
    return json.dumps(table_to_dict(table), indent=2, ensure_ascii=False) + "\n"
