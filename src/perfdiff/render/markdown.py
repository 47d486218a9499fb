"""The Markdown report: `build_view` turns an Analysis and its findings into display strings
(every rounding and escape happens here, in perfdiff.render.text and .wording); the Jinja2
template (templates/report.md.j2) only lays them out and does no arithmetic.
"""
from __future__ import annotations

import functools
import math
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2

from perfdiff.version import __version__
from perfdiff.analyze.evidence import CauseEvidence, Finding, FindingCode
from perfdiff.analyze.records import Analysis, CategoryRow, CycleBase, DetailRow, FunctionStats
from perfdiff.analyze.result import ComparisonResult
from perfdiff.analyze.verdict_records import VerdictClass
from perfdiff.render.cycles_words import run_cycle_detail
from perfdiff.render.gate import gate_section
from perfdiff.render.totals import (TOTALS_CLASSES, is_totals, rejected_text, subcycles_text, totals_head, totals_lines,
                                   totals_text)
from perfdiff.render.tree import TreeLabels, tree_section
from perfdiff.render.wording import (CATEGORY_WORDS, categories_intro, categories_rest, device_plans_text,
                                     finding_text, matching_text,
                                     notice_text, per_unit, plan_text, tau_cycle, test_name,
                                     unchecked_note, verdict_head, verdict_lines)
from perfdiff.render.text import (NA, NameTable, fmt_beta, fmt_calls, fmt_num, fmt_p, fmt_pct, fmt_score,
                                  fmt_signed, fmt_signed_time, fmt_time_us, fmt_z, md_escape, shorten)

