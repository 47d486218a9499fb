"""The collect loop: ticks, sampler calls, flushes to the bundle's journals, the manifest.

The loop ticks every `interval_ns` on the monotonic clock (a late tick keeps the phase; missed
ticks are counted, not caught up), stamps each tick with CLOCK_REALTIME ns, asks every
sampler for its rows, and appends them to the bundle's journals every FLUSH_NS, so a
collector killed with SIGKILL loses at most that much; the journals become Parquet parts
every SEAL_NS and at the end.  New child processes are looked for every DISCOVER_NS, and a
(CLOCK_REALTIME, CLOCK_MONOTONIC) anchor pair and the manifest are written every ANCHOR_NS.

Nothing here imports numpy, pandas or pyarrow at import time, and nothing is imported once
the loop runs: the bundle writer (perfdiff.bundle) has imported them before the first tick.
"""
from __future__ import annotations

import errno
import gc
import os
import resource
import select
import signal
import time
import traceback
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from perfdiff.collectors.base import RowBuffer
from perfdiff.errors import CollectionError
from perfdiff.model.schema import TABLES

if TYPE_CHECKING:
    from perfdiff.bundle import BundleWriter
    from perfdiff.collectors.markers import MarkerReader
    from perfdiff.collectors.targets import TargetSet

FLUSH_NS = 750_000_000  # rows reach the disk at least this often: a SIGKILL loses less than a second
SEAL_NS = 30_000_000_000  # the journals become Parquet parts this often ...
SEAL_ROWS = 1_000_000  # ... or once a table's journal holds this many rows
ANCHOR_NS = 10_000_000_000  # (REALTIME, MONOTONIC) anchor pairs and manifest refresh
DISCOVER_NS = 200_000_000  # look for new child processes this often
MIN_INTERVAL_NS = 1_000_000
MAX_SAMPLER_ERRORS = 10  # consecutive failures before a sampler is switched off
MAX_ERROR_EVENTS = 20  # error events kept per sampler (the count goes on in "errors")

END_STATUS = {"duration": "complete", "signal": "complete", "command-exited": "complete",
              "target-exited": "target-exited"}


def write_error(exc: OSError, path: Path) -> CollectionError:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc)
    what = "disk full" if full else f"cannot write ({exc.strerror or exc})"
    return CollectionError(f"{what} while writing the bundle", path=path)


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
                 poll_exit: Callable[[], str | None], warn: Callable[[str], None],
                 status: Callable[[dict[str, Any]], None] | None = None):
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
        self.status = status  # called after each flush (about once a second) with the run's progress
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
                if self.status is not None:
                    self.status(self.progress(mono - mono0))
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
        """Queue the marks read so far, keeping only cycles (and the adapters' phases and step
        loads) wholly inside the collection: one begun before the first tick or ended after the
        last lacks part of its samples."""
        taken = self.marks.take()
        lo, hi = self.t_start_ns, self.t_stop_ns or time.time_ns()
        for table, (s_col, e_col) in (("markers", ("start_ns", "end_ns")), ("activity", ("start_ns", "end_ns")),
                                      ("samples", ("t_start_ns", "t_end_ns"))):
            cols = taken.get(table)
            if not cols:
                continue
            keep = [i for i, (s, e) in enumerate(zip(cols[s_col], cols[e_col], strict=True)) if lo <= s and e <= hi]
            if table == "markers":
                self.stats.marks_outside += len(cols[s_col]) - len(keep)
            if len(keep) < len(cols[s_col]):
                cols = {c: [v[i] for i in keep] for c, v in cols.items()}
            if keep:
                self.pending[table].append(cols)

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
        from perfdiff.bundle import journal_rows  # imported with the writer, before the first tick

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
                raise write_error(exc, self.writer.path) from None
        self.stats.flushes += 1

    def progress(self, elapsed_ns: int) -> dict[str, Any]:
        """What the run has done so far: elapsed ns, rows of each table, ticks, late ticks."""
        return {"elapsed_ns": elapsed_ns, "ticks": self.stats.ticks, "overruns": self.stats.overruns,
                **{table: self.writer.rows(table) for table in TABLES}}

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
            raise write_error(exc, self.writer.path) from None

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
            raise write_error(exc, self.writer.path) from None
