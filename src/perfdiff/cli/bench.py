"""`perfdiff bench TABLE [AFTER]`: compare the variants of a benchmark table (docs/BENCH_TABLES.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfdiff.cli.common import alpha, percent, check_outputs, write_output
from perfdiff.errors import EXIT_GATE


def _columns(text: str) -> tuple[str, ...]:
    cols = tuple(c.strip() for c in text.split(",") if c.strip())
    if not cols:
        raise argparse.ArgumentTypeError("name at least one column")
    return cols


def cmd_bench(args: argparse.Namespace) -> int:
    """Read the table(s), compare, write the report(s), apply the --fail-on gate."""
    from perfdiff.benchtable import compare_tables, gate, read_table, regressed_pct, render_csv, render_json
    from perfdiff.benchtable import render_markdown

    to_stdout = args.output in (None, "-")
    outputs = [(None if to_stdout else args.output, render_markdown), (args.csv, render_csv),
               (args.json, render_json)]
    check_outputs(args.tables, ["-" if to_stdout else None] + [out for out, _ in outputs])
    names = [Path(p).name for p in args.tables]
    if len(set(names)) < len(names):  # before/results.csv against after/results.csv
        names = [str(p) for p in args.tables]
    tables = [(n, read_table(p, args.format)) for n, p in zip(names, args.tables, strict=True)]
    result = compare_tables(tables, by=args.by, baseline=args.baseline, metric=args.metric,
                            higher_is_better=args.higher_is_better, keys=tuple(args.key),
                            groupings=args.group or None, alpha=args.alpha, tie_pct=args.tie)
    if to_stdout:
        sys.stdout.write(render_markdown(result))
    for out, render in outputs:
        if out is not None:
            write_output(Path(out), render(result))
    if args.fail_on is not None:
        tripped = gate(result, args.fail_on)
        for s in tripped:
            c = result.comparisons[s.comparison]
            print(f"perfdiff: {c.candidate} is {regressed_pct(result, s):.1f}% worse than {c.reference} by the "
                  f"geometric mean of {s.n_configs} configurations (> {args.fail_on:g}%)", file=sys.stderr)
        if tripped:
            return EXIT_GATE
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `perfdiff bench TABLE [AFTER] --by COL [--baseline V] [--metric COL] …`."""
    p = subparsers.add_parser(
        "bench", help="compare the variants of a benchmark table (CSV, TSV, JSON lines, pandas text)",
        description="Compare benchmark results configuration by configuration: the variants named by "
                    "--by in one table, or two tables (before, after) with the same columns. Writes the "
                    "ratio per configuration, geometric means per group and the largest wins and losses.")
    p.add_argument("tables", nargs="+", metavar="TABLE", help="one table (with --by) or two: before and after")
    p.add_argument("--by", metavar="COLUMN", help="the column naming the compared variants (e.g. backend)")
    p.add_argument("--baseline", metavar="VARIANT",
                   help="the variant every other is divided by (default: the first in the table)")
    p.add_argument("--metric", metavar="COLUMN",
                   help="the measured column (default: the one numeric column that is not whole numbers)")
    p.add_argument("--higher-is-better", action="store_true",
                   help="the metric is a throughput (default: lower is better, a latency)")
    p.add_argument("--key", action="append", default=[], metavar="COLUMN",
                   help="also a key column, though its values are not whole numbers; repeatable")
    p.add_argument("--group", action="append", type=_columns, metavar="COL[,COL…]",
                   help="summarise per group of these key columns; repeatable, the first sections the "
                        "report (default: the keys named like a stage or a dtype, then each other text key)")
    p.add_argument("--alpha", type=alpha, default=0.05, help="significance level of the U test (0.05)")
    p.add_argument("--tie", type=percent, default=2.0, metavar="PCT",
                   help="single values within PCT %% of each other count as the same (2)")
    p.add_argument("--format", choices=("auto", "csv", "tsv", "jsonl", "text"), default="auto",
                   help="input format (default: by file name, else by content)")
    p.add_argument("-o", "--output", metavar="REPORT.md",
                   help="write the Markdown report here (default or '-': standard output)")
    p.add_argument("--csv", metavar="ROWS.csv", help="also write every compared configuration as CSV")
    p.add_argument("--json", metavar="REPORT.json", help="also write everything as versioned JSON")
    p.add_argument("--fail-on", type=percent, default=None, metavar="PCT",
                   help="exit 1 when a variant's geometric mean against the baseline is worse by more than PCT %%")
    p.set_defaults(func=cmd_bench)