NAME_WIDTH = 96
QUANTILE_ROWS = ("min", "P5", "P10", "P25", "P50", "P75", "P90", "P95", "P99", "max", "mean", "sd")


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    root = resources.files("perfdiff.templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    return env


def gpu_list(gpus: object) -> str:
    """A manifest's GPUs by name, identical ones collapsed: "8 × A100-SXM4-80GB, 1 × T4"."""
    counts: dict[str, int] = {}
    for g in gpus if isinstance(gpus, list) else []:
        if isinstance(g, dict):
            name = str(g.get("name", "?"))
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{n} × {name}" for name, n in counts.items())


def _change(n: float, a: float) -> tuple[str, str]:
    d = a - n
    pct = 100.0 * d / n if n else float("nan")
    return fmt_signed(d), fmt_pct(pct)


def _flags(f: FunctionStats, with_cycle: bool = False) -> str:
    out = []
    if f.presence != "both":
        out.append(f.presence)
    if f.wait:
        out.append("wait")
    if f.host_state:  # summed over the target's threads, shown per thread
        out.append("per thread")
    if with_cycle:
        out.append("with the cycle")
    if f.fragile:
        out.append("fragile")
    return ", ".join(out)


def _n(res: Any) -> str:
    return f"{res.n_n}/{res.n_a}" if res is not None else NA


def _detail_cells(c: Analysis, row: DetailRow, rank: int, short: dict[str, str], with_cycle: set[int]) -> list[str]:
    f = c.functions[row.func]
    m = c.mu[row.mu] if row.mu is not None else None
    t, b = f.t, f.beta
    cells = [
        str(rank), md_escape(short[f.name]), md_escape(f.device),
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
    cells += [_n(t), fmt_num(t.cliffs_delta if t else None),
              ", ".join(x for x in (_flags(f, row.func in with_cycle), "μ fragile" if m and m.fragile else "") if x)]
    return cells


TOP_ROWS = 10
TOP_NAME_WIDTH = 60
TAU_HEADER = "τ (pp)"  # said with the cycle it is a share of (tau_header)
TOP_HEADER = ["#", "Function", "Device", TAU_HEADER, "own time N → A", "per call N → A", "calls N → A", "q(t)",
              "Cliff's δ", "flags"]


def _top(c: Analysis) -> list[DetailRow]:
    """The first TOP_ROWS functions of the detailed table, each once (the table may pair one
    function with several metrics)."""
    seen, out = set(), []
    for r in c.details:
        if r.func not in seen:
            seen.add(r.func)
            out.append(r)
        if len(out) == TOP_ROWS:
            break
    return out


def _top_cells(c: Analysis, row: DetailRow, rank: int, short: dict[str, str], with_cycle: set[int]) -> list[str]:
    """A row of the first screen's table: ten columns, names shortened, times in their unit;
    `with_cycle`: the functions that grew with the cycle alone (the proportional finding)."""
    f = c.functions[row.func]
    calls = "—" if f.sampled else f"{fmt_calls(f.calls_n)} → {fmt_calls(f.calls_a)}"
    per_call = "—" if f.sampled else f"{fmt_time_us(f.per_call_n_us)} → {fmt_time_us(f.per_call_a_us)}"
    return [str(rank), md_escape(short[f.name]), md_escape(f.device), fmt_signed(f.tau_pp),
            f"{fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}", per_call, calls, fmt_p(f.q_t),
            fmt_num(f.t.cliffs_delta if f.t else None), _flags(f, row.func in with_cycle)]


DETAIL_HEADER = [
    "#", "Function Name", "Device", "Metric Name", "Suspicion Score", TAU_HEADER, "t_N → t_A (µs/cycle)",
    "Z(t)", "q(t)", "β_N(%)", "β_A(%)", "Δβ(pp)", "Z-Score(β)", "p-value(β)", "U-test p(β)", "q(β)",
    "calls/cycle N → A", "µs/call N → A", "μ_N", "μ_A", "Δμ", "Z-Score(μ)", "Z-Score(log_μ)",
    "p-value(μ)", "U-test p(μ)", "q(μ)", "n_N/n_A", "Cliff's δ(t)", "flags",
]
CONTEXT_HEADER = ["Metric Name", "Device", "Unit", "μ_N", "μ_A", "Δμ", "Change (%)", "Z-Score(μ)",
                  "Z-Score(log_μ)", "p-value(μ)", "U-test p(μ)", "q(μ)", "n_N/n_A (samples)",
                  "interval N/A (ms)"]


CATEGORY_HEADER = ["Category", "GPU time N → A", "share N → A", "Δ", "calls N → A", "functions N → A"]


def tau_header(c: Analysis) -> str:
    """The τ column's header, naming the cycle τ is a share of: "τ (pp of A cycle)"."""
    return f"τ (pp of {'N' if c.tau_base == CycleBase.NORMAL else 'A'} cycle)"


def categories_place(c: Analysis) -> str | None:
    """Where the report shows the op-category table: "first" (the first screen) when the runs'
    GPUs differ or more than `categories_first_share` of the GPU time is in rows new or
    vanished; "body" when some is; None when every GPU row matches (or there is no table)."""
    share = c.unmatched_gpu_share
    if not c.categories:
        return None
    if c.hardware_differs or (math.isfinite(share) and share > c.thresholds.categories_first_share):
        return "first"
    return "body" if math.isfinite(share) and share > 0 else None


def _category_cells(c: Analysis, rows: tuple[CategoryRow, ...] | list[CategoryRow]) -> list[list[str]]:
    """The op-category table's rows, in the order of the categories, the empty ones left out."""
    return [[CATEGORY_WORDS[r.category], f"{fmt_time_us(r.t_n_us)} → {fmt_time_us(r.t_a_us)}",
             f"{fmt_num(r.share_n_pct, 1)} → {fmt_num(r.share_a_pct, 1)} %", fmt_signed_time(r.d_us),
             f"{fmt_calls(r.calls_n)} → {fmt_calls(r.calls_a)}", f"{r.functions_n} → {r.functions_a}"]
            for r in rows]


FIRST_CATEGORY_ROWS = 5  # categories on the first screen: the largest changes; all of them in section 1


def _first_categories(c: Analysis) -> list[CategoryRow]:
    """The categories the first screen shows: the FIRST_CATEGORY_ROWS largest |Δ|, in their order."""
    keep = sorted(c.categories, key=lambda r: -abs(r.d_us))[:FIRST_CATEGORY_ROWS]
    return [r for r in c.categories if r in keep]


def build_view(c: Analysis, findings: list[Finding], verdict: list[VerdictClass], *, top: int = 25,
               cycles_csv: str | None = None) -> dict[str, Any]:
    """Everything the template prints, as strings; the functions' names apart from one another
    in every table and sentence (one NameTable of every name the report shows)."""
    return _view(c, findings, verdict, NameTable(report_names(c)), top=top, cycles_csv=cycles_csv)


def report_names(c: Analysis) -> list[str]:
    """Every name the report of `c` shows: its functions, both names of each rename, and the
    range or kernel named in the plan (and in its plan of each GPU)."""
    plans = [c.plan, *(d.plan for d in c.plan.devices)] if c.plan is not None else []
    return [f.name for f in c.functions] + [n for pair in c.renames for n in pair] + [p.name for p in plans if p.name]


def _view(c: Analysis, findings: list[Finding], verdict: list[VerdictClass], names: NameTable, *, top: int,
          cycles_csv: str | None) -> dict[str, Any]:
    N, A = c.normal, c.abnormal
    summary = []
    summary.append(["Total Cycles", f"{N.n_cycles:,}", f"{A.n_cycles:,}", f"{A.n_cycles - N.n_cycles:+,}", "-"])
    # One cycle a run (one step, or the whole run compared by totals): its mean, median and P95
    # are one number, said once.
    times = ((("Cycle Time (one per run)", N.mean_us, A.mean_us),) if N.n_cycles == A.n_cycles == 1 else
             (("Avg Cycle Time", N.mean_us, A.mean_us), ("Median Cycle Time", N.median_us, A.median_us),
              ("P95 Cycle Time", N.p95_us, A.p95_us)))
    # Several GPUs at work: each one's time per cycle, so that none hides behind another's rows.
    gpus = tuple((f"{d.device} time per cycle", d.t_n_us, d.t_a_us) for d in c.devices) if len(c.devices) > 1 else ()
    for label, vn, va in (*times, ("Traced Time", N.traced_s * 1e6, A.traced_s * 1e6), *gpus):  # µs, best unit each
        d, pct = _change(float(vn), float(va))
        summary.append([md_escape(label), fmt_time_us(vn), fmt_time_us(va), fmt_signed_time(va - vn), pct])
    dist = []
    for q in QUANTILE_ROWS:
        vn, va = c.quantiles_n[q], c.quantiles_a[q]
        d, pct = _change(vn, va)
        dist.append([q, fmt_num(vn), fmt_num(va), d, pct if q != "sd" else "-"])
    dist.append(["n", f"{N.n_cycles:,}", f"{A.n_cycles:,}", f"{A.n_cycles - N.n_cycles:+,}", "-"])

    shown = c.details[:top]
    short = {c.functions[r.func].name: names.short(c.functions[r.func].name, NAME_WIDTH) for r in shown}
    with_cycle = {i for x in findings if x.code == FindingCode.PROPORTIONAL for i in x.related}
    details = [_detail_cells(c, r, i + 1, short, with_cycle) for i, r in enumerate(shown)]
    top_rows = _top(c)
    short_top = {c.functions[r.func].name: names.short(c.functions[r.func].name, TOP_NAME_WIDTH) for r in top_rows}
    context = []
    for r in c.context:
        res = r.res
        name = md_escape(r.metric) + (f" (= {md_escape(', '.join(r.aliases))})" if r.aliases else "")
        d, pct = _change(res.mean_n, res.mean_a)
        context.append([name, md_escape(r.device), md_escape(r.unit) or "—", fmt_num(res.mean_n),
                        fmt_num(res.mean_a), d, pct, fmt_z(res.z), fmt_z(r.z_log), fmt_p(res.p_welch),
                        fmt_p(res.p_mwu), fmt_p(r.q), f"{res.n_n}/{res.n_a}",
                        f"{fmt_num(r.median_interval_ms_n)}/{fmt_num(r.median_interval_ms_a)}"])
    untested = sorted((c.functions[i] for i in c.untested), key=lambda f: -(f.t_n_us + f.t_a_us))
    top_cause = next((f for f in findings if f.code == FindingCode.CAUSE), None)
    header = [h.replace("U-test p(β)", "signed-rank p(β)") for h in DETAIL_HEADER] if c.matched else DETAIL_HEADER
    header = [tau_header(c) if h == TAU_HEADER else h for h in header]
    view = {
        "version": __version__,
        "title_n": md_escape(N.name), "title_a": md_escape(A.name),
        "path_n": md_escape(N.path), "path_a": md_escape(A.path),
        "summary": summary, "dist": dist,
        "cycle_mwu": fmt_p(c.cycle_test.p_mwu), "cycle_ks": fmt_num(c.cycle_ks, 3),
        "cycles_csv": md_escape(cycles_csv) if cycles_csv else None,
        "overview": (finding_text(c, findings[0], names) if findings and findings[0].code == FindingCode.IDENTICAL
                     else _overview(c, top_cause, names)),
        "plan": "\n\n".join(x for x in ("\n".join(x for x in (subcycles_text(c), totals_text(c) if is_totals(c)
                                                               else plan_text(c.plan, names), rejected_text(c.plan))
                                                     if x), device_plans_text(c.plan, names)) if x),
        "verdict": _verdict(c, verdict, findings, names),
        "verdict_head": totals_head(c, findings) if is_totals(c) else verdict_head(c, findings),
        "top_header": [tau_header(c) if h == TAU_HEADER else h for h in TOP_HEADER],
        "top_rows": [_top_cells(c, r, i + 1, short_top, with_cycle) for i, r in enumerate(top_rows)],
        "per": per_unit(c),
        "short_path_n": md_escape(shorten(N.path, 60)), "short_path_a": md_escape(shorten(A.path, 60)),
        "matching": matching_text(c),
        "cycle_test_name": test_name(c.matched),
        "findings": [finding_text(c, f, names) for f in findings],
        "detail_header": header, "details": details, "n_details": len(c.details), "top": top,
        "context_header": CONTEXT_HEADER, "context": context,
        "scope_func": sorted(md_escape(k) for k, v in c.scope.items() if v == "func"),
        "untested": [f"{names.md(f.name, 60)} ({md_escape(f.device)}, {fmt_time_us(max(f.t_n_us, f.t_a_us))}/cycle)"
                     for f in untested[:15]],
        "n_untested": len(untested),
        "constants": [md_escape(x) for x in c.constants],
        "quality": _quality(c),
        "comparability": [notice_text(x) for x in c.comparability],
        "renames": [f"{names.md(a, 80)} (normal) ⇄ {names.md(b, 80)} (abnormal)" for a, b in c.renames],
        "warnings": [notice_text(x) for x in c.warnings],
        "alpha": f"{c.alpha:g}",
        "test_min_share_pct": f"{100.0 * c.thresholds.test_min_share:g}",
    }
    place = categories_place(c)
    view["categories_place"] = place
    view["categories_intro"] = categories_intro(c, place == "first") if place else ""
    view["category_header"] = CATEGORY_HEADER
    first = _first_categories(c) if place == "first" else []
    view["first_categories"] = _category_cells(c, first)
    view["first_categories_rest"] = categories_rest(len(c.categories) - len(first)) if first else ""
    # Section 1 holds the whole table when the first screen has none or only part of it.
    whole = place == "body" or (place == "first" and len(first) < len(c.categories))
    view["categories"] = _category_cells(c, c.categories) if whole else []
    view["full_names"] = names.full()  # last: every name shortened above
    return view


def _verdict(c: Analysis, verdict: list[VerdictClass], findings: list[Finding], names: NameTable) -> list[str]:
    """The verdict's lines: its classes; for a pair compared by totals, the classes that rest on
    no cycle (other hardware) and then the totals' own lines (per-call changes, vanished, new)."""
    if not is_totals(c):
        return verdict_lines(c, verdict, findings, names)
    classes = [v for v in verdict if v.code in TOTALS_CLASSES]
    lines = verdict_lines(c, classes, findings, names) + totals_lines(c, findings, names)
    return lines or [f"no function is slower or faster per call at q ≤ {c.alpha:g}, and none vanished or is new; "
                     "totals are in the tables below"]


def _overview(c: Analysis, top: Finding | None, names: NameTable) -> str:
    N, A = c.normal, c.abnormal
    rel = 100.0 * (A.median_us - N.median_us) / N.median_us if N.median_us else float("nan")
    s = (f"**{md_escape(A.name)}** (abnormal) against **{md_escape(N.name)}** (normal): median cycle "
         f"{fmt_time_us(N.median_us)} → {fmt_time_us(A.median_us)} ({fmt_pct(rel, 1)}), "
         f"{N.n_cycles} vs {A.n_cycles} cycles.")
    if top is not None and top.function is not None:
        s += (f" The change is led by **{names.md(top.function, 80)}** on {md_escape(top.device or '')}, "
              f"whose own-time change accounts for {fmt_signed(_cause_tau(top))} pp of {tau_cycle(c)}.")
    else:
        s += " No function's own time changed significantly in the direction of the cycle-time change."
    if c.comparability:
        s += (" The runs are not like for like (see the top of this report): the change may come from those "
              "differences rather than from the functions named.")
    return s


def _cause_tau(x: Finding) -> float | None:
    """A cause's τ (pp) as its finding states it (at the common load where the load differed)."""
    return x.evidence.tau_pp if isinstance(x.evidence, CauseEvidence) else None


def _quality(c: Analysis) -> list[list[str]]:
    rows = []
    for label, r in (("normal", c.normal), ("abnormal", c.abnormal)):
        rows.append([label, md_escape(r.name), md_escape(r.status), md_escape(r.cycle_source),
                     md_escape(run_cycle_detail(r)), str(r.dropped_cycles),
                     md_escape("; ".join(r.notes)) or "—"])
    return rows


PLOT_TITLES = {"cycles": "cycle-time distribution", "timeline": "cycle time, cycle by cycle",
               "suspects": "top suspects", "context": "changed metrics"}


def render_markdown(result: ComparisonResult, *, top: int = 25, cycles_csv: str | None = None,
                    plots: list[str] | None = None, plots_note: str | None = None,
                    section: str | None = None) -> str:
    """The Markdown report of `result`; `top`: rows of the detailed table; `cycles_csv`: the
    cycles CSV beside it, to name; `plots`: picture files beside it, linked by relative path;
    `plots_note`: why there are none.  `section`: the report as a section of a larger one (the
    process-by-process report), under this heading line: its own headings a level down, no
    title, no header and no legend (the larger report has them)."""
    c, findings, verdict, manifests, tree = (result.analysis, list(result.findings), list(result.verdict),
                                             result.manifests, result.tree)
    view = build_view(c, findings, verdict, top=top, cycles_csv=cycles_csv)
    view["range_tree"] = (tree_section(tree, TreeLabels(c.normal.name, c.abnormal.name, c.normal.path,
                                                        c.abnormal.path, run_cycle_detail(c.normal)))
                          if tree is not None else None)
    # A link's target percent-encoded: "#" would start a fragment, "(" ")" end the link.
    view["plots"] = [(PLOT_TITLES.get(p.rsplit(".", 2)[-2], p), quote(p)) for p in plots or []]
    view["plots_note"] = md_escape(plots_note) if plots_note else None
    view["collection"] = [_manifest_view(label, m) for label, m in zip(("normal", "abnormal"), manifests, strict=True)]
    view["dist_n"], view["dist_a"] = (_distributed(m) for m in manifests)
    view["gate"] = gate_section(result.gate) if result.gate is not None else ""
    view["section"], view["sub"], view["legend"] = section, "#" if section else "", section is None
    return _env().get_template("report.md.j2").render(**view)


def verdict_block(result: ComparisonResult) -> tuple[str, list[str], str]:
    """(the verdict's head, its lines, what its † marks) as the report of `result` words them;
    the head without that note, which a report of several comparisons says once."""
    c, findings = result.analysis, list(result.findings)
    names = NameTable(report_names(c))
    head = totals_head(c, findings) if is_totals(c) else verdict_head(c, findings)
    note = unchecked_note(findings)
    return head.removesuffix(note), _verdict(c, list(result.verdict), findings, names), note


def legend_markdown(alpha: float) -> str:
    """The report's legend (its items, no heading) for significance level `alpha`."""
    return _env().get_template("legend.md.j2").render(alpha=f"{alpha:g}")


def _distributed(m: dict) -> str:
    """", rank r of w" for a run of a distributed job (Kineto distributedInfo), else nothing."""
    d = (m.get("target") or {}).get("distributed") or {}
    if d.get("rank") is None and d.get("world_size") is None:
        return ""
    return f", rank {md_escape(str(d.get('rank', '?')))} of {md_escape(str(d.get('world_size', '?')))}"


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
        "gpus": md_escape(gpu_list(m.get("gpus"))) or "—",
    }


