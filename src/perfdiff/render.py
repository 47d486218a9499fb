"""Render a Comparison: a Markdown report (Jinja2 templates), a JSON twin, a cycle CSV.

`build_view` turns records into display strings (all escaping and rounding happens here or in
perfdiff.text); the templates only lay them out and do no arithmetic.
"""
from __future__ import annotations

import functools
import math
from importlib import resources
from typing import Any

import jinja2
import numpy as np

from perfdiff import __version__
from perfdiff.analyze import Comparison, DetailRow, FunctionStats
from perfdiff.findings import Finding
from perfdiff.text import (NA, fmt_beta, fmt_num, fmt_p, fmt_pct, fmt_score, fmt_signed, fmt_time_us,
                           fmt_value, fmt_z, html_code, md_escape, md_name, shorten)

NAME_WIDTH = 96
QUANTILE_ROWS = ("min", "P5", "P10", "P25", "P50", "P75", "P90", "P95", "P99", "max", "mean", "sd")


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    root = resources.files("perfdiff.templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    return env


def _change(n: float, a: float) -> tuple[str, str]:
    d = a - n
    pct = 100.0 * d / n if n else float("nan")
    return fmt_signed(d), fmt_pct(pct)


def _flags(f: FunctionStats) -> str:
    out = []
    if f.presence != "both":
        out.append(f.presence)
    if f.wait:
        out.append("wait")
    if f.fragile:
        out.append("fragile")
    return ", ".join(out)


def _n(res: Any) -> str:
    return f"{res.n_n}/{res.n_a}" if res is not None else NA


def _detail_cells(c: Comparison, row: DetailRow, rank: int) -> list[str]:
    f = c.functions[row.func]
    m = c.mu[row.mu] if row.mu is not None else None
    t, b = f.t, f.beta
    cells = [
        str(rank), md_name(f.name, NAME_WIDTH), md_escape(f.device),
        md_escape(m.metric) if m else "—", fmt_score(row.score),
        fmt_signed(f.tau_pp), f"{fmt_num(f.t_n_us)} → {fmt_num(f.t_a_us)}",
        fmt_z(t.z if t else None), fmt_p(f.q_t),
        fmt_beta(f.beta_n), fmt_beta(f.beta_a), fmt_beta(f.d_beta),
        fmt_z(b.z if b else None), fmt_p(b.p_welch if b else None), fmt_p(b.p_mwu if b else None), fmt_p(f.q_beta),
    ]
    if f.sampled:  # host states read as counters: rows are intervals, not calls
        cells += ["—", "—"]
    else:
        cells += [f"{fmt_num(f.calls_n)} → {fmt_num(f.calls_a)}",
                  f"{fmt_num(f.per_call_n_us)} → {fmt_num(f.per_call_a_us)}"]
    if m:
        r = m.res
        unit = f" {md_escape(m.unit)}" if m.unit else ""
        cells += [fmt_num(r.mean_n) + unit, fmt_num(r.mean_a) + unit, fmt_signed(r.mean_a - r.mean_n),
                  fmt_z(r.z), fmt_z(m.z_log), fmt_p(r.p_welch), fmt_p(r.p_mwu), fmt_p(m.q)]
    else:
        cells += ["—"] * 8
    cells += [_n(t), fmt_num(t.cliffs_delta if t else None), _flags(f) + (", μ fragile" if m and m.fragile else "")]
    return cells


DETAIL_HEADER = [
    "#", "Function Name", "Device", "Metric Name", "Suspicion Score", "τ(pp)", "t_N → t_A (µs/cycle)",
    "Z(t)", "q(t)", "β_N(%)", "β_A(%)", "Δβ(pp)", "Z-Score(β)", "p-value(β)", "U-test p(β)", "q(β)",
    "calls/cycle N → A", "µs/call N → A", "μ_N", "μ_A", "Δμ", "Z-Score(μ)", "Z-Score(log_μ)",
    "p-value(μ)", "U-test p(μ)", "q(μ)", "n_N/n_A", "Cliff's δ(t)", "flags",
]
CONTEXT_HEADER = ["Metric Name", "Device", "Unit", "μ_N", "μ_A", "Δμ", "Change (%)", "Z-Score(μ)",
                  "Z-Score(log_μ)", "p-value(μ)", "U-test p(μ)", "q(μ)", "n_N/n_A (samples)",
                  "interval N/A (ms)"]


def build_view(c: Comparison, findings: list[Finding], *, top: int = 25,
               cycles_csv: str | None = None) -> dict[str, Any]:
    """Everything the template prints, as strings."""
    N, A = c.normal, c.abnormal
    summary = []
    for label, vn, va, fmt in (
        ("Total Cycles", N.n_cycles, A.n_cycles, lambda x: f"{x:,}"),
        ("Avg Cycle Time (us)", N.mean_us, A.mean_us, fmt_num),
        ("Median Cycle Time (us)", N.median_us, A.median_us, fmt_num),
        ("P95 Cycle Time (us)", N.p95_us, A.p95_us, fmt_num),
        ("Traced Time (s)", N.traced_s, A.traced_s, lambda x: fmt_num(x, 3)),
    ):
        d, pct = _change(float(vn), float(va))
        if label == "Total Cycles":
            d, pct = f"{va - vn:+,}", "-"
        summary.append([label, fmt(vn), fmt(va), d, pct])
    dist = []
    for q in QUANTILE_ROWS:
        vn, va = c.quantiles_n[q], c.quantiles_a[q]
        d, pct = _change(vn, va)
        dist.append([q, fmt_num(vn), fmt_num(va), d, pct if q != "sd" else "-"])
    dist.append(["n", f"{N.n_cycles:,}", f"{A.n_cycles:,}", f"{A.n_cycles - N.n_cycles:+,}", "-"])

    details = [_detail_cells(c, r, i + 1) for i, r in enumerate(c.details[:top])]
    context = []
    for r in c.context:
        res = r.res
        name = md_escape(r.metric) + (f" (= {md_escape(', '.join(r.aliases))})" if r.aliases else "")
        d, pct = _change(res.mean_n, res.mean_a)
        context.append([name, md_escape(r.device), md_escape(r.unit) or "—", fmt_num(res.mean_n),
                        fmt_num(res.mean_a), d, pct, fmt_z(res.z), fmt_z(r.z_log), fmt_p(res.p_welch),
                        fmt_p(res.p_mwu), fmt_p(r.q), f"{res.n_n}/{res.n_a}",
                        f"{fmt_num(r.median_interval_ms_n)}/{fmt_num(r.median_interval_ms_a)}"])
    shortened = sorted({c.functions[r.func].name for r in c.details[:top]
                        if shorten(c.functions[r.func].name, NAME_WIDTH) != " ".join(c.functions[r.func].name.split())
                        or c.functions[r.func].name != " ".join(c.functions[r.func].name.split())})
    untested = sorted((c.functions[i] for i in c.untested), key=lambda f: -(f.t_n_us + f.t_a_us))
    top_cause = next((f for f in findings if f.kind == "cause"), None)
    return {
        "version": __version__,
        "title_n": md_escape(N.name), "title_a": md_escape(A.name),
        "path_n": md_escape(N.path), "path_a": md_escape(A.path),
        "summary": summary, "dist": dist,
        "cycle_mwu": fmt_p(c.cycle_test.p_mwu), "cycle_ks": fmt_num(c.cycle_ks, 3),
        "cycles_csv": md_escape(cycles_csv) if cycles_csv else None,
        "overview": _overview(c, top_cause),
        "findings": [f.text for f in findings],
        "detail_header": DETAIL_HEADER, "details": details, "n_details": len(c.details), "top": top,
        "context_header": CONTEXT_HEADER, "context": context,
        "scope_func": sorted(md_escape(k) for k, v in c.scope.items() if v == "func"),
        "untested": [f"{md_name(f.name, 60)} ({md_escape(f.device)}, {fmt_time_us(max(f.t_n_us, f.t_a_us))}/cycle)"
                     for f in untested[:15]],
        "n_untested": len(untested),
        "constants": [md_escape(x) for x in c.constants],
        "full_names": [html_code(n) for n in shortened],
        "quality": _quality(c),
        "comparability": [md_escape(x) for x in c.comparability],
        "renames": [f"{md_name(a, 80)} (normal) ⇄ {md_name(b, 80)} (abnormal)" for a, b in c.renames],
        "warnings": [md_escape(x) for x in c.warnings],
        "alpha": f"{c.alpha:g}",
    }


def _overview(c: Comparison, top: Finding | None) -> str:
    N, A = c.normal, c.abnormal
    rel = 100.0 * (A.median_us - N.median_us) / N.median_us if N.median_us else float("nan")
    s = (f"**{md_escape(A.name)}** (abnormal) against **{md_escape(N.name)}** (normal): median cycle "
         f"{fmt_time_us(N.median_us)} → {fmt_time_us(A.median_us)} ({fmt_pct(rel, 1)}), "
         f"{N.n_cycles} vs {A.n_cycles} cycles.")
    if top is not None and top.function is not None:
        s += (f" The change is led by **{md_name(top.function, 80)}** on {md_escape(top.device or '')}, "
              f"whose own-time change accounts for {fmt_signed(top.values.get('tau_pp'))} pp of the abnormal cycle.")
    else:
        s += " No function's own time changed significantly in the direction of the cycle-time change."
    return s


def _quality(c: Comparison) -> list[list[str]]:
    rows = []
    for label, r in (("normal", c.normal), ("abnormal", c.abnormal)):
        rows.append([label, md_escape(r.name), md_escape(r.status), md_escape(r.cycle_source),
                     md_escape(r.cycle_detail), str(r.dropped_cycles),
                     md_escape("; ".join(r.notes)) or "—"])
    return rows


def render_markdown(c: Comparison, findings: list[Finding], manifests: tuple[dict, dict], *,
                    top: int = 25, cycles_csv: str | None = None) -> str:
    """The Markdown report."""
    view = build_view(c, findings, top=top, cycles_csv=cycles_csv)
    view["collection"] = [_manifest_view(label, m) for label, m in zip(("normal", "abnormal"), manifests, strict=True)]
    return _env().get_template("report.md.j2").render(**view)


def _manifest_view(label: str, m: dict) -> dict[str, Any]:
    src = m.get("source") or {}
    collectors = m.get("collectors") or []
    unsupported = m.get("unsupported") or []
    dropped = m.get("dropped") or {}
    return {
        "label": label,
        "source": md_escape(str(src.get("kind", "unknown"))),
        "collectors": md_escape(", ".join(
            f"{x.get('name', '?')}" + (f" @ {x['interval_ns'] / 1e6:g} ms" if x.get("interval_ns") else "")
            for x in collectors if isinstance(x, dict))) or "—",
        "unsupported": [f"{md_escape(str(u.get('metric')))} on {md_escape(str(u.get('device')))}: "
                        f"{md_escape(str(u.get('reason')))}" for u in unsupported if isinstance(u, dict)],
        "dropped": [f"{md_escape(str(k))}: {md_escape(str(v))}" for k, v in dropped.items()],
        "gpus": md_escape(", ".join(str(g.get("name", "?")) for g in (m.get("gpus") or []) if isinstance(g, dict))) or "—",
    }


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy → Python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_clean(v) for v in x.tolist()]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _two(res: Any) -> dict[str, Any] | None:
    if res is None:
        return None
    return {k: getattr(res, k) for k in res.__dataclass_fields__}


