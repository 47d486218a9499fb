"""`perfdiff collect`: sample a live process (and its children) into a run bundle.

    perfdiff collect --pid PID [--duration 30s] [--interval 100ms] -o DIR
    perfdiff collect [--duration 30s] [--interval 100ms] -o DIR -- CMD ARGS...

The loop ticks every --interval on the monotonic clock (a late tick keeps the phase; missed
ticks are counted, not caught up), stamps each tick with CLOCK_REALTIME ns, asks every
sampler for its rows, and appends them to the bundle's journals every FLUSH_NS, so a
collector killed with SIGKILL loses at most that much; the journals become Parquet parts every
SEAL_NS and at the end (perfdiff.bundle: an append costs ~50 µs, a Parquet part ~1 ms).  The target set is the root process
and every descendant, re-scanned every DISCOVER_NS so children that start later join.

Ends: SIGINT/SIGTERM/SIGHUP or --duration → status complete; the --pid target exits →
status target-exited; the started CMD exits → status complete (its exit code is recorded; a
started CMD still running at the end gets SIGTERM).  No such pid, no permission, a full disk
→ CollectionError (exit 3) with one line.
"""
from __future__ import annotations

import argparse
import errno
import gc
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from perfdiff.version import __version__
from perfdiff.collectors.base import MISSING, RowBuffer, Sampler
from perfdiff.collectors.host import HostSampler, ProcFS, host_info, parse_task_stat
from perfdiff.collectors.markers import MarkerReader
from perfdiff.collectors.nsys_session import add_collect_options as add_kernel_trace_options
from perfdiff.collectors.nsys_session import check_collect_options as check_kernel_trace_options
from perfdiff.errors import CollectionError, InputError
from perfdiff.model.durations import parse_duration_ns

if TYPE_CHECKING:
    import pyarrow as pa

    from perfdiff.bundle import BundleWriter

# numpy, pandas and pyarrow (through perfdiff.bundle) are imported inside the functions that
# write: they take ~1.5 s to import, and `perfdiff collect --pid 123` should say "no such
# process" at once (and every other perfdiff command imports this module for its parser).
TABLES = ("activity", "samples", "markers")

FLUSH_NS = 750_000_000  # rows reach the disk at least this often: a SIGKILL loses less than a second
SEAL_NS = 30_000_000_000  # the journals become Parquet parts this often ...
SEAL_ROWS = 1_000_000  # ... or once a table's journal holds this many rows
ANCHOR_NS = 10_000_000_000  # (REALTIME, MONOTONIC) anchor pairs and manifest refresh
DISCOVER_NS = 200_000_000  # look for new child processes this often
MIN_INTERVAL_NS = 1_000_000
MAX_SAMPLER_ERRORS = 10  # consecutive failures before a sampler is switched off
MAX_ERROR_EVENTS = 20  # error events kept per sampler (the count goes on in "errors")
STOP_GRACE_S = 5.0  # a started command gets this long after SIGTERM before SIGKILL

END_STATUS = {"duration": "complete", "signal": "complete", "command-exited": "complete",
              "target-exited": "target-exited"}


# ------------------------------------------------------------------------------ targets


@dataclass
class TargetProcess:
    """One process of the target, as the manifest records it."""

    pid: int
    ppid: int
    cmdline: list[str]
    nspid: int
    first_seen_ns: int
    exited_ns: int | None = None


