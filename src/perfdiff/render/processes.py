"""The process-by-process report (perfdiff.ranks.processes.ProcessReport): the processes of
each run with their roles, a verdict line per process, the table of processes, then each
pair's own comparison as a section of the report (perfdiff.render.markdown, a level down);
and its JSON twin.  Only words, rounds and escapes."""
from __future__ import annotations

from typing import Any

from perfdiff.model import codec
from perfdiff.ranks.identity import NotRanks
from perfdiff.ranks.processes import ExportProcess, PairCode, ProcessPair, ProcessReport, ProcessRole
from perfdiff.render.json_report import to_json
from perfdiff.render.markdown import legend_markdown, render_markdown, verdict_block
from perfdiff.render.text import fmt_pct, fmt_time_us, md_escape, shorten
from perfdiff.render.wording import verdict_word
from perfdiff.version import __version__

__all__ = ["PROCESSES_FORMAT", "PROCESSES_FORMAT_VERSION", "pair_title", "process_json", "process_markdown",
           "role_text"]

PROCESSES_FORMAT = "perfdiff-process-comparison"
PROCESSES_FORMAT_VERSION = 1
VERDICT_ITEMS = 3  # a changed process's verdict classes on the first screen


def _gpus(gpus: tuple[int, ...]) -> str:
    """"GPU 0", "GPUs 0, 1", or "no GPU named"."""
    if not gpus:
        return "no GPU named"
    return f"GPU {gpus[0]}" if len(gpus) == 1 else "GPUs " + ", ".join(str(g) for g in gpus)


def role_text(p: ExportProcess) -> str:
    """A process's role in words: "GPU worker on GPU 0", "little GPU work, on GPU 0" …"""
    if p.role is ProcessRole.WORKER:
        return f"GPU worker on {_gpus(p.gpus)}"
    if p.role is ProcessRole.SHARING:
        return f"shares {_gpus(p.gpus)} with a busier process"
    if p.role is ProcessRole.LIGHT:
        return f"little GPU work, on {_gpus(p.gpus)}"
    return "CUDA calls, no GPU work"


def _role(pair: ProcessPair) -> str:
    """The pair's role: the normal process's, "A → B" where the abnormal one's differs."""
    n, a = pair.normal, pair.abnormal
    if n is None or a is None:
        return role_text(n or a)  # type: ignore[arg-type]
    rn, ra = role_text(n), role_text(a)
    return rn if rn == ra else f"{rn} → {ra}"


def _who(pair: ProcessPair) -> str:
    """"python3, pid 3000 → 3001" (one pid where the process is in one run only)."""
    n, a = pair.normal, pair.abnormal
    name = next((x.name for x in (n, a) if x is not None and x.name), "")
    pids = " → ".join(str(x.pid) if x is not None else "—" for x in (n, a)) if n and a else \
        str((n or a).pid)  # type: ignore[union-attr]
    return f"{md_escape(name)}, pid {pids}" if name else f"pid {pids}"


def pair_title(pair: ProcessPair) -> str:
    """"P2 · GPU worker on GPU 1 (python3, pid 3001 → 3001)"."""
    return f"P{pair.label} · {_role(pair)} ({_who(pair)})"


def _why_not_ranks(report: ProcessReport) -> str:
    """Why the processes are compared one by one and not as ranks: the rule that failed in
    each run (ProcessReport.not_ranks), said once where both runs fail the same one."""
    said = {x for x in report.not_ranks if x is not None}
    if len(said) == 2:
        n, a = (_not_ranks_text(report, x) for x in report.not_ranks)
        return f"in the normal run {n}; in the abnormal run {a}"
    return _not_ranks_text(report, next(iter(said), None))