def to_json(c: Comparison, findings: list[Finding]) -> dict[str, Any]:
    """Every number the report shows (unrounded), plus the findings' text."""
    def run(r: Any) -> dict[str, Any]:
        return {k: getattr(r, k) for k in ("name", "path", "n_cycles", "cycle_source", "cycle_detail",
                                           "dropped_cycles", "mean_us", "median_us", "p95_us", "traced_s",
                                           "status", "notes")}
    funcs = []
    for f in c.functions:
        d = {k: getattr(f, k) for k in f.__dataclass_fields__ if k not in ("t", "beta")}
        d["t_test"] = _two(f.t)
        d["beta_test"] = _two(f.beta)
        funcs.append(d)
    details = []
    for r in c.details:
        f = c.functions[r.func]
        row: dict[str, Any] = {"function": f.name, "device": f.device, "kind": f.kind, "score": r.score,
                               "legacy_score": r.legacy_score, "function_index": r.func}
        if r.mu is not None:
            m = c.mu[r.mu]
            row.update({"metric": m.metric, "unit": m.unit, "mu_test": _two(m.res), "z_log_mu": m.z_log, "q_mu": m.q,
                        "mu_fragile": m.fragile})
        else:
            row["metric"] = None
        details.append(row)
    ctx = [{"metric": r.metric, "device": r.device, "unit": r.unit, "test": _two(r.res), "z_log_mu": r.z_log,
            "q_mu": r.q, "aliases": r.aliases, "fragile": r.fragile,
            "median_interval_ms_n": r.median_interval_ms_n, "median_interval_ms_a": r.median_interval_ms_a}
           for r in c.context]
    return _clean({
        "perfdiff_version": __version__, "alpha": c.alpha,
        "normal": run(c.normal), "abnormal": run(c.abnormal),
        "cycle_test": _two(c.cycle_test), "cycle_ks_d": c.cycle_ks,
        "quantiles": {"normal": c.quantiles_n, "abnormal": c.quantiles_a},
        "findings": [{"kind": f.kind, "text": f.text, "function": f.function, "device": f.device, "q": f.q,
                      "values": f.values} for f in findings],
        "functions": funcs, "details": details, "context": ctx,
        "common_mode": [vars(cm) for cm in c.common_modes],
        "constants": c.constants, "aliases": c.aliases, "scope": c.scope,
        "comparability": c.comparability, "warnings": c.warnings, "renames": c.renames,
        "untested": [c.functions[i].name for i in c.untested],
        "n_tests": c.n_tests_t, "min_attainable_p": c.min_p, "cycles_needed": c.cycles_needed,
    })