class TargetSet:
    """The root process and its descendants, found by scanning /proc for new pids.

    Only pids not seen before are read (their stat, for the parent pid), so a scan costs one
    listdir of /proc; and a scan is skipped when the host's fork counter ("processes" in
    /proc/stat, every clone since boot) has not moved.  A child that starts and exits between
    two scans is missed.
    """

    def __init__(self, root: int, *, procfs: ProcFS | None = None, exclude: set[int] | None = None):
        self.fs = procfs or ProcFS()
        self.root = root
        self.exclude = set(exclude or ())
        self.live: set[int] = {root}  # replaced, never mutated: samplers may hold the old one
        self.processes: dict[int, TargetProcess] = {}
        self.others: set[int] = set()
        self._root_fd = -1
        self._stat_fd = -1
        self._forks = -1
        self._pidfd = -1
        if self.fs.proc == "/proc" and hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(root)
                self._poll = select.poll()  # registered once: a tick's check is one poll(0)
                self._poll.register(self._pidfd, select.POLLIN)
            except OSError:
                pass  # an older kernel, or the pid is gone: root_alive reads /proc
        now = time.time_ns()
        self.processes[root] = self._describe(root, now) or TargetProcess(root, 0, [], root, now)
        self.discover(now)  # children the root already has

    def pids(self) -> set[int]:
        """The live target pids (the set samplers call each tick)."""
        return self.live

    def _describe(self, pid: int, t_ns: int) -> TargetProcess | None:
        try:
            st = parse_task_stat(self.fs.read(pid, "stat"))
        except (OSError, ValueError, IndexError):
            return None
        return TargetProcess(pid, st.ppid, read_cmdline(self.fs, pid), read_nspid(self.fs, pid), t_ns)

    def _fork_count(self) -> int:
        """The last pid handed out (-1 when unknown: then every scan runs): the 5th field of
        /proc/loadavg, a 40-byte read, where /proc/stat's clone count formats the whole file
        (every CPU and interrupt).  Every fork and thread creation moves it."""
        try:
            if self._stat_fd < 0:
                self._stat_fd = os.open(os.path.join(self.fs.proc, "loadavg"), os.O_RDONLY | os.O_CLOEXEC)
            return int(os.pread(self._stat_fd, 256, 0).split()[4])
        except (OSError, ValueError, IndexError):
            return -1

    def discover(self, t_ns: int) -> list[TargetProcess]:
        """Scan /proc; returns the processes that joined the target set."""
        forks = self._fork_count()
        if forks >= 0 and forks == self._forks:
            return []  # no process (nor thread) was started anywhere since the last scan
        self._forks = forks
        try:
            current = {int(n) for n in os.listdir(self.fs.proc) if n.isdigit()}
        except OSError:
            return []
        self.others &= current
        gone = self.live - current
        for pid in gone:
            self.processes[pid].exited_ns = t_ns
        live = self.live - gone
        fresh = []
        for pid in current - live - self.others - self.exclude:
            try:
                st = parse_task_stat(self.fs.read(pid, "stat"))
            except (OSError, ValueError, IndexError):
                continue
            fresh.append((st.starttime, pid, st.ppid))
        joined = []
        # Oldest first, so a child and its grandchild found in the same scan both join.
        for _, pid, ppid in sorted(fresh):
            if ppid in live:
                proc = self._describe(pid, t_ns) or TargetProcess(pid, ppid, [], pid, t_ns)
                self.processes[pid] = proc
                live.add(pid)
                joined.append(proc)
            else:
                self.others.add(pid)
        if gone or joined:
            self.live = live
        return joined

    def root_alive(self) -> bool:
        """False once the root process has exited (a zombie counts as exited).

        Asked every tick: with a pidfd (Linux 5.3+) that is a zero-timeout poll, ~1 µs; else
        a read and parse of the root's stat."""
        if self._pidfd >= 0:
            if not self._poll.poll(0):
                return True  # readable once the process has exited
            self._poll.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1  # exited (or reaped): confirm below, as without a pidfd
        path = os.path.join(self.fs.proc, str(self.root), "stat")
        try:
            if self._root_fd < 0:
                self._root_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            raw = os.pread(self._root_fd, 4096, 0)
            return bool(raw) and parse_task_stat(raw).state not in ("Z", "X")
        except (OSError, ValueError, IndexError):
            return False

    def close(self) -> None:
        for fd in (self._root_fd, self._stat_fd, self._pidfd):
            if fd >= 0:
                os.close(fd)
        self._root_fd = self._stat_fd = self._pidfd = -1

    def manifest(self) -> dict[str, Any]:
        return {
            "children": sorted(p for p in self.processes if p != self.root),
            "processes": [vars(p) for p in sorted(self.processes.values(), key=lambda p: p.first_seen_ns)],
        }


