"""`perfdiff compare NORMAL ABNORMAL`: the cross-comparison report (perfdiff.api.compare)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perfdiff.cli.common import add_trace_options, alpha, percent, positive_int, check_outputs, write_output
from perfdiff.errors import EXIT_GATE, InputError


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare, write the report (+ its cycles CSV, + JSON), and apply the --fail-on gate; runs
    of many ranks (directories of rank traces, or --ranks/--scheduler/--workers) go to
    cmd_compare_ranks."""
    from perfdiff.ranks import is_multi_rank

    report, cycles_csv = report_paths(args.output)
    check_outputs([args.normal, args.abnormal], [report or "-", cycles_csv, args.json, args.html])
    if args.ranks or args.scheduler or args.workers or is_multi_rank(args.normal) or is_multi_rank(args.abnormal):
        if args.html:
            raise InputError("--html writes the report of one pair of runs; runs of many ranks have the Markdown "
                             "report (-o) alone")
        return cmd_compare_ranks(args)
    from perfdiff.analyze import FindingCode, Thresholds
    from perfdiff.api import compare
    from perfdiff.parallel import keep_freed_memory

    keep_freed_memory()
    comp = compare(args.normal, args.abnormal, thresholds=Thresholds(alpha=args.alpha), cycle=args.cycle, window=args.window,
                   pid=args.pid, group=args.group, force=args.force)
    if comp.findings and comp.findings[0].code == FindingCode.IDENTICAL:
        print(f"perfdiff: identical inputs: {args.normal} and {args.abnormal} hold the same bytes", file=sys.stderr)
    write_report(comp, args, report, cycles_csv)
    if args.fail_on is not None:
        return _gate("median cycle time", comp.cycle_time_change_pct, comp.analysis.cycle_test.p_mwu, args)
    return 0


def write_report(comp: Any, args: argparse.Namespace, report: Path | None, cycles_csv: Path | None) -> None:
    """Write a comparison's report (Markdown to `report`, or stdout), its cycles CSV and
    pictures beside it, its JSON (`args.json`) and its HTML (`args.html`, one file, the
    pictures in it); `args.top`, `args.no_plots` as parsed."""
    if args.html:  # first: without markdown-it-py nothing is written (one line, exit 2)
        write_output(Path(args.html), comp.to_html(top=args.top, plots=not args.no_plots))
    if report is not None and cycles_csv is not None:
        plots, note = _plots(comp, report, args)
        write_output(report, comp.to_markdown(top=args.top, cycles_csv=cycles_csv.name, plots=plots, plots_note=note))
        write_output(cycles_csv, comp.cycles_csv())
    else:
        sys.stdout.write(comp.to_markdown(top=args.top))
    if args.json:
        write_output(Path(args.json), json.dumps(comp.to_json(), indent=1, allow_nan=False) + "\n")


def report_paths(output: str | None) -> tuple[Path | None, Path | None]:
    """(the report, the cycles CSV beside it) for `-o OUTPUT`; (None, None) for stdout."""
    report = Path(output) if output and output != "-" else None
    return report, (report.with_name(report.with_suffix("").name + ".cycles.csv") if report else None)


def _plots(comp: Any, out: Path, args: argparse.Namespace) -> tuple[list[str], str | None]:
    """The pictures written beside the report `out` (as its stem.*.png; its folder is known to
    exist, check_outputs), and why there are none where matplotlib is missing."""
    if args.no_plots:
        return [], None
    from perfdiff.render.plots import PlotsUnavailable

    try:
        return comp.write_plots(out.parent, out.with_suffix("").name), None
    except PlotsUnavailable as exc:
        return [], str(exc)


def _gate(what: str, grew: float, p: float, args: argparse.Namespace) -> int:
    """--fail-on: EXIT_GATE when `what` grew by at least PCT % and significantly (p ≤ α)."""
    if grew >= args.fail_on and p <= args.alpha:
        print(f"perfdiff: {what} grew {grew:.1f}% (≥ {args.fail_on:g}%, p {p:.2g})", file=sys.stderr)
        return EXIT_GATE
    return 0


def cmd_compare_ranks(args: argparse.Namespace) -> int:
    """Runs of many ranks (directories of rank traces): the multi-rank report (+ JSON), and the
    --fail-on gate on the job's cycle time (the median over ranks, per iteration)."""
    if args.pid is not None:
        raise InputError("--pid picks one process of a single trace; with runs of many ranks, say which ranks to "
                         "compare with --ranks")
    if args.scheduler is None:
        from perfdiff.ranks.fanout import warm_up

        warm_up()  # the local cluster's fork server imports beside this process's own imports, from now
    from perfdiff.api import compare_ranks

    comp = compare_ranks(args.normal, args.abnormal, alpha=args.alpha, cycle=args.cycle, window=args.window,
                         group=args.group, ranks=args.ranks, scheduler=args.scheduler, workers=args.workers,
                         progress=True)
    report = Path(args.output) if args.output and args.output != "-" else None
    if report is not None:
        plots, note = _plots(comp, report, args)
        write_output(report, comp.to_markdown(plots=plots, plots_note=note))
    else:
        sys.stdout.write(comp.to_markdown())
    if args.json:
        write_output(Path(args.json), json.dumps(comp.to_json(), indent=1, allow_nan=False) + "\n")
    if args.fail_on is not None:
        return _gate("median cycle time across ranks", comp.cycle_time_change_pct, comp.analysis.cycle.p, args)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two runs (bundles or traces) and write a report")
    p.add_argument("normal", help="the normal run: a bundle directory or a trace (.sqlite, .json[.gz], .nsys-rep)")
    p.add_argument("abnormal", help="the abnormal run")
    p.add_argument("-o", "--output", default=None, help="Markdown report path (default: stdout)")
    p.add_argument("--json", default=None, help="also write every number as JSON here")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also write the report as one self-contained HTML file here (pictures embedded)")
    p.add_argument("--alpha", type=alpha, default=0.05, help="false-discovery rate for 'significant' (0.05)")
    p.add_argument("--top", type=positive_int, default=25, help="rows of the detailed table (25)")
    p.add_argument("--cycle", default=None, metavar="REGEX",
                   help="cycles from marker ranges (or kernel launches) whose name matches REGEX")
    p.add_argument("--window", default=None, metavar="DURATION", help="fixed-window cycles, e.g. 100ms")
    p.add_argument("--no-plots", action="store_true", help="write no pictures beside the report")
    p.add_argument("--force", action="store_true",
                   help="compare runs that have nothing in common (no shared function, cycles ×50 apart)")
    p.add_argument("--fail-on", type=percent, default=None, metavar="PCT",
                   help="exit 1 when the median cycle time (runs of many ranks: per iteration, the median over "
                        "ranks) grew by at least PCT %% and significantly")
    p.add_argument("--ranks", default=None, metavar="SPEC",
                   help="runs of many ranks: which to pair (all, 0-3, 0:4,1:5); needed when the world sizes "
                        "differ; reads an nsys export's processes as ranks")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="runs of many ranks: use this Dask scheduler (its workers read the inputs' paths)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="runs of many ranks: local Dask worker processes (default: sized to the machine)")
    add_trace_options(p)
    p.set_defaults(func=cmd_compare)