def _not_ranks_text(report: ProcessReport, why: NotRanks | None) -> str:
    procs = [x for p in report.pairs for x in (p.normal, p.abnormal) if x is not None
             and x.role is not ProcessRole.NO_GPU_WORK]
    shared = sorted({g for x in procs if x.shares_with for g in x.gpus})
    if why is NotRanks.SEVERAL_GPUS:
        several = sorted({(x.pid, x.gpus) for x in procs if len(x.gpus) > 1})
        which = "; ".join(f"pid {pid} drives {_gpus(gpus)}" for pid, gpus in several[:3])
        return f"a process drives several GPUs ({which}), where a rank drives one" if which else \
            "a process drives several GPUs, where a rank drives one"
    if why is NotRanks.NO_COLLECTIVES:
        return ("each drives a GPU of its own, but not every one of them ran a collective (NCCL) kernel, and no "
                "launcher numbered them")
    if why is NotRanks.SEPARATE_COMMUNICATORS:
        return ("each drives a GPU of its own and runs collectives, but NCCL names no communicator they all share, "
                "and no launcher numbered them")
    if shared:  # SHARED_GPU, and where the export did not say (an older report, a reader's error)
        return f"they share {_gpus(tuple(shared))}, as a server and its workers do"
    return "each drives GPUs of its own, but they share no NCCL communicator and no launcher numbered them"


def _elsewhere(pair: ProcessPair, report: ProcessReport) -> str:
    """For a process of one run only: the compared processes of its run it shares a GPU with."""
    x = pair.normal or pair.abnormal
    side = 0 if pair.normal is not None else 1
    if x is None or not x.gpus:
        return ""
    with_it = [p for p in report.compared if (p.normal, p.abnormal)[side] is not None
               and set((p.normal, p.abnormal)[side].gpus) & set(x.gpus)]  # type: ignore[union-attr]
    return f", where P{with_it[0].label} works too" if len(with_it) == 1 else (
        ", where " + ", ".join(f"P{p.label}" for p in with_it) + " work too" if with_it else "")


def _line(pair: ProcessPair, report: ProcessReport) -> list[str]:
    """A pair's lines of the verdict: its title, what its comparison found (the first
    VERDICT_ITEMS classes of a change, as sub-items), or why it was not compared."""
    title = pair_title(pair)
    if pair.code is PairCode.COMPARED and pair.label in report.results:
        head, lines, _ = verdict_block(report.results[pair.label])
        if pair.changed:
            more = len(lines) - VERDICT_ITEMS
            items = [f"  - {x}" for x in lines[:VERDICT_ITEMS]]
            items += [f"  - and {more} more class{'es' if more != 1 else ''} in its section."] if more > 0 else []
            return [f"- **{title}**: {head}" if head else f"- **{title}**:", *items]
        return [f"- {title}: no material change" + (f"; {head[0].lower()}{head[1:]}" if head else ".")]
    if pair.code is PairCode.NOT_COMPARED:
        return [f"- {title}: not compared: {md_escape(pair.reason)}."]
    if pair.code is PairCode.NO_GPU_WORK:
        return [f"- {title}: no GPU work in either run, nothing to compare."]
    x = pair.normal or pair.abnormal
    run, other = ("normal", "abnormal") if pair.code is PairCode.NORMAL_ONLY else ("abnormal", "normal")
    work = f"{x.activities:,} GPU activities on {_gpus(x.gpus)}" if x and x.activities else "no GPU work"
    return [f"- {'**' if run == 'abnormal' and x and x.activities else ''}{title}"
            f"{'**' if run == 'abnormal' and x and x.activities else ''}: in the {run} run only ({work}"
            f"{_elsewhere(pair, report)}); no process of the {other} run launches its kernels."]


def _head(report: ProcessReport) -> str:
    """The verdict's first line: how many of the processes compared changed, which."""
    compared = report.compared
    changed = [p for p in compared if p.changed]
    only_a = [p for p in report.pairs if p.code is PairCode.ABNORMAL_ONLY and p.abnormal and p.abnormal.activities]
    new = (f" The abnormal run has {len(only_a)} process{'es' if len(only_a) != 1 else ''} with GPU work that the "
           "normal run does not." if only_a else "")
    if not changed:
        return f"no material change in any of the {len(compared)} processes compared.{new}"
    which = ", ".join(f"P{p.label}" for p in changed) + (" (the largest change first)" if len(changed) > 1 else "")
    return f"{len(changed)} of the {len(compared)} processes compared changed: {which}.{new}"


TABLE_HEADER = ["", "Process", "Role", "GPU activities N → A", "Kernels in common", "Cycles N → A",
                "Median cycle N → A", "Change", "Verdict"]