def read_cmdline(fs: ProcFS, pid: int) -> list[str]:
    try:
        raw = fs.read(pid, "cmdline")
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def read_nspid(fs: ProcFS, pid: int) -> int:
    """The pid as the process itself sees it (innermost PID namespace)."""
    try:
        for line in fs.read(pid, "status").split(b"\n"):
            if line.startswith(b"NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def check_target(pid: int, fs: ProcFS | None = None) -> None:
    """Raise CollectionError (one line) unless `pid` is a live process we may collect from."""
    fs = fs or ProcFS()
    if pid <= 0:
        raise CollectionError(f"no such process: pid {pid}")
    if pid == os.getpid():
        raise CollectionError(f"pid {pid} is this collector")
    try:
        st = parse_task_stat(fs.read(pid, "stat"))
    except FileNotFoundError:
        raise CollectionError(f"no such process: pid {pid} (or hidden from this user by a hidepid /proc mount)") from None
    except PermissionError:
        raise CollectionError(f"no permission to read /proc/{pid}/stat") from None
    except (OSError, ValueError, IndexError):
        raise CollectionError(f"no such process: pid {pid}") from None
    if st.state in ("Z", "X"):
        raise CollectionError(f"pid {pid} has already exited (zombie)")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise CollectionError(f"no such process: pid {pid}") from None
    except PermissionError:
        owner = _owner(fs, pid)
        raise CollectionError(
            f"no permission to collect from pid {pid} (owned by uid {owner}, this is uid {os.geteuid()}): "
            "run perfdiff as that user or as root") from None
    try:
        os.listdir(os.path.join(fs.proc, str(pid), "task"))
    except PermissionError:
        raise CollectionError(f"no permission to list the threads of pid {pid} (/proc/{pid}/task)") from None


def _owner(fs: ProcFS, pid: int) -> str:
    try:
        return str(os.stat(os.path.join(fs.proc, str(pid))).st_uid)
    except OSError:
        return "?"


# ------------------------------------------------------------------------------ writing


def _frame_to_arrow(table: str, df: Any) -> pa.Table:
    """A sampler's DataFrame in the journal schema of `table`; NaN samples dropped (unknown)."""
    import numpy as np
    import pyarrow as pa

    from perfdiff.bundle import SCHEMAS, journal_schema, normalize_table

    df = normalize_table(table, df)
    if table == "samples":
        df = df[np.isfinite(df["value"].to_numpy())]
    arrays = []
    for col, kind in SCHEMAS[table].items():
        values = df[col]
        if kind == "str":
            arrays.append(pa.array(values.astype(str).to_numpy(dtype=object), type=pa.string()))
        elif kind == "i8?":
            v = values.to_numpy(dtype=np.int64)
            arrays.append(pa.array(v, type=pa.int64(), mask=v == MISSING))
        else:
            arrays.append(pa.array(values.to_numpy(), type=journal_schema(table).field(col).type))
    return pa.Table.from_arrays(arrays, schema=journal_schema(table))


def journal_rows(table: str, chunks: list[Any]) -> tuple[dict[str, list[Any]], pa.Table | None]:
    """Buffered chunks of one table → (the Columns chunks merged into one, every column there
    with MISSING for an absent one, or a lone Columns chunk as it is; the DataFrame chunks as
    one Arrow table in the journal schema or None): what BundleWriter.journal takes."""
    import pyarrow as pa

    from perfdiff.bundle import merge_columns

    columns = [c for c in chunks if isinstance(c, dict)]
    frames = [_frame_to_arrow(table, c) for c in chunks if not isinstance(c, dict)]
    if len(columns) == 1 and len(frames) == 0:
        return columns[0], None  # the usual flush (the host sampler's rows): no copy
    merged = merge_columns(table, columns, unknown=MISSING) if columns else {}
    return merged, (pa.concat_tables(frames) if frames else None)


def open_writer(path: Path, manifest: dict[str, Any]) -> BundleWriter:
    """A BundleWriter whose every table has a part from the start, so a bundle killed at any
    moment loads (the loader needs at least one part per table)."""
    from perfdiff.bundle import SCHEMAS, BundleWriter, empty_table

    writer = BundleWriter(path, manifest)
    for table in SCHEMAS:
        writer.append(table, empty_table(table))
    return writer


def _write_error(exc: OSError, path: Path) -> CollectionError:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc)
    what = "disk full" if full else f"cannot write ({exc.strerror or exc})"
    return CollectionError(f"{what} while writing the bundle", path=path)


# ------------------------------------------------------------------------------ collection


@dataclass
class _SamplerSlot:
    sampler: Any
    every: int = 1  # called every this many ticks (a sampler with a longer interval_ns)
    errors: int = 0
    failures: int = 0
    disabled: bool = False
    # A sampler with `tick(t_ns)` and `take()` keeps its rows between flushes (the host
    # sampler: turning a tick's rows into columns at every tick costs more than the reading).
    buffered: bool = False


@dataclass
class CollectStats:
    """How the loop itself did (manifest "collection")."""

    interval_ns: int
    ticks: int = 0
    overruns: int = 0  # ticks skipped because the previous one ran late
    flushes: int = 0
    lateness_ns: array = field(default_factory=lambda: array("q"))
    cpu_ns: int = 0
    wall_ns: int = 0
    marks_outside: int = 0  # marks dropped: begun before the first tick or ended after the last

    def manifest(self) -> dict[str, Any]:
        import numpy as np

        late = np.frombuffer(self.lateness_ns, dtype=np.int64) if len(self.lateness_ns) else np.zeros(1, np.int64)
        return {
            "interval_ns": self.interval_ns,
            "flush_ns": FLUSH_NS,
            "ticks": self.ticks,
            "overruns": self.overruns,
            "flushes": self.flushes,
            "jitter_p50_ns": int(np.percentile(late, 50)),
            "jitter_p99_ns": int(np.percentile(late, 99)),
            "jitter_max_ns": int(late.max()),
            "cpu_ns": self.cpu_ns,
            "wall_ns": self.wall_ns,
            "cpu_share": self.cpu_ns / self.wall_ns if self.wall_ns else None,
            "marks_outside": self.marks_outside,
        }


