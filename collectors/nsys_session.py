"""`perfdiff collect --nsys -- CMD`: the command runs under an Nsight Systems session, and its
kernels land in the same bundle as the host and GPU samples taken alongside.

    nsys launch --session-new=S --trace=cuda,nvtx,osrt CMD ARGS...     the started command
    nsys start --session=S --output=DIR/nsys/report --force-overwrite=true    at the first tick
    nsys stop --session=S                                       at the end: DIR/nsys/report.nsys-rep
    nsys export --type=sqlite --output=DIR/nsys/report.sqlite --force-overwrite=true DIR/nsys/report.nsys-rep
    nsys shutdown --session=S                                    at close, best effort

The export is read with perfdiff.importers.nsys.import_nsys (times already CLOCK_REALTIME
through the export's session start) and merged: kernels, memcpys, memsets, CUDA API calls,
NVTX ranges (markers and kind "cpu").  Of the host rows, OS-runtime calls are kept as
``osrt:<call>`` (the host sampler's ``read``/``write`` mean something else) and nsys'
scheduling ``oncpu`` rows are left out (the host sampler measures on-CPU time of every thread
already; two would double it).  The report and its export stay in DIR/nsys/ for Nsight.

Trace options go to ``launch`` (nsys refuses them on ``start``).  ``start`` can fail while
``launch`` is still registering the session, and returns before capture is armed: it is
retried for START_RETRY_S, then given ARM_SETTLE_S.  When the command exits first, nsys may
already have ended the collection: ``stop`` then fails and the report, if written, is used.
nsys itself holds CUPTI in the command, so --nsys and the perfdiff agent exclude each other.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from perfdiff.errors import CollectionError, InputError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TRACE = "cuda,nvtx,osrt"
START_RETRY_S = 10.0  # `nsys start` retried this long while `launch` registers the session
ARM_SETTLE_S = 0.5  # `nsys start` returns before collection is armed
REPORT_WAIT_S = 30.0  # after `stop`, wait this long for the report file to appear and settle
TIMEOUT_S = {"start": 60.0, "stop": 600.0, "export": 900.0, "shutdown": 30.0, "--version": 30.0}
NOT_FOUND = ("nsys (NVIDIA Nsight Systems) is not on PATH: install Nsight Systems "
             "(https://developer.nvidia.com/nsight-systems) or add its bin/ directory to PATH; "
             "or collect without --nsys")

Runner = Callable[..., subprocess.CompletedProcess]


def locate_nsys(nsys: str | None = None) -> str:
    """The nsys executable (`nsys` given, else on PATH); CollectionError (one line) when absent."""
    found = shutil.which(nsys or "nsys")
    if found is None:
        hint = " (/usr/local/cuda/bin/nsys exists: add /usr/local/cuda/bin to PATH)" if os.path.exists(
            "/usr/local/cuda/bin/nsys") else ""
        raise CollectionError(NOT_FOUND + hint)
    return found


def add_collect_options(parser: argparse.ArgumentParser) -> None:
    """`perfdiff collect` options for kernel traces: --nsys, --nsys-trace, --no-kernel-trace."""
    g = parser.add_argument_group("kernel traces")
    g.add_argument("--nsys", action="store_true",
                   help="run the command under an Nsight Systems session (nsys launch/start/stop) and merge its "
                        "kernels into the bundle (needs -- CMD)")
    g.add_argument("--nsys-trace", default=DEFAULT_TRACE, metavar="LIST",
                   help=f"what nsys traces, its --trace list ({DEFAULT_TRACE})")
    g.add_argument("--no-kernel-trace", action="store_true",
                   help="no kernel trace: neither the perfdiff agent (CUPTI) in the command nor nsys")


def check_collect_options(args: argparse.Namespace, cmd: list[str]) -> None:
    """InputError for option combinations that cannot work, CollectionError when --nsys is
    asked for and nsys is not installed: before anything starts."""
    if getattr(args, "nsys", False):
        if not cmd:
            raise InputError("collect: --nsys needs a command to start (-- CMD ARGS...): nsys cannot attach to a "
                             "running process")
        if getattr(args, "no_kernel_trace", False):
            raise InputError("collect: --nsys and --no-kernel-trace contradict each other")
        trace = str(getattr(args, "nsys_trace", DEFAULT_TRACE))
        if not trace or any(not t.strip() or " " in t for t in trace.split(",")):
            raise InputError(f"collect: bad --nsys-trace {trace!r}: a comma-separated list such as {DEFAULT_TRACE}")
        locate_nsys()


class NsysSession:
    """One nsys session around the started command, as a source of rows for the collect loop.

    ``wrap(cmd)`` is the command to start; the loop then calls ``start(t_ns)``, ``sample``
    (nothing: nsys hands its trace over at the end), ``stop()`` once at the end, while the
    command may still run (its rows), ``manifest()`` and ``close()``.  A failure after the
    command started is one warning and a manifest entry; the collection goes on without the trace.
    """

    name = "nsys"
    interval_ns = 1_000_000_000

    def __init__(self, out_dir: str | os.PathLike[str], *, warn: Callable[[str], None], nsys: str | None = None,
                 trace: str = DEFAULT_TRACE, session: str | None = None, run: Runner = subprocess.run,
                 sleep: Callable[[float], None] = time.sleep):
        self.nsys = locate_nsys(nsys)
        self.out_dir = Path(out_dir).absolute()  # nsys resolves --output itself: give it no relative path
        self.warn = warn
        self.trace = trace
        self.session = session or f"perfdiff-{os.getpid()}-{time.time_ns() // 1_000_000}"
        self._run = run
        self._sleep = sleep
        self.report_base = self.out_dir / "report"
        self.report = self.out_dir / "report.nsys-rep"
        self.export = self.out_dir / "report.sqlite"
        self.version = ""
        self.started = False
        self.stopped = False
        self.closed = False
        self.t_start_ns = 0
        self.t_stop_ns = 0
        self.commands: list[dict[str, Any]] = []
        self.unsupported: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.imported: dict[str, Any] = {}

    # ------------------------------------------------------------------ nsys calls

    def _nsys(self, verb: str, *args: str) -> subprocess.CompletedProcess | None:
        """Run `nsys VERB ARGS`; the result (None when it could not run or timed out), logged."""
        argv = [self.nsys, verb, *args]
        t0 = time.monotonic()
        entry: dict[str, Any] = {"argv": argv[1:]}
        try:
            r = self._run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT_S.get(verb, 60.0), check=False)
            entry.update(rc=r.returncode, stderr=_tail(r.stderr))
        except subprocess.TimeoutExpired:
            entry.update(rc=None, error=f"timed out after {TIMEOUT_S.get(verb, 60.0):g} s")
            r = None
        except OSError as exc:
            entry.update(rc=None, error=exc.strerror or str(exc))
            r = None
        entry["wall_s"] = round(time.monotonic() - t0, 3)
        self.commands.append(entry)
        return r

    def wrap(self, cmd: list[str]) -> list[str]:
        """The command line that starts `cmd` under a new nsys session (collection not yet on)."""
        r = self._nsys("--version")
        if r is not None and r.returncode == 0:
            self.version = (r.stdout or "").strip().splitlines()[-1] if (r.stdout or "").strip() else ""
        return [self.nsys, "launch", f"--session-new={self.session}", f"--trace={self.trace}", *cmd]

    # ------------------------------------------------------------------ sampler protocol

    def start(self, t_ns: int) -> None:
        """Begin collecting (retried while `launch` registers the session)."""
        self.t_start_ns = t_ns
        self.out_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + START_RETRY_S
        delay = 0.1
        while True:
            r = self._nsys("start", f"--session={self.session}", f"--output={self.report_base}",
                           "--force-overwrite=true")
            if r is not None and r.returncode == 0:
                self.started = True
                self._sleep(ARM_SETTLE_S)
                return
            if time.monotonic() + delay > deadline:
                break
            self._sleep(delay)
            delay = min(1.0, delay * 2)
        self._fail(f"nsys start failed ({self._last_error()}): no kernel trace")

    def sample(self, t_ns: int) -> dict[str, pd.DataFrame]:
        """Nothing during the run: nsys hands its trace over at the end."""
        return {}

    poll = sample

    def stop(self, t_ns: int | None = None) -> dict[str, pd.DataFrame]:
        """Stop collecting, export to SQLite, import: the rows (activity, markers, samples).
        Call it while the command still runs (`nsys stop` needs its session); `t_ns`: the
        collection's end (default now)."""
        if not self.started or self.stopped:
            return {}
        self.stopped = True
        self.t_stop_ns = t_ns or time.time_ns()
        r = self._nsys("stop", f"--session={self.session}")
        stop_error = None if r is not None and r.returncode == 0 else self._last_error()
        if not self._wait_report():
            why = f"nsys stop failed ({stop_error})" if stop_error else "nsys wrote no report"
            self._fail(f"{why}: no {self.report.name} in {self.out_dir}; no kernel trace")
            return {}
        if stop_error:  # the command ended first and nsys closed the collection itself
            self.events.append({"t_ns": self.t_stop_ns, "device": "Host", "event": "nsys-stop-failed",
                                "error": stop_error, "report": str(self.report)})
        r = self._nsys("export", "--type=sqlite", f"--output={self.export}", "--force-overwrite=true", str(self.report))
        if r is None or r.returncode != 0 or not self.export.is_file():
            self._fail(f"nsys export failed ({self._last_error()}): no kernel trace")
            return {}
        return self._import()

    def manifest(self) -> dict[str, Any]:
        """Collector entry (session, nsys version, commands, what was imported)."""
        return {"collector": {"name": self.name, "method": "nsys session", "session": self.session,
                              "nsys": self.nsys, "version": self.version, "trace": self.trace,
                              "report": str(self.report), "export": str(self.export),
                              "started": self.started, "commands": self.commands, "imported": self.imported},
                "unsupported": list(self.unsupported), "events": list(self.events)}

    def close(self) -> None:
        """End the session (best effort: it may be gone with the command)."""
        if self.started and not self.closed:
            self._nsys("shutdown", f"--session={self.session}")
        self.closed = True

    # ------------------------------------------------------------------ helpers

    def _wait_report(self) -> bool:
        """True once the report exists and its size held still for one check."""
        deadline = time.monotonic() + REPORT_WAIT_S
        last = -1
        while time.monotonic() < deadline:
            size = self.report.stat().st_size if self.report.is_file() else -1
            if size > 0 and size == last:
                return True
            last = size
            self._sleep(0.2)
        return self.report.is_file() and self.report.stat().st_size > 0

    def _import(self) -> dict[str, pd.DataFrame]:
        import numpy as np

        from perfdiff.importers.nsys import import_nsys

        try:
            run = import_nsys(self.export)
        except InputError as exc:
            self._fail(f"the nsys export cannot be imported ({exc}): no kernel trace")
            return {}
        act = run.activity
        host = (act["kind"] == "host").to_numpy()
        oncpu = host & (act["function"].astype(str) == "oncpu").to_numpy()
        act = act[~oncpu].reset_index(drop=True)
        osrt = (act["kind"] == "host").to_numpy()
        if osrt.any():
            fn = act["function"].astype(str)
            act["function"] = fn.where(~osrt, "osrt:" + fn).astype("category")
        counts = act.groupby("kind", observed=True).size()
        self.imported = {"rows": {str(k): int(v) for k, v in counts.items()}, "markers": len(run.markers),
                         "samples": len(run.samples), "oncpu_rows_left_out": int(oncpu.sum()),
                         "pid": (run.manifest.get("target") or {}).get("pid"), "notes": list(run.notes),
                         "dropped": run.manifest.get("dropped", {}), "gpus": run.manifest.get("gpus", [])}
        gpu = act[act["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()]
        if len(gpu):
            lo, hi = int(gpu["start_ns"].min()), int(gpu["end_ns"].max())
            self.imported["gpu_span_ns"] = [lo, hi]
            if hi < self.t_start_ns or lo > (self.t_stop_ns or time.time_ns()):
                self.warn(f"the nsys trace's GPU work ({_fmt_s(lo)} … {_fmt_s(hi)}) lies outside this collection "
                          f"({_fmt_s(self.t_start_ns)} … {_fmt_s(self.t_stop_ns)}): its clock differs; rows kept "
                          "as nsys stamped them")
                self.events.append({"t_ns": self.t_stop_ns, "device": "Host", "event": "nsys-clock-mismatch",
                                    "gpu_span_ns": [lo, hi]})
        out: dict[str, Any] = {"activity": act}
        if len(run.markers):
            out["markers"] = run.markers
        if len(run.samples) and np.isfinite(run.samples["value"].to_numpy()).any():
            out["samples"] = run.samples
        return out

    def _last_error(self) -> str:
        if not self.commands:
            return "not run"
        c = self.commands[-1]
        return c.get("error") or c.get("stderr") or f"exit code {c.get('rc')}"

    def _fail(self, reason: str) -> None:
        self.unsupported.append({"device": "GPU", "metric": "kernel_trace", "reason": reason,
                                 "since_ns": time.time_ns()})
        self.warn(reason)


def _tail(text: str | None, n: int = 300) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:])[-n:]


def _fmt_s(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9)) + " UTC" if ns else "?"
