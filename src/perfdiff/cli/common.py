"""Argument types and output helpers the command modules share."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from perfdiff.errors import InputError


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}")


def alpha(text: str) -> float:
    """A significance level strictly between 0 and 1 (the rule of perfdiff.analyze.Thresholds)."""
    from perfdiff.analyze.thresholds import Thresholds

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    try:
        Thresholds(alpha=v)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return v


def percent(text: str) -> float:
    """A number of percent, neither negative nor NaN (a gate or tie threshold)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be a percentage of at least 0, not {text}")
    return v


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return v


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """Options of commands that read traces (compare, import)."""
    p.add_argument("--pid", type=int, default=None,
                   help="nsys export holding several processes: the one to read (default: most GPU work)")
    p.add_argument("--group", choices=("full", "short"), default="full",
                   help="kernel names: full demangled names, or grouped by short name")


def check_outputs(inputs: Iterable[str | Path], outputs: Iterable[str | Path | None]) -> None:
    """InputError, before any work or any file is written, when an output's folder does not
    exist, or an output would replace an input file or land inside an input folder (a bundle,
    a folder of rank traces, where it would be read as one): inputs are never modified.  None
    is no output; "-" is standard output, for one of them at most."""
    given = [Path(p).resolve() for p in inputs]
    outputs = list(outputs)
    if sum(str(o) == "-" for o in outputs if o is not None) > 1:
        raise InputError("only one output can go to standard output ('-')")
    for out in outputs:
        if out is None or str(out) == "-":
            continue
        if not Path(out).parent.is_dir():
            raise InputError("output folder does not exist", path=Path(out).parent)
        o = Path(out).resolve()
        for i in given:
            if o == i:
                raise InputError("refusing to overwrite an input", path=out)
            if i.is_dir() and o.is_relative_to(i):
                raise InputError(f"refusing to write inside the input folder {i}", path=out)


def write_output(path: Path, text: str | bytes) -> None:
    """Write a report file ("-": standard output); an unwritable path is the user's error
    (exit 2)."""
    if str(path) == "-":
        sys.stdout.write(text if isinstance(text, str) else text.decode("utf-8"))
        return
    try:
        if path.parent and not path.parent.exists():
            raise InputError("output folder does not exist", path=path.parent)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", path=path) from None
