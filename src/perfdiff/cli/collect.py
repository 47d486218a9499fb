"""`perfdiff collect`: record a live process (and its children) into a run bundle.

    perfdiff collect --pid PID [--duration 30s] [--interval 100ms] -o DIR
    perfdiff collect [--duration 30s] [--interval 100ms] -o DIR -- CMD ARGS...

The arguments become a `CollectOptions` for `perfdiff.collectors.run.collect`.  This module
imports no numpy, pandas or pyarrow: `perfdiff collect --pid 123` says "no such process" at
once (and every perfdiff command imports it for its parser).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from perfdiff.collectors.loop import MIN_INTERVAL_NS
from perfdiff.collectors.nsys_session import add_collect_options as add_kernel_trace_options
from perfdiff.errors import InputError
from perfdiff.model.durations import parse_duration_ns


def parse_gpus(text: str) -> list[int]:
    """--gpus 0,1 → [0, 1]."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {text!r} (e.g. 0,1)") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {text!r} (e.g. 0,1)")
    return out


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `perfdiff collect` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "collect", help="sample a live process (--pid PID, or -- CMD ARGS...) into a run bundle",
        description="Sample a running process and its children (--pid PID), or start one "
                    "(-- CMD ARGS...), into a run bundle that `perfdiff compare` reads.")
    p.add_argument("--pid", type=int, default=None,
                   help="process to collect from (and its children); on Python 3.14 the perfdiff agent is "
                        "loaded into it if it has none (docs/PROFILING_LLM_SERVERS.md)")
    p.add_argument("--duration", default=None, metavar="DURATION",
                   help="stop after this long, e.g. 30s, 500ms (default: until Ctrl-C or the target ends)")
    p.add_argument("--interval", default="100ms", metavar="DURATION", help="sampling period (100ms)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="bundle directory to create")
    p.add_argument("--gpus", type=parse_gpus, default=None, metavar="LIST",
                   help="GPU indexes to sample, e.g. 0,1 (default: the GPUs the target uses)")
    add_kernel_trace_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="command to start and collect from until it exits")
    p.set_defaults(func=cmd_collect)


def _warn(msg: str) -> None:
    print(f"perfdiff: warning: {msg}", file=sys.stderr, flush=True)


def _status_text(p: dict) -> str:
    """Elapsed, ticks, rows, warnings: what the status line says."""
    late = f", {p['overruns']:,} late" if p["overruns"] else ""
    warned = f", {p['warnings']} warning(s)" if p["warnings"] else ""
    return (f"perfdiff collect: {p['elapsed_ns'] / 1e9:,.1f} s, {p['ticks']:,} ticks{late}, "
            f"{p['markers']:,} marks, {p['activity']:,} activity rows, {p['samples']:,} samples{warned}")


class StatusBar:
    """The status line of `perfdiff collect` on a terminal, on the screen's bottom row, out of
    the way of everything else written to the terminal.

    The target shares the terminal (it inherits it: its writes cannot be intercepted), and
    perfdiff's own warnings go to it too, so a status line redrawn in place at the cursor
    ran into whatever was written next ("… 2 warning(s)workload 31002: …").  Instead, the
    rows above the last are made the scrolling region (DECSTBM, as apt draws its progress
    bar): the target's lines and perfdiff's messages scroll there, and the status is drawn
    on the bottom row with the cursor saved and restored around it (one write each time, so
    it cannot be split by the target's).  `close` (at exit, Ctrl-C included) gives the whole
    screen back and clears the row.  Without a usable terminal (a pipe, TERM=dumb, fewer than
    2 rows) there is no status line."""

    def __init__(self, fd: int):
        self.fd = fd
        self.rows = 0  # the screen's rows while the region is set; 0: not set

    @staticmethod
    def usable(stream: object) -> bool:
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty()) and os.environ.get("TERM", "dumb") not in ("", "dumb")

    def show(self, text: str) -> None:
        try:
            size = os.get_terminal_size(self.fd)
        except OSError:
            return
        if size.lines < 2:
            return
        out = ""
        if size.lines != self.rows:  # first call, or the terminal was resized
            # A newline first makes room for the status row when the cursor is on the last one
            # (the screen scrolls up by one); setting the region homes the cursor, so it is
            # saved and restored around it, then moved back up to the line it was on.
            out += ("\n" if not self.rows else "") + f"\x1b7\x1b[1;{size.lines - 1}r\x1b8"
            out += "\x1b[1A" if not self.rows else ""
            self.rows = size.lines
        out += f"\x1b7\x1b[{size.lines};1H\x1b[2K{text[:max(size.columns - 1, 0)]}\x1b8"
        self._write(out)

    def close(self) -> None:
        if self.rows:
            self._write(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")
            self.rows = 0

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:  # the terminal went away: nothing to draw on
            pass


def cmd_collect(args: argparse.Namespace) -> int:
    """perfdiff collect (--pid PID | -- CMD ARGS...) -o DIR: returns the exit code (0)."""
    from perfdiff.collectors.run import CollectOptions, collect

    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if (args.pid is None) == (not cmd):
        raise InputError("collect: give either --pid PID or -- CMD ARGS...")
    interval_ns = parse_duration_ns(args.interval)
    if interval_ns < MIN_INTERVAL_NS:
        raise InputError(f"collect: --interval {args.interval} is below the 1ms minimum")
    bar = StatusBar(sys.stderr.fileno()) if StatusBar.usable(sys.stderr) else None
    options = CollectOptions(
        output=Path(args.output), pid=args.pid, cmd=tuple(cmd), interval_ns=interval_ns,
        duration_ns=parse_duration_ns(args.duration) if args.duration else None,
        gpus=None if args.gpus is None else tuple(args.gpus),
        nsys=args.nsys, nsys_trace=args.nsys_trace, no_kernel_trace=args.no_kernel_trace,
        argv=tuple(sys.argv), warn=_warn, status=None if bar is None else lambda p: bar.show(_status_text(p)))
    try:
        result = collect(options)
    finally:
        if bar is not None:
            bar.close()  # the whole screen back, the status row cleared, before the summary
    c = result.manifest["collection"]
    print(f"perfdiff: wrote {result.path} (status {result.status}, {c['end_reason']}: {c['ticks']} ticks of "
          f"{interval_ns / 1e6:g} ms, {result.rows('activity'):,} activity rows, "
          f"{result.rows('samples'):,} samples, {result.rows('markers'):,} marks)", file=sys.stderr)
    return 0