def cycles_csv(dur_n_ns: np.ndarray, dur_a_ns: np.ndarray) -> bytes:
    """The CSV beside the report: both runs' cycle durations (µs), rank by rank, slowest first;
    the shorter run's column ends in empty cells.  Pure numpy and Arrow, which release the GIL:
    `perfdiff compare` builds it in a thread beside the comparison."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    dn = (np.sort(dur_n_ns)[::-1].astype(np.float64) / 1e3).round(3)
    da = (np.sort(dur_a_ns)[::-1].astype(np.float64) / 1e3).round(3)
    k = max(len(dn), len(da))

    def padded(x: np.ndarray) -> pa.Array:
        return pa.array(np.concatenate([x, np.full(k - len(x), np.nan)]), mask=np.arange(k) >= len(x))

    table = pa.table({"rank": np.arange(1, k + 1), "normal_us": padded(dn), "abnormal_us": padded(da)})
    sink = pa.BufferOutputStream()
    sink.write(b"rank,normal_us,abnormal_us\n")
    # Arrow writes a million rows in C++; strings built in Python took seconds.
    pacsv.write_csv(table, sink, pacsv.WriteOptions(quoting_style="none", include_header=False))
    return sink.getvalue().to_pybytes()


__all__ = ["render_markdown", "to_json", "cycles_csv", "build_view", "fmt_time_us", "fmt_value"]
