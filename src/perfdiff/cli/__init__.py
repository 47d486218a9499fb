"""The command line: `main(argv) -> int`, a thin face over the Python API.

One module per command, listed in COMMANDS; each has `add_parser(subparsers)`, which
registers its arguments and sets `func(args) -> int`.  A command module that fails to import
is a bug and fails loudly: no command goes missing silently.  User errors (PerfdiffError)
print one line on stderr and return their exit code (docs/ARCHITECTURE.md, exit codes).
"""
from __future__ import annotations

import argparse
import sys

from perfdiff.version import __version__
from perfdiff.cli import bench, collect, compare, importcmd, startup, tree
from perfdiff.cli.common import Parser
from perfdiff.errors import EXIT_INPUT, PerfdiffError

COMMANDS = (compare, importcmd, collect, startup, tree, bench)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command of COMMANDS."""
    parser = Parser(prog="perfdiff", description="Compare a normal and an abnormal run of a GPU process.")
    parser.add_argument("--version", action="version", version=f"perfdiff {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run perfdiff with `argv` (default: sys.argv[1:]); returns the exit code."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args))
    except PerfdiffError as exc:
        print(f"perfdiff: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("perfdiff: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        print("perfdiff: out of memory", file=sys.stderr)
        return EXIT_INPUT


__all__ = ["COMMANDS", "build_parser", "main"]
