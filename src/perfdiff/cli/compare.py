"""`perfdiff compare NORMAL ABNORMAL`: the cross-comparison report (perfdiff.api.compare)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from perfdiff.cli.common import add_trace_options, alpha, percent, positive_int, check_outputs, write_output
from perfdiff.errors import EXIT_CANNOT_JUDGE, EXIT_GATE, EXIT_OK, InputError, SeveralProcesses


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare, apply the --fail-on gate, write the report (+ its cycles CSV, + JSON, + the
    gate's JUnit XML and job summary); runs of many ranks (directories of rank traces, nsys
    exports holding the ranks of a job, or --ranks/--scheduler/--workers) go to
    cmd_compare_ranks, nsys exports holding several processes that are not ranks (without
    --pid) to cmd_compare_processes."""
    from perfdiff.ranks import is_rank_directory
    from perfdiff.ranks.processes import export_of

    check_gate_options(args)
    report, cycles_csv = report_paths(args.output)
    check_outputs([args.normal, args.abnormal], [report or "-", cycles_csv, args.json, args.junit, args.html])
    runs = [args.normal, args.abnormal]
    if args.ranks or args.scheduler or args.workers or any(is_rank_directory(p) for p in runs):
        return _ranks(args)
    if args.pid is None and any(export_of(p) is not None for p in runs):
        # Most exports hold one process: their loading tells, rather than a scan of every
        # kernel table before it; one holding several stops at once and is routed here.
        try:
            comp = _comparison(args, report, several="raise")
        except SeveralProcesses:
            return _several_processes(args, report, cycles_csv)
    else:
        comp = _comparison(args, report, several="most")
    return _finish(comp, args, report, cycles_csv)


def _several_processes(args: argparse.Namespace, report: Path | None, cycles_csv: Path | None) -> int:
    """An nsys export in which several processes launched kernels: the ranks of one job
    compared as a job; the processes of two exports that are not ranks, process by process;
    else (an export beside a trace of one process) its most active process."""
    from perfdiff.ranks import any_multi_rank
    from perfdiff.ranks.processes import export_of, is_process_export

    runs = [args.normal, args.abnormal]
    if any_multi_rank(runs):
        return _ranks(args)
    if all(export_of(p) is not None for p in runs) and any(is_process_export(p) for p in runs):
        return cmd_compare_processes(args, report, cycles_csv)
    return _finish(_comparison(args, report, several="most"), args, report, cycles_csv)


def _ranks(args: argparse.Namespace) -> int:
    if args.html:
        raise InputError("--html writes the report of one pair of runs; runs of many ranks have the Markdown "
                         "report (-o) alone")
    return cmd_compare_ranks(args)


def _comparison(args: argparse.Namespace, report: Path | None, *, several: str) -> Any:
    """perfdiff.api.compare of the two runs as the options say (`several`: its several_processes)."""
    from perfdiff.analyze import Thresholds
    from perfdiff.api import compare
    from perfdiff.parallel import keep_freed_memory

    keep_freed_memory()
    return compare(args.normal, args.abnormal, thresholds=Thresholds(alpha=args.alpha), cycle=args.cycle,
                   window=args.window, pid=args.pid, group=args.group, force=args.force,
                   pictures=report is not None and not args.no_plots, several_processes=several)


def _finish(comp: Any, args: argparse.Namespace, report: Path | None, cycles_csv: Path | None) -> int:
    """The comparison's gate (--fail-on), its report and outputs written; the exit code."""
    from perfdiff.analyze import FindingCode

    if comp.findings and comp.findings[0].code == FindingCode.IDENTICAL:
        print(f"perfdiff: identical inputs: {args.normal} and {args.abnormal} hold the same bytes", file=sys.stderr)
    if args.fail_on is not None:  # judged first: the report and the JSON state the decision
        comp.judge(args.fail_on, gate_on=args.gate_on, allow_inconclusive=args.allow_inconclusive)
    md = write_report(comp, args, report, cycles_csv)
    return finish_gate(comp.gate, md, args) if comp.gate is not None else EXIT_OK


def write_report(comp: Any, args: argparse.Namespace, report: Path | None, cycles_csv: Path | None) -> str:
    """Write a comparison's report (Markdown to `report`, or stdout), its cycles CSV and
    pictures beside it, its JSON (`args.json`) and its HTML (`args.html`, one file, the
    pictures in it); `args.top`, `args.no_plots` as parsed.  Returns the Markdown written."""
    if args.html:  # first: without markdown-it-py nothing is written (one line, exit 2)
        write_output(Path(args.html), comp.to_html(top=args.top, plots=not args.no_plots))
    if report is not None and cycles_csv is not None:
        plots, note = _plots(comp, report, args)
        md = comp.to_markdown(top=args.top, cycles_csv=cycles_csv.name, plots=plots, plots_note=note)
        write_output(report, md)
        write_output(cycles_csv, comp.cycles_csv())
    else:
        md = comp.to_markdown(top=args.top)
        sys.stdout.write(md)
    if args.json:
        write_output(Path(args.json), json.dumps(comp.to_json(), indent=1, allow_nan=False) + "\n")
    return md


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


def check_gate_options(args: argparse.Namespace) -> None:
    """The gate's options need its threshold: one line, exit 2, before any input is read."""
    if args.fail_on is None:
        given = [o for o, v in (("--gate-on", args.gate_on), ("--junit", args.junit),
                                ("--allow-inconclusive", args.allow_inconclusive)) if v]
        if given:
            raise InputError(f"{given[0]} belongs to the gate: give --fail-on PCT too")
    if args.gate_on:
        from perfdiff.api import parse_gates

        parse_gates(args.gate_on)