def _row(pair: ProcessPair, report: ProcessReport) -> list[str]:
    n, a = pair.normal, pair.abnormal
    acts = " → ".join(f"{x.activities:,}" if x is not None else "—" for x in (n, a))
    common = fmt_pct(100.0 * pair.kernels_in_common, 0).lstrip("+") if n and a and n.activities else "—"
    if pair.code is PairCode.COMPARED and pair.label in report.results:
        r = report.results[pair.label]
        c = r.analysis
        cycles = f"{c.normal.n_cycles:,} → {c.abnormal.n_cycles:,} ({md_escape(c.normal.cycle_source)})"
        median = f"{fmt_time_us(c.normal.median_us)} → {fmt_time_us(c.abnormal.median_us)}"
        classes = [verdict_word(v) for v in r.verdict]
        verdict = ", ".join(dict.fromkeys(classes)) or "—"
        return [f"P{pair.label}", _who(pair), _role(pair), acts, common, cycles, median,
                fmt_pct(pair.cycle_change_pct, 1), verdict]
    what = {PairCode.NOT_COMPARED: "not compared", PairCode.NO_GPU_WORK: "nothing to compare",
            PairCode.NORMAL_ONLY: "in the normal run only", PairCode.ABNORMAL_ONLY: "in the abnormal run only"}
    return [f"P{pair.label}", _who(pair), _role(pair), acts, common, "—", "—", "—", what[pair.code]]


def process_markdown(report: ProcessReport, *, top: int = 25, plots: dict[int, list[str]] | None = None,
                     cycles_csv: dict[int, str] | None = None) -> str:
    """The process-by-process report: the first screen (the processes, a verdict line each,
    the table), then each compared pair's comparison as its section, then the legend.
    `plots`, `cycles_csv`: per pair label, the files written beside the report."""
    compared = report.compared
    first = report.results[compared[0].label].analysis
    (n, pn), (a, pa) = ((md_escape(r.name), md_escape(shorten(r.path, 60))) for r in (first.normal, first.abnormal))
    lines = [f"# Process-by-Process Comparison: {n} (normal) vs {a} (abnormal)", "",
             f"*perfdiff {__version__}* · N = normal run **{n}** ({pn})", f"· A = abnormal run **{a}** ({pa})", "",
             f"Each run is one nsys export in which several processes ran GPU work, and they are not the ranks of one "
             f"job: {_why_not_ranks(report)}. Each process is compared with its counterpart in the other run, on "
             "cycles of its own (its section says how it was cut); processes are paired by the kernels they launch, "
             "then by their GPUs. `--pid` compares one process alone.", "",
             f"**Verdict:** {_head(report)}", ""]
    for p in report.pairs:
        lines += _line(p, report)
    notes = {verdict_block(report.results[p.label])[2] for p in compared if p.changed} - {""}
    lines += [f"\n{next(iter(notes)).strip()}"] if notes else []
    lines += ["", "## Processes", "", "| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines += ["| " + " | ".join(_row(p, report)) + " |" for p in sorted(report.pairs, key=lambda p: p.label)]
    lines += ["", "GPU activities: kernels, memcpys and memsets. Kernels in common: the share of the two processes' "
                  "kernel names that both launch."]
    out = "\n".join(lines) + "\n"
    for p in compared:
        section = render_markdown(report.results[p.label], top=top, section=f"## {pair_title(p)}",
                                  plots=(plots or {}).get(p.label, []),
                                  cycles_csv=(cycles_csv or {}).get(p.label))
        out += "\n" + section.rstrip("\n") + "\n"
    return out + "\n## Legend\n\n" + legend_markdown(report.alpha)


def process_json(report: ProcessReport) -> dict[str, Any]:
    """The report as JSON-ready data: the envelope, the runs' names, α, and per pair (in the
    report's order) its record (perfdiff.ranks.processes.ProcessPair) with `comparison`, the
    pair's whole comparison JSON (perfdiff.render.json_report; null where not compared)."""
    pairs = []
    for p in report.pairs:
        r = report.results.get(p.label)
        pairs.append({**codec.to_data(p), "comparison": to_json(r) if r is not None else None})
    return {"format": PROCESSES_FORMAT, "format_version": PROCESSES_FORMAT_VERSION, "perfdiff_version": __version__,
            "labels": list(report.labels), "alpha": report.alpha,
            "not_ranks": [x.value if x is not None else None for x in report.not_ranks], "pairs": pairs}
