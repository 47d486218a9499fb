"""`perfdiff compare NORMAL ABNORMAL`: the cross-comparison report."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from perfdiff.cli.common import add_trace_options, alpha, positive_int, write_output
from perfdiff.errors import EXIT_GATE


def _keep_freed_memory() -> None:
    """Let glibc's malloc keep freed memory for reuse instead of handing it back at once.

    A comparison allocates and frees hundreds of arrays of tens of MB; above 32 MB glibc maps
    each one fresh and unmaps it on free, so every one of them is page-faulted in again (on a
    VM, ~1 ms per 4 MB).  Serving them from the heap and not trimming it made a 2 M-kernel
    nsys comparison measurably faster; the peak memory is the same (the heap holds what was
    in use at the peak).  glibc only; anything else is left as it is."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: below 1 GiB, from the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never give the heap's top back early
    except (OSError, AttributeError):
        pass


def _import_compare_steps() -> None:
    """Import the analysis and rendering modules (scipy among them: ~0.5 s), while the
    workers load the runs."""
    import perfdiff.analyze  # noqa: F401
    import perfdiff.findings  # noqa: F401
    import perfdiff.render  # noqa: F401


def cmd_compare(args: argparse.Namespace) -> int:
    """perfdiff compare NORMAL ABNORMAL -o report.md [--json report.json]."""
    from perfdiff.attribute import CycleMatrix, attribute_activity, keep_rows_for_mu
    from perfdiff.bundle import RunData
    from perfdiff.load import open_run
    from perfdiff.pair import input_sizes, map_pair
    from perfdiff.model.durations import parse_duration_ns
    from perfdiff.segment import Cycles, segment_cycles

    window = parse_duration_ns(args.window) if args.window else None
    _keep_freed_memory()

    def load_side(path: str, cores: int | None = None) -> tuple[RunData, Cycles, CycleMatrix]:
        run = open_run(path, pid=args.pid, group=args.group, for_compare=True, cores=cores)
        cycles = segment_cycles(run, cycle_regex=args.cycle, window_ns=window)
        run, matrix = keep_rows_for_mu(run, attribute_activity(run, cycles))
        return run, cycles, matrix

    # Load, segment and attribute both sides at once on two cores when the inputs are large
    # (perfdiff.pair); everything after compares the two.
    (normal, cn, mn), (abnormal, ca, ma) = map_pair(load_side, (args.normal, args.abnormal),
                                                    input_sizes((args.normal, args.abnormal)),
                                                    while_waiting=_import_compare_steps)
    from perfdiff.analyze import compare_runs
    from perfdiff.findings import build_findings
    from perfdiff.render import cycles_csv, render_markdown, to_json

    csv_name = csv_job = None
    if args.output and args.output != "-":
        out = Path(args.output)
        csv_name = out.with_suffix("").name + ".cycles.csv"
        # Built in a thread while the runs are compared (sorting and Arrow's CSV writer
        # release the GIL): a million cycles a side take ~0.5 s.  Started once the
        # comparison's process pool is forked, never before (no fork while it runs).
        csv_job = _Background(cycles_csv, cn.dur_ns, ca.dur_ns)
    comp = compare_runs(normal, abnormal, cn, ca, alpha=args.alpha, matrices=(mn, ma),
                        tests_started=csv_job.start if csv_job is not None else None)
    findings = build_findings(comp)
    text = render_markdown(comp, findings, (normal.manifest, abnormal.manifest), top=args.top,
                           cycles_csv=csv_name)
    if args.output and args.output != "-":
        write_output(out, text)
        assert csv_name is not None and csv_job is not None
        write_output(out.with_name(csv_name), csv_job.result())
    else:
        sys.stdout.write(text)
    if args.json:
        write_output(Path(args.json), json.dumps(to_json(comp, findings), indent=1, allow_nan=False) + "\n")
    if args.fail_on is not None:
        grew = 100.0 * (comp.abnormal.median_us / comp.normal.median_us - 1.0)
        if grew >= args.fail_on and comp.cycle_test.p_mwu <= args.alpha:
            print(f"perfdiff: median cycle time grew {grew:.1f}% (≥ {args.fail_on:g}%, "
                  f"p {comp.cycle_test.p_mwu:.2g})", file=sys.stderr)
            return EXIT_GATE
    return 0


class _Background:
    """fn(*args) in a thread from `start`; `result` waits and returns it (or raises), and
    runs it here when it was never started."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        import threading

        self._out: list[Any] = []
        self._err: list[BaseException] = []

        def run() -> None:
            try:
                self._out.append(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                self._err.append(exc)

        self._thread = threading.Thread(target=run, name="perfdiff-background", daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def result(self) -> Any:
        self.start()
        self._thread.join()
        if self._err:
            raise self._err[0]
        return self._out[0]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two runs (bundles or traces) and write a report")
    p.add_argument("normal", help="the normal run: a bundle directory or a trace (.sqlite, .json[.gz], .nsys-rep)")
    p.add_argument("abnormal", help="the abnormal run")
    p.add_argument("-o", "--output", default=None, help="Markdown report path (default: stdout)")
    p.add_argument("--json", default=None, help="also write every number as JSON here")
    p.add_argument("--alpha", type=alpha, default=0.05, help="false-discovery rate for 'significant' (0.05)")
    p.add_argument("--top", type=positive_int, default=25, help="rows of the detailed table (25)")
    p.add_argument("--cycle", default=None, metavar="REGEX",
                   help="cycles from marker ranges (or kernel launches) whose name matches REGEX")
    p.add_argument("--window", default=None, metavar="DURATION", help="fixed-window cycles, e.g. 100ms")
    p.add_argument("--fail-on", type=float, default=None, metavar="PCT",
                   help="exit 1 when the median cycle time grew by at least PCT %% and significantly")
    add_trace_options(p)
    p.set_defaults(func=cmd_compare)
