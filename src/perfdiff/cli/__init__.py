"""The command line: `main(argv) -> int`, a thin face over the Python API.

One module per command, listed in COMMANDS; each has `add_parser(subparsers)`, which
registers its arguments and sets `func(args) -> int`.  A command module that fails to import
is a bug and fails loudly: no command goes missing silently.  Every command runs inside
one handler: a user error (PerfdiffError) prints its one line on stderr and returns its exit
code; anything else is a bug and prints one line naming the input being read and the
exception, and returns 70 (EXIT_INTERNAL); `--debug` or PERFDIFF_DEBUG=1 prints its traceback
too (docs/ARCHITECTURE.md, exit codes).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from perfdiff.version import __version__
from perfdiff.cli import bench, collect, compare, importcmd, render, startup, tree
from perfdiff.cli.common import Parser
from perfdiff.errors import EXIT_INPUT, EXIT_INTERNAL, InternalError, PerfdiffError, input_of

COMMANDS = (compare, render, importcmd, collect, startup, tree, bench)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command of COMMANDS."""
    parser = Parser(prog="perfdiff", description="Compare a normal and an abnormal run of a GPU process.")
    parser.add_argument("--version", action="version", version=f"perfdiff {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.add_parser(sub)
    for command_parser in sub.choices.values():  # `perfdiff compare A B --debug` works too
        command_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _debug_wanted(argv: list[str] | None, args: argparse.Namespace | None) -> bool:
    if os.environ.get("PERFDIFF_DEBUG", "").strip() not in ("", "0"):
        return True
    if args is not None:
        return bool(getattr(args, "debug", False))
    return "--debug" in (sys.argv[1:] if argv is None else argv)


def _internal_error(exc: Exception, debug: bool) -> int:
    """Report a bug in one line (its traceback first with `debug`); returns EXIT_INTERNAL."""
    if debug:
        if isinstance(exc, InternalError):
            sys.stderr.write(exc.traceback_text)
        else:
            traceback.print_exception(exc, file=sys.stderr)
    kind, message = ((exc.type_name, exc.message) if isinstance(exc, InternalError)
                     else (type(exc).__name__, str(exc)))
    message = (message.strip().splitlines() or [""])[0][:300]
    where = input_of(exc)
    what = f"internal error while reading {where}" if where else "internal error"
    hint = "" if debug else "; rerun with --debug for the traceback"
    print(f"perfdiff: {what}: {kind}{': ' + message if message else ''}{hint}", file=sys.stderr)
    return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    """Run perfdiff with `argv` (default: sys.argv[1:]); returns the exit code."""
    args = None
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
    except Exception as exc:  # noqa: BLE001 - a bug: one line and exit 70, never exit 1 (the gate's)
        return _internal_error(exc, _debug_wanted(argv, args))


def run() -> None:
    """The `perfdiff` command (and `python -m perfdiff`): main() on sys.argv, then leave at
    once with its exit code, outputs flushed (perfdiff.parallel.exit_now)."""
    from perfdiff.parallel import exit_now

    exit_now(main())


__all__ = ["COMMANDS", "build_parser", "main", "run"]
