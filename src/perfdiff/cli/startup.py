"""`perfdiff startup LOG…`: the startup-phase table of vLLM/SGLang server logs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfdiff.cli.common import check_outputs, write_output
from perfdiff.errors import InputError, reading


def cmd_startup(args: argparse.Namespace) -> int:
    """Parse the logs, write the table(s).  Returns the exit code."""
    from perfdiff.startup import (
        build_startup_table,
        column_names,
        parse_phase_regex,
        read_startup_log,
        render_csv,
        render_json,
        render_markdown,
    )

    rules = [parse_phase_regex(s) for s in args.phase_regex]
    if not 0.0 < args.alpha < 1.0:
        raise InputError(f"--alpha {args.alpha}: must be between 0 and 1")
    to_stdout = args.output in (None, "-")
    outputs = [(None if to_stdout else args.output, render_markdown),
               (args.csv, render_csv),
               (args.json, render_json)]
    check_outputs(args.logs, ["-" if to_stdout else None] + [out for out, _ in outputs])
    names = column_names(args.logs)
    columns = []
    for p, n in zip(args.logs, names, strict=True):
        with reading(p):
            columns.append(read_startup_log(p, n, rules))
    table = build_startup_table(columns, args.group, args.alpha,
                                extra_rows=[r.kind.removeprefix("user:") for r in rules])
    if to_stdout:
        sys.stdout.write(render_markdown(table))
    for out, render in outputs:
        if out is None:
            continue
        write_output(Path(out), render(table))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `perfdiff startup LOG… [-o table.md] [--csv …] [--json …] [--group REGEX]`."""
    p = subparsers.add_parser(
        "startup", help="compare the startup phases of vLLM/SGLang server logs",
        description="Build the startup-phase table (one column per log, one row per phase, in "
                    "seconds) from vLLM and SGLang server logs as they are written.")
    p.add_argument("logs", nargs="+", metavar="LOG", help="server log files, one per run")
    p.add_argument("-o", "--output", metavar="TABLE.md",
                   help="write the Markdown table here (default or '-': standard output)")
    p.add_argument("--csv", metavar="TABLE.csv", help="also write the values as CSV")
    p.add_argument("--json", metavar="TABLE.json", help="also write everything as JSON")
    p.add_argument("--group", metavar="REGEX",
                   help="group runs by configuration: REGEX's first group (or match) in the file "
                        "name; shows mean ± sd per group and, for two groups, the U-test p")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--phase-regex", action="append", default=[], metavar="ROW=REGEX",
                   help="read ROW (e.g. kv_cache_init) from lines matching REGEX, whose one "
                        "capture group is the seconds; repeatable")
    p.set_defaults(func=cmd_startup)