def finish_gate(decision: Any, markdown: str, args: argparse.Namespace) -> int:
    """The gate's outcome on one line of standard error, its JUnit XML (`--junit`), the
    report's first screen appended to $GITHUB_STEP_SUMMARY when set, and its exit code:
    0 pass, 1 regression, 4 cannot judge (0 with --allow-inconclusive)."""
    from perfdiff.analyze.gate_records import GateOutcome
    from perfdiff.render.gate import first_screen, gate_line, junit_xml

    print(f"perfdiff: {gate_line(decision)}", file=sys.stderr)
    if args.junit:
        suite = f"perfdiff compare {Path(args.normal).name} {Path(args.abnormal).name}"
        write_output(Path(args.junit), junit_xml(decision, suite, markdown))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(first_screen(markdown) + "\n")
        except OSError as exc:  # the gate's outcome stands: a summary is a convenience
            print(f"perfdiff: cannot append to $GITHUB_STEP_SUMMARY ({summary}): {exc.strerror or exc}",
                  file=sys.stderr)
    if decision.outcome is GateOutcome.REGRESSION:
        return EXIT_GATE
    return EXIT_OK if decision.passes else EXIT_CANNOT_JUDGE


def cmd_compare_processes(args: argparse.Namespace, report: Path | None, cycles_csv: Path | None) -> int:
    """nsys exports holding several processes that are not ranks: the process-by-process
    report (+ each compared pair's cycles CSV and pictures beside it, as REPORT.P<n>.*; + JSON)."""
    one = ("these exports hold several processes that are not ranks, compared process by process; "
           "--pid picks the one process to")
    if args.html:
        raise InputError(f"--html writes the report of one pair of runs; {one} report as HTML")
    if args.fail_on is not None:
        raise InputError(f"--fail-on judges one pair of runs; {one} gate on")
    from perfdiff.api import compare_processes
    from perfdiff.parallel import keep_freed_memory

    keep_freed_memory()
    comp = compare_processes(args.normal, args.abnormal, alpha=args.alpha, cycle=args.cycle, window=args.window,
                             group=args.group, force=args.force)
    if report is not None and cycles_csv is not None:
        plots: dict[int, list[str]] = {}
        if not args.no_plots:
            from perfdiff.render.plots import PlotsUnavailable

            try:
                plots = comp.write_plots(report.parent, report.with_suffix("").name)
            except PlotsUnavailable:
                plots = {}
        names = {}
        for label, data in comp.cycles_csvs().items():
            path = cycles_csv.with_name(cycles_csv.name.replace(".cycles.csv", f".P{label}.cycles.csv"))
            write_output(path, data)
            names[label] = path.name
        write_output(report, comp.to_markdown(top=args.top, plots=plots, cycles_csv=names))
    else:
        sys.stdout.write(comp.to_markdown(top=args.top))
    if args.json:
        write_output(Path(args.json), json.dumps(comp.to_json(), indent=1, allow_nan=False) + "\n")
    return EXIT_OK


def cmd_compare_ranks(args: argparse.Namespace) -> int:
    """Runs of many ranks (directories of rank traces): the multi-rank report (+ JSON), and the
    --fail-on gate on the job's iteration time (per iteration, the median over ranks)."""
    if args.pid is not None:
        raise InputError("--pid picks one process of a single trace; with runs of many ranks, say which ranks to "
                         "compare with --ranks")
    if args.scheduler is None:
        from perfdiff.ranks.fanout import warm_up

        warm_up()  # the local workers' fork server imports beside this process's own imports, from now
    from perfdiff.api import compare_ranks

    comp = compare_ranks(args.normal, args.abnormal, alpha=args.alpha, cycle=args.cycle, window=args.window,
                         group=args.group, ranks=args.ranks, scheduler=args.scheduler, workers=args.workers,
                         progress=True, pictures=bool(args.output and args.output != "-" and not args.no_plots))
    if args.fail_on is not None:  # judged first: the report states the decision
        comp.judge(args.fail_on, gate_on=args.gate_on, allow_inconclusive=args.allow_inconclusive)
    report = Path(args.output) if args.output and args.output != "-" else None
    if report is not None:
        plots, note = _plots(comp, report, args)
        md = comp.to_markdown(plots=plots, plots_note=note)
        write_output(report, md)
    else:
        md = comp.to_markdown()
        sys.stdout.write(md)
    if args.json:
        write_output(Path(args.json), json.dumps(comp.to_json(), indent=1, allow_nan=False) + "\n")
    return finish_gate(comp.gate, md, args) if comp.gate is not None else EXIT_OK


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
                   help="CI gate: exit 1 when what --gate-on names grew by at least PCT %% and significantly, "
                        "4 when it cannot be judged (docs/CI.md)")
    p.add_argument("--gate-on", action="append", default=None, metavar="WHAT",
                   help="what the gate judges: median, mean, p95 or function:REGEX; repeat for several "
                        "(default: mean and p95 of the cycle; runs of many ranks: of the job's iteration)")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="a gate that cannot judge passes (exit 0), and the outputs say so")
    p.add_argument("--junit", default=None, metavar="FILE",
                   help="write the gate's outcome as JUnit XML, one test case per gate")
    p.add_argument("--ranks", default=None, metavar="SPEC",
                   help="runs of many ranks: which to pair (all, 0-3, 0:4,1:5); needed when the world sizes "
                        "differ; reads an nsys export's processes as ranks")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="runs of many ranks: use this Dask scheduler (its workers read the inputs' paths)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="runs of many ranks: local worker processes (default: sized to the machine)")
    add_trace_options(p)
    p.set_defaults(func=cmd_compare)
