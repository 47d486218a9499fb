"""`perfdiff collect`: record a live process (and its children) into a run bundle.

    perfdiff collect --pid PID [--duration 30s] [--interval 100ms] -o DIR
    perfdiff collect [--duration 30s] [--interval 100ms] -o DIR -- CMD ARGS...

The arguments become a `CollectOptions` for `perfdiff.collectors.run.collect`.  This module
imports no numpy, pandas or pyarrow: `perfdiff collect --pid 123` says "no such process" at
once (and every perfdiff command imports it for its parser).
"""
from __future__ import annotations

import argparse
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


def _status_line(p: dict) -> None:
    """One line on the terminal, rewritten in place: elapsed, ticks, rows, warnings."""
    late = f", {p['overruns']:,} late" if p["overruns"] else ""
    warned = f", {p['warnings']} warning(s)" if p["warnings"] else ""
    sys.stderr.write(f"\rperfdiff collect: {p['elapsed_ns'] / 1e9:,.1f} s, {p['ticks']:,} ticks{late}, "
                     f"{p['markers']:,} marks, {p['activity']:,} activity rows, {p['samples']:,} samples{warned}"
                     "\x1b[K")
    sys.stderr.flush()


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
    options = CollectOptions(
        output=Path(args.output), pid=args.pid, cmd=tuple(cmd), interval_ns=interval_ns,
        duration_ns=parse_duration_ns(args.duration) if args.duration else None,
        gpus=None if args.gpus is None else tuple(args.gpus),
        nsys=args.nsys, nsys_trace=args.nsys_trace, no_kernel_trace=args.no_kernel_trace,
        argv=tuple(sys.argv), warn=_warn, status=_status_line if sys.stderr.isatty() else None)
    result = collect(options)
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")  # the status line gives way to the summary
    c = result.manifest["collection"]
    print(f"perfdiff: wrote {result.path} (status {result.status}, {c['end_reason']}: {c['ticks']} ticks of "
          f"{interval_ns / 1e6:g} ms, {result.rows('activity'):,} activity rows, "
          f"{result.rows('samples'):,} samples, {result.rows('markers'):,} marks)", file=sys.stderr)
    return 0
