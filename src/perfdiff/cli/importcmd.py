"""`perfdiff import TRACE -o DIR`: a trace (nsys, Kineto) written as a run bundle."""
from __future__ import annotations

import argparse
from pathlib import Path

from perfdiff.cli.common import add_trace_options
from perfdiff.errors import InputError


def cmd_import(args: argparse.Namespace) -> int:
    """perfdiff import TRACE -o DIR: write a trace as a run bundle."""
    from perfdiff.bundle import write_bundle
    from perfdiff.inputs import open_run

    src = Path(args.trace)
    if src.is_dir() and (src / "manifest.json").exists():
        raise InputError("is already a run bundle", path=src)
    run = open_run(src, pid=args.pid, group=args.group)
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("output exists and is not an empty directory", path=out)
    write_bundle(out, run)
    gpu = len(run.gpu_ranges) if run.gpu_ranges is not None else 0
    print(f"wrote {out} ({len(run.activity):,} activity rows, {len(run.samples):,} samples, "
          f"{len(run.markers):,} markers" + (f", {gpu:,} GPU-side ranges)" if gpu else ")"))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="write a trace (nsys .sqlite/.nsys-rep, Kineto .json[.gz]) as a run bundle")
    p.add_argument("trace")
    p.add_argument("-o", "--output", required=True, help="bundle directory to create")
    add_trace_options(p)
    p.set_defaults(func=cmd_import)
