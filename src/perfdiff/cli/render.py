"""`perfdiff render REPORT.json`: a saved comparison rendered again (perfdiff.api.read_comparison)."""
from __future__ import annotations

import argparse

from perfdiff.cli.common import check_outputs, positive_int
from perfdiff.cli.compare import report_paths, write_report


def cmd_render(args: argparse.Namespace) -> int:
    """Read a comparison's JSON and write its report as `compare` did: the Markdown (stdout or
    -o), its cycles CSV and pictures beside it, the JSON again with --json, the HTML with --html."""
    from perfdiff.api import read_comparison

    report, cycles_csv = report_paths(args.output)
    check_outputs([args.comparison], [report or "-", cycles_csv, args.json, args.html])
    write_report(read_comparison(args.comparison), args, report, cycles_csv)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="render a comparison saved with compare --json again")
    p.add_argument("comparison", help="the JSON that `perfdiff compare ... --json` wrote")
    p.add_argument("-o", "--output", default=None,
                   help="Markdown report path (default: stdout); its cycles CSV and pictures go beside it")
    p.add_argument("--json", default=None, help="also write the comparison as JSON here")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also write the report as one self-contained HTML file here (pictures embedded)")
    p.add_argument("--top", type=positive_int, default=25, help="rows of the detailed table (25)")
    p.add_argument("--no-plots", action="store_true", help="write no pictures beside the report")
    p.set_defaults(func=cmd_render)
