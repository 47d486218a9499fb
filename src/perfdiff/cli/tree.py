"""`perfdiff tree NORMAL ABNORMAL`: the range-tree diff (perfdiff.api.tree)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfdiff.cli.common import add_trace_options, alpha, check_outputs, write_output


def cmd_tree(args: argparse.Namespace) -> int:
    """Build both trees, write the Markdown tree (stdout or -o) and the full table as CSV."""
    from perfdiff.api import tree

    report = Path(args.output) if args.output and args.output != "-" else None
    csv_path = Path(args.csv) if args.csv else (report.with_suffix(".csv") if report else None)
    check_outputs([args.normal, args.abnormal], [report or "-", csv_path])
    result = tree(args.normal, args.abnormal, alpha=args.alpha, cycle=args.cycle, total=args.total,
                  pid=args.pid, group=args.group)
    if report is not None and csv_path is not None:
        name = csv_path.name if csv_path.parent.resolve() == report.parent.resolve() else str(csv_path)
        write_output(report, result.to_markdown(csv_name=name))
    else:
        sys.stdout.write(result.to_markdown(csv_name=str(csv_path) if csv_path else None))
    if csv_path is not None:
        write_output(csv_path, result.to_csv())
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tree", help="compare the range trees (NVTX, annotations, operators) of two runs")
    p.add_argument("normal", help="the normal run: a bundle directory or a trace (.sqlite, .json[.gz], .nsys-rep)")
    p.add_argument("abnormal", help="the abnormal run")
    p.add_argument("-o", "--output", default=None,
                   help="Markdown tree path (default: stdout); the full table goes beside it as .csv")
    p.add_argument("--csv", default=None, help="write the full table (every path, every column) here")
    p.add_argument("--alpha", type=alpha, default=0.05, help="false-discovery rate for 'significant' (0.05)")
    p.add_argument("--cycle", default=None, metavar="REGEX",
                   help="cycles from marker ranges (or kernel launches) whose name matches REGEX")
    p.add_argument("--total", action="store_true", help="compare totals over each run, not means per cycle")
    add_trace_options(p)
    p.set_defaults(func=cmd_tree)
