"""Helpers of the `perfdiff startup` tests: paths to the real logs and reference tables, one
log parsed from literal lines, and the command run in-process."""
from __future__ import annotations

import argparse
from pathlib import Path

from perfdiff.cli.startup import add_parser as add_startup_parser
from perfdiff.startup import parse_startup_log

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REAL = SHARED / "data" / "real" / "startup_logs"
REFERENCE = SHARED / "reference"
GOLDEN = Path(__file__).resolve().parent / "golden" / "startup"


def col(text: str, **kw):
    return parse_startup_log(text, "x", "x.log", **kw)


def val(c, row: str) -> float:
    return c.phases[row].value_s


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfdiff")
    add_startup_parser(parser.add_subparsers(dest="command"))
    return parser


def startup_main(argv: list[str]) -> int:
    """`perfdiff startup` in-process; user errors raise (InputError), as in the command."""
    args = _parser().parse_args(argv)
    return args.func(args)