def _row_count(chunk: Any) -> int:
    """Rows of a Columns dict or a DataFrame (0 for None)."""
    if chunk is None:
        return 0
    if isinstance(chunk, dict):
        return len(next(iter(chunk.values()), ()))
    return len(chunk)


def _cpu_ns() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


class Collection:
    """One run of `perfdiff collect`: the samplers, the loop, the bundle.

    `samplers` are called every tick (a sampler with a longer interval_ns less often);
    `markers` is read at every flush.  `poll_exit` says whether the target has ended (and
    how: "target-exited" or "command-exited"), `None` while it runs.
    """

    def __init__(self, writer: BundleWriter, targets: TargetSet, samplers: list[Any], *,
                 interval_ns: int, duration_ns: int | None, markers: MarkerReader | None,
                 poll_exit: Callable[[], str | None], warn: Callable[[str], None]):
        self.writer = writer
        self.targets = targets
        self.slots = [_SamplerSlot(s, max(1, round((getattr(s, "interval_ns", 0) or interval_ns) / interval_ns)),
                                   buffered=callable(getattr(s, "tick", None)) and callable(getattr(s, "take", None)))
                      for s in samplers]
        self.interval_ns = interval_ns
        self.duration_ns = duration_ns
        self.markers = markers
        self.poll_exit = poll_exit
        self.warn = warn
        self.pending: dict[str, list[Any]] = {t: [] for t in TABLES}
        self.marks = RowBuffer()
        self.stats = CollectStats(interval_ns)
        self.events: list[dict[str, Any]] = []
        self.anchors: list[dict[str, int]] = []
        self.end_reason = ""
        self.signal_name = ""
        self.t_start_ns = 0
        self.t_stop_ns = 0
        self._wake_r = self._wake_w = -1
        self._old_signals: dict[int, Any] = {}

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.end_reason:
            self.end_reason = "signal"
            self.signal_name = signal.Signals(signum).name

    def _install_signals(self) -> dict[int, Any]:
        # The wake-up pipe turns a signal into a readable byte, so the tick wait ends at once.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        old[-1] = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        return old

    def _restore_signals(self) -> None:
        old, self._old_signals = self._old_signals, {}
        if not old:
            return
        signal.set_wakeup_fd(old.pop(-1))
        for s, h in old.items():
            signal.signal(s, h)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # ------------------------------------------------------------------ loop

    def run(self) -> str:
        """Collect until the duration, a signal or the target's end; returns the status.

        The signal handlers stay until `finish` has sealed the bundle (a second Ctrl-C must
        not leave it half written); `finish` or an error here puts the old ones back.
        """
        self._old_signals = self._install_signals()
        try:
            self._loop()
        except BaseException:
            self._restore_signals()
            raise
        return END_STATUS.get(self.end_reason, "complete")

    def _anchor(self) -> None:
        self.anchors.append({"realtime_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()})

    def _loop(self) -> None:
        interval = self.interval_ns
        gc.collect()
        gc.freeze()  # the imported libraries' objects: never scanned again (no GC pauses)
        self._anchor()
        self.t_start_ns = t_ns = time.time_ns()
        for slot in self.slots:
            self._call(slot, "start", t_ns, t_ns)
        self.write_manifest()  # start time, anchor, collectors: there even after a SIGKILL
        mono0 = time.monotonic_ns()
        deadline = mono0 + self.duration_ns if self.duration_ns else None
        next_tick = mono0 + interval
        next_flush = mono0 + FLUSH_NS
        next_seal = mono0 + SEAL_NS
        next_discover = mono0 + DISCOVER_NS
        next_anchor = mono0 + ANCHOR_NS
        cpu0 = _cpu_ns()
        while not self.end_reason:
            delay = next_tick - time.monotonic_ns()
            if delay > 0:
                select.select([self._wake_r], [], [], delay / 1e9)
                if self.end_reason:
                    break
            mono = time.monotonic_ns()
            t_ns = time.time_ns()
            self.stats.lateness_ns.append(mono - next_tick)
            self.stats.ticks += 1
            self._tick(t_ns)
            if mono >= next_discover:
                next_discover = mono + DISCOVER_NS
                self._discover(t_ns)
            ended = self.poll_exit()
            if ended:
                self.end_reason = ended
            elif deadline is not None and mono >= deadline - interval // 2:
                self.end_reason = "duration"
            if mono >= next_flush or self.end_reason:
                next_flush = mono + FLUSH_NS
                seal = mono >= next_seal
                if seal:
                    next_seal = mono + SEAL_NS
                self.flush(seal)
            if mono >= next_anchor:
                next_anchor = mono + ANCHOR_NS
                self._anchor()
                self.write_manifest()
            next_tick += interval
            now = time.monotonic_ns()
            if now >= next_tick:  # late: keep the phase, count what was skipped
                missed = (now - next_tick) // interval + 1
                self.stats.overruns += missed
                next_tick += missed * interval
        self.t_stop_ns = time.time_ns()
        self.stats.cpu_ns = _cpu_ns() - cpu0
        self.stats.wall_ns = time.monotonic_ns() - mono0
        gc.unfreeze()
        self._anchor()

    def _call(self, slot: _SamplerSlot, method: str, t_ns: int, *args: Any) -> Any:
        """Call a sampler method with `args`; an exception is recorded at `t_ns`, never fatal
        to the collection."""
        try:
            result = getattr(slot.sampler, method)(*args)
            if method in ("sample", "tick"):  # only a good tick ends a run of failing ticks
                slot.failures = 0
            return result
        except Exception as exc:  # noqa: BLE001 - one sampler's bug must not end the run
            slot.errors += 1
            slot.failures += 1
            if slot.errors <= MAX_ERROR_EVENTS:
                where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
                self.events.append({
                    "t_ns": t_ns, "device": getattr(slot.sampler, "name", "?"), "event": "sampler-error",
                    "method": method, "error": f"{type(exc).__name__}: {exc}",
                    "at": f"{Path(where.filename).name}:{where.lineno}" if where else "",
                })
            if slot.errors == 1:
                self.warn(f"sampler {getattr(slot.sampler, 'name', '?')} failed in {method}: "
                          f"{type(exc).__name__}: {exc} (recorded in the manifest; collection goes on)")
            if method == "start" or slot.failures >= MAX_SAMPLER_ERRORS:
                slot.disabled = True
                self.events.append({"t_ns": t_ns, "device": getattr(slot.sampler, "name", "?"),
                                    "event": "sampler-disabled", "after_errors": slot.errors})
            return None

    def _tick(self, t_ns: int) -> None:
        n = self.stats.ticks
        for slot in self.slots:
            if slot.disabled or n % slot.every:
                continue
            if slot.buffered:  # keeps its rows until the flush takes them
                self._call(slot, "tick", t_ns, t_ns)
                continue
            self._queue(self._call(slot, "sample", t_ns, t_ns))

    def _queue(self, rows: dict[str, Any] | None) -> None:
        for table, chunk in (rows or {}).items():
            if table in self.pending and _row_count(chunk):
                self.pending[table].append(chunk)

    def _discover(self, t_ns: int) -> None:
        for proc in self.targets.discover(t_ns):
            if self.markers is not None:
                self.markers.watch(proc.pid, proc.nspid)
            for slot in self.slots:  # collect --pid: a child running its own perfdiff agent
                watch = getattr(slot.sampler, "watch", None)
                if watch is not None and not slot.disabled:
                    watch(proc.pid, proc.nspid)

    def stop_sources(self) -> None:
        """Last rows of the sources that hand theirs over at the end (kernel traces: agents'
        forced flush, nsys stop + export + import).  Called after the loop and before a started
        command is stopped: nsys needs its session, agents answer while their process lives."""
        t_ns = time.time_ns()
        for slot in self.slots:
            if slot.disabled or not callable(getattr(slot.sampler, "stop", None)):
                continue
            self._queue(self._call(slot, "stop", t_ns, t_ns))

    # ------------------------------------------------------------------ bundle

    def _take_marks(self) -> None:
        """Queue the marks read so far, keeping only cycles wholly inside the collection: a
        cycle begun before the first tick or ended after the last lacks part of its samples."""
        cols = self.marks.take().get("markers")
        if not cols:
            return
        lo, hi = self.t_start_ns, self.t_stop_ns or time.time_ns()
        keep = [i for i, (s, e) in enumerate(zip(cols["start_ns"], cols["end_ns"], strict=True)) if lo <= s and e <= hi]
        self.stats.marks_outside += len(cols["start_ns"]) - len(keep)
        if len(keep) < len(cols["start_ns"]):
            cols = {c: [v[i] for i in keep] for c, v in cols.items()}
        if keep:
            self.pending["markers"].append(cols)

    def _read_marks(self) -> None:
        if self.markers is not None:
            self.markers.read(self.marks)
            self._take_marks()

    def flush(self, seal: bool = False) -> None:
        """Append everything buffered to the tables' journals; `seal`: also turn every journal
        into a Parquet part (so does a journal past SEAL_ROWS).  Raises CollectionError on
        disk errors."""
        self._read_marks()
        t_ns = time.time_ns()
        for slot in self.slots:
            if slot.buffered:  # a disabled one too: what it read before it failed
                self._queue(self._call(slot, "take", t_ns))
        for table, chunks in self.pending.items():
            try:
                if chunks:
                    merged, frames = journal_rows(table, chunks)
                    self.pending[table] = []
                    if merged:
                        self.writer.journal(table, merged)
                    if frames is not None:
                        self.writer.journal(table, frames)
                if seal or self.writer.journaled_rows(table) >= SEAL_ROWS:
                    self.writer.seal_journal(table)
            except OSError as exc:
                raise _write_error(exc, self.writer.path) from None
        self.stats.flushes += 1

    def manifest_fields(self) -> dict[str, Any]:
        """The manifest entries that change during the run."""
        collectors: list[dict[str, Any]] = [{"name": "collect", "interval_ns": self.interval_ns}]
        unsupported: list[dict[str, Any]] = []
        gpus: list[dict[str, Any]] = []
        dropped: dict[str, int] = {}
        events = list(self.events)
        for slot in self.slots:
            frag = self._fragment(slot)
            for key, n in (frag.get("dropped") or {}).items():
                dropped[key] = dropped.get(key, 0) + int(n)
            info = dict(frag.get("collector") or {"name": getattr(slot.sampler, "name", "?")})
            if slot.errors:
                info["errors"] = slot.errors
            if slot.disabled:
                info["disabled"] = True
            collectors.append(info)
            unsupported.extend(frag.get("unsupported") or [])
            gpus.extend(frag.get("gpus") or [])
            events.extend(frag.get("events") or [])
        if self.markers is not None:
            collectors.append(self.markers.manifest())
        target = dict(self.writer.manifest.get("target") or {})
        target.update(self.targets.manifest())
        return {
            "collectors": collectors,
            "unsupported": unsupported,
            "dropped": dropped,
            "gpus": gpus or self.writer.manifest.get("gpus", []),
            "events": sorted(events, key=lambda e: e.get("t_ns", 0)),
            "clock": {"domain": "CLOCK_REALTIME", "anchors": self.anchors},
            "target": target,
            "collection": {**self.stats.manifest(), "start_ns": self.t_start_ns, "stop_ns": self.t_stop_ns,
                           "end_reason": self.end_reason, "signal": self.signal_name},
        }

    def _fragment(self, slot: _SamplerSlot) -> dict[str, Any]:
        try:
            return slot.sampler.manifest() or {}
        except Exception as exc:  # noqa: BLE001 - same rule as sample()
            return {"collector": {"name": getattr(slot.sampler, "name", "?"),
                                  "manifest_error": f"{type(exc).__name__}: {exc}"}}

    def write_manifest(self) -> None:
        try:
            self.writer.update_manifest(**self.manifest_fields())
        except OSError as exc:
            raise _write_error(exc, self.writer.path) from None

    def finish(self, status: str, warnings: list[str] | None = None, **target_fields: Any) -> None:
        """Last marks, last rows, close the samplers, seal the bundle with `status`.

        `warnings` (lines already shown to the user) and `target_fields` go into the manifest.
        """
        try:
            self._finish(status, warnings, target_fields)
        finally:
            self._restore_signals()

    def _finish(self, status: str, warnings: list[str] | None, target_fields: dict[str, Any]) -> None:
        if self.markers is not None:
            self.markers.close(self.marks)
            self._take_marks()
        for slot in self.slots:
            try:
                slot.sampler.close()
            except Exception as exc:  # noqa: BLE001
                self.events.append({"t_ns": time.time_ns(), "device": getattr(slot.sampler, "name", "?"),
                                    "event": "sampler-error", "method": "close",
                                    "error": f"{type(exc).__name__}: {exc}"})
        self.flush(seal=True)
        self.targets.close()
        fields = self.manifest_fields()
        fields["target"].update(target_fields)
        fields["warnings"] = list(warnings or [])
        try:
            self.writer.update_manifest(**fields)  # on disk before the sealing, which may fail
            self.writer.close(status)
        except OSError as exc:
            raise _write_error(exc, self.writer.path) from None


# ------------------------------------------------------------------------------ CLI


def _gpu_sampler(pids: Callable[[], set[int]], gpus: list[int] | None, interval_ns: int,
                 warn: Callable[[str], None], proc_root: str = "/proc") -> Sampler | None:
    try:
        from perfdiff.collectors.gpu import open_gpu_sampler
    except ModuleNotFoundError as exc:
        if exc.name == "perfdiff.collectors.gpu":
            return None  # GPU collection not built into this perfdiff
        warn(f"GPU collection off: {exc}")
        return None
    except ImportError as exc:
        warn(f"GPU collection off: {exc}")
        return None
    return open_gpu_sampler(pids, gpus=gpus, interval_ns=interval_ns, warn=warn, proc_root=proc_root)


def _kernel_trace_source(args: argparse.Namespace, cmd: list[str], out: Path, fs: ProcFS,
                         warn: Callable[[str], None]) -> Any:
    """Where kernels come from: nsys (--nsys), the perfdiff agent in the command (-- CMD) or in
    the running target (--pid; says plainly when it has none), or nothing (--no-kernel-trace)."""
    if args.no_kernel_trace:
        return None
    if args.nsys:
        from perfdiff.collectors.nsys_session import NsysSession

        return NsysSession(out / "nsys", warn=warn, trace=args.nsys_trace)
    from perfdiff.collectors.cupti.reader import AgentTraceSource

    if cmd:
        return AgentTraceSource.announce(warn)
    return AgentTraceSource.attach(args.pid, warn, proc_root=fs.proc, nspid=read_nspid(fs, args.pid))


def _parse_gpus(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {text!r} (e.g. 0,1)") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {text!r} (e.g. 0,1)")
    return out


def add_collect_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `perfdiff collect` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "collect", help="sample a live process (--pid PID, or -- CMD ARGS...) into a run bundle",
        description="Sample a running process and its children (--pid PID), or start one "
                    "(-- CMD ARGS...), into a run bundle that `perfdiff compare` reads.")
    p.add_argument("--pid", type=int, default=None, help="process to collect from (and its children)")
    p.add_argument("--duration", default=None, metavar="DURATION",
                   help="stop after this long, e.g. 30s, 500ms (default: until Ctrl-C or the target ends)")
    p.add_argument("--interval", default="100ms", metavar="DURATION", help="sampling period (100ms)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="bundle directory to create")
    p.add_argument("--gpus", type=_parse_gpus, default=None, metavar="LIST",
                   help="GPU indexes to sample, e.g. 0,1 (default: the GPUs the target uses)")
    add_kernel_trace_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="command to start and collect from until it exits")
    p.set_defaults(func=cmd_collect)


def _warn(collected: list[str]) -> Callable[[str], None]:
    def warn(msg: str) -> None:
        collected.append(msg)
        print(f"perfdiff: warning: {msg}", file=sys.stderr, flush=True)
    return warn


def _prepare_output(path: Path) -> bool:
    """Refuse a non-empty output directory before anything starts; True when it exists (empty)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InputError("output exists and is not an empty directory", path=path)
    return path.exists()


def cmd_collect(args: argparse.Namespace) -> int:
    """perfdiff collect (--pid PID | -- CMD ARGS...) -o DIR: returns the exit code (0)."""
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if (args.pid is None) == (not cmd):
        raise InputError("collect: give either --pid PID or -- CMD ARGS...")
    check_kernel_trace_options(args, cmd)
    interval_ns = parse_duration_ns(args.interval)
    if interval_ns < MIN_INTERVAL_NS:
        raise InputError(f"collect: --interval {args.interval} is below the 1ms minimum")
    duration_ns = parse_duration_ns(args.duration) if args.duration else None
    out = Path(args.output)
    out_existed = _prepare_output(out)
    fs = ProcFS()
    if args.pid is not None:
        check_target(args.pid, fs)
    elif shutil.which(cmd[0]) is None:
        raise CollectionError(f"cannot start {cmd[0]!r}: No such file or directory (or not executable)")
    warnings: list[str] = []
    warn = _warn(warnings)

    # Everything slow (imports, the bundle, GPU initialisation) happens before a command is
    # started, so the collection sees it from its first instruction.  The samplers get the
    # target pids through `pids`, which answers once the target set exists.
    holder: list[TargetSet] = []

    def pids() -> set[int]:
        return holder[0].pids() if holder else set()

    samplers: list[Any] = [HostSampler(pids, interval_ns=interval_ns, procfs=fs)]
    gpu = _gpu_sampler(pids, args.gpus, interval_ns, warn, proc_root=fs.proc)  # a bad --gpus raises before any output
    if gpu is not None:
        samplers.append(gpu)
    kernels = _kernel_trace_source(args, cmd, out, fs, warn)  # no nsys on PATH: CollectionError, nothing started
    if kernels is not None:
        samplers.append(kernels)
    markers = MarkerReader.announce() if cmd else MarkerReader.attach(args.pid, proc_root=fs.proc)
    manifest = {
        "source": {"kind": "collect", "perfdiff_version": __version__, "argv": sys.argv},
        "target": {"mode": "command" if cmd else "pid", "command": cmd},
        "host": host_info(fs),
    }
    try:
        writer = open_writer(out, manifest)
    except OSError as exc:
        markers.close()
        for sampler in samplers:
            sampler.close()
        raise CollectionError(f"cannot create the bundle ({exc.strerror or exc})", path=out) from None

    child: subprocess.Popen[bytes] | None = None
    try:
        if cmd:
            try:
                env = {**os.environ, **markers.env()}
                launch = cmd
                if kernels is not None and hasattr(kernels, "env"):
                    env.update(kernels.env(env))  # the perfdiff agent in every Python process of the command
                if kernels is not None and hasattr(kernels, "wrap"):
                    launch = kernels.wrap(cmd)  # nsys launch --session-new=... CMD
                child = subprocess.Popen(launch, env=env)
            except OSError as exc:
                markers.close()
                if kernels is not None:
                    kernels.close()
                _remove_bundle(out, out_existed)
                raise CollectionError(f"cannot start {cmd[0]!r}: {exc.strerror or exc}") from None
        root = child.pid if child is not None else args.pid
        targets = TargetSet(root, procfs=fs, exclude={os.getpid()})
        holder.append(targets)
        info = targets.processes[root]
        writer.manifest["target"].update(pid=root, cmdline=info.cmdline, nspid=info.nspid, uid=_uid(fs, root))
        markers.watch(root, info.nspid)
        return _run(writer, targets, samplers, markers, child, interval_ns, duration_ns, warn, warnings)
    finally:
        if child is not None and child.poll() is None:
            _stop_child(child)


def _run(writer: BundleWriter, targets: TargetSet, samplers: list[Any], markers: MarkerReader,
         child: subprocess.Popen[bytes] | None, interval_ns: int, duration_ns: int | None,
         warn: Callable[[str], None], warnings: list[str]) -> int:
    """The collection proper, from the first tick to the sealed bundle."""

    def poll_exit() -> str | None:
        if child is not None:
            return "command-exited" if child.poll() is not None else None
        return None if targets.root_alive() else "target-exited"

    run = Collection(writer, targets, samplers, interval_ns=interval_ns, duration_ns=duration_ns,
                     markers=markers, poll_exit=poll_exit, warn=warn)
    try:
        status = run.run()
        run.stop_sources()
        extra: dict[str, Any] = {}
        if child is not None:
            if child.poll() is None:
                _stop_child(child)
                extra["stopped_by_collector"] = True
            extra["exit_code"] = child.returncode
        run.finish(status, warnings, **extra)
    except CollectionError:
        markers.close()  # what was written stays: it loads (status "running" reads as interrupted)
        for sampler in samplers:
            if getattr(sampler, "name", "") in ("kernel-trace", "nsys"):
                sampler.close()  # the agent hand-off directory in /dev/shm, the nsys session
        raise
    c, files = writer.manifest["collection"], writer.manifest["files"]
    print(f"perfdiff: wrote {writer.path} (status {status}, {c['end_reason']}: {c['ticks']} ticks of "
          f"{interval_ns / 1e6:g} ms, {files['activity']['rows']:,} activity rows, "
          f"{files['samples']['rows']:,} samples, {files['markers']['rows']:,} marks)", file=sys.stderr)
    return 0


def _remove_bundle(path: Path, keep_dir: bool) -> None:
    """Undo open_writer (the output was absent or empty before)."""
    shutil.rmtree(path, ignore_errors=True)
    if keep_dir:
        path.mkdir(exist_ok=True)


def _uid(fs: ProcFS, pid: int) -> int | None:
    try:
        return os.stat(os.path.join(fs.proc, str(pid))).st_uid
    except OSError:
        return None


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the started command, SIGKILL it after STOP_GRACE_S, and reap it."""
    try:
        child.terminate()
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except OSError:
        pass
