"""Collector side of the CUPTI agent: its hand-off files (wire) read into bundle rows.

AgentTraceSource reads every agent's files into rows — activity of kinds kernel, memcpy,
memset (launch_ns and tid joined from the RUNTIME call with the same correlation id) and api;
NVTX ranges as markers (source "nvtx") and, at stop, as kind "cpu" rows with their self time.
Times are CLOCK_REALTIME ns (``cupti_to_wall``).  It follows the collect loop's sampler
protocol (start, sample, manifest, close) and adds ``stop()`` for the last rows.  numpy,
pandas and perfdiff.model are imported inside the functions: `collect` starts fast.
"""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable

from perfdiff.collectors.cupti.wire import (ENV_DIR, ENV_FILE, ENV_MARKER_FILE, ENV_WIRE, K_API, K_KERNEL, K_MEMCPY, K_MEMSET,
                                            K_RANGE, KIND_NAMES, REC, WIRE_VERSION, default_agent_dir, request)
from perfdiff import marker as _marker
from perfdiff.collectors.markers import other_mount_ns, target_env, target_uid

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["AgentTraceSource", "BOOTSTRAP_FILE", "cupti_to_wall", "record_dtype"]

_HERE = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP_FILE = os.path.join(_HERE, "sitecustomize.py")  # copied into the command's PYTHONPATH
AGENT_FILE = os.path.join(_HERE, "agent.py")  # loaded by path where perfdiff is not importable
MARKER_FILE = _marker.__file__  # likewise, for the framework adapters' records

POLL_NS = 500_000_000  # the collector reads the files this often
RETAIN_API = 1 << 20  # runtime calls kept for the launch join of GPU records arriving later
SAME_CLOCK_NS = 20_000  # anchors this close: CUPTI already reads CLOCK_REALTIME, leave as is


def record_dtype() -> np.dtype:
    """The numpy view of REC (48 bytes, little-endian)."""
    import numpy as np

    return np.dtype({"names": ["kind", "name", "start", "end", "corr", "stream", "device", "tid", "bytes"],
                     "formats": ["u1", "<u4", "<i8", "<i8", "<u4", "<u4", "<u4", "<u4", "<u8"],
                     "offsets": [0, 4, 8, 16, 24, 28, 32, 36, 40], "itemsize": REC.size})


def cupti_to_wall(raw_ns: np.ndarray, anchors: list[dict[str, Any]]) -> tuple[np.ndarray, dict[str, Any]]:
    """CUPTI ns → CLOCK_REALTIME ns with the agent's anchor pairs; (times, what was done).

    Anchors closer than SAME_CLOCK_NS (or twice their reading uncertainty) mean CUPTI reads
    CLOCK_REALTIME already (Linux): the times stay as they are.  Otherwise the offset is
    interpolated linearly between anchors (constant beyond them), in integer ns.
    """
    import numpy as np

    raw = np.asarray(raw_ns, dtype=np.int64)
    pairs = sorted((int(a["cupti_ns"]), int(a["realtime_ns"]) - int(a["cupti_ns"]), int(a.get("uncertainty_ns", 0)))
                   for a in anchors if "cupti_ns" in a and "realtime_ns" in a)
    if not pairs:
        return raw, {"applied": False, "why": "no clock anchors: CUPTI times taken as CLOCK_REALTIME"}
    c = np.array([p[0] for p in pairs], dtype=np.int64)
    off = np.array([p[1] for p in pairs], dtype=np.int64)
    tol = max(SAME_CLOCK_NS, 2 * max(p[2] for p in pairs))
    info = {"anchors": len(pairs), "offset_ns_first": int(off[0]), "offset_ns_last": int(off[-1]),
            "drift_ns": int(off[-1] - off[0]), "tolerance_ns": tol}
    if int(np.abs(off).max()) <= tol:
        return raw, {**info, "applied": False, "why": "CUPTI reads CLOCK_REALTIME"}
    base = int(off[0])
    shift = np.rint(np.interp(raw.astype(np.float64), c.astype(np.float64), (off - base).astype(np.float64)))
    return raw + base + shift.astype(np.int64), {**info, "applied": True}


class _Spool:
    """One agent's files as the collector reads them, and what spans polls (names, launches)."""

    def __init__(self, directory: str, file_pid: int, pid: int):
        import numpy as np

        self.directory = directory
        self.file_pid = file_pid  # the pid the agent sees (names its files)
        self.pid = pid  # the pid the collector sees
        self.rec_off = 0
        self.names_off = 0
        self.names_partial = b""
        self.names: dict[int, str] = {}
        self.status: dict[str, Any] = {}
        dt = record_dtype()
        self.held = np.zeros(0, dtype=dt)  # GPU records waiting one poll for their runtime call
        self.api_corr = np.zeros(0, np.int64)  # recent runtime calls, for the launch join
        self.api_start = np.zeros(0, np.int64)
        self.api_tid = np.zeros(0, np.int64)
        self.ranges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # for cpu rows at stop
        self.rows = {name: 0 for name in KIND_NAMES.values()}
        self.invalid = 0  # records with no valid time (incomplete at a forced flush)
        self.unjoined = 0  # GPU records whose runtime call was never seen
        self.ranges_before_start = 0
        self.clock: dict[str, Any] = {}
        self.warned: set[str] = set()

    def path(self, suffix: str) -> str:
        return os.path.join(self.directory, f"{self.file_pid}.{suffix}")

    def read_status(self) -> dict[str, Any]:
        try:
            with open(self.path("status.json"), encoding="utf-8") as fh:
                st = json.load(fh)
            if isinstance(st, dict):
                self.status = st
        except (OSError, ValueError):
            pass
        return self.status

    def read_records(self) -> np.ndarray:
        """The whole records appended since the last read, then the names they use."""
        import numpy as np

        data = _read_from(self.path("rec"), self.rec_off)
        n = len(data) // REC.size
        self.rec_off += n * REC.size
        recs = np.frombuffer(data[: n * REC.size], dtype=record_dtype()).copy()
        # Names are read after the records: the agent writes a name before any record using it.
        raw = self.names_partial + _read_from(self.path("names"), self.names_off)
        self.names_off += len(raw) - len(self.names_partial)
        cut = raw.rfind(b"\n") + 1
        self.names_partial = raw[cut:]
        for line in raw[:cut].decode("utf-8", "replace").splitlines():
            nid, _, name = line.partition("\t")
            if nid.isdigit():
                self.names[int(nid)] = name
        return recs if n else np.zeros(0, dtype=record_dtype())


def _read_from(path: str, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


class AgentTraceSource:
    """Kernel traces from perfdiff agents in the target, as rows for the collect loop.

    Announced (`collect -- CMD`): ``announce()`` makes a private directory and ``env()`` the
    variables for the command; every Python process of the command writes its own files there.
    Attached (`collect --pid`): ``attach(pid)`` finds the agent's socket (or says plainly that
    there is none); ``watch(pid)`` adds a child that runs its own agent.  The collect loop calls
    ``start(t_ns)``, ``sample(t_ns)`` every `interval_ns`, ``stop()`` once at the end (before a
    started command is stopped: agents are asked to flush), then ``manifest()`` and ``close()``.
    """

    name = "kernel-trace"
    interval_ns = POLL_NS

    def __init__(self, directory: str, *, announced: bool, warn: Callable[[str], None],
                 remove_dir: bool = False):
        self.directory = directory
        self.announced = announced
        self.warn = warn
        self.remove_dir = remove_dir
        self.spools: dict[int, _Spool] = {}
        self.sockets: dict[int, str] = {}  # attached mode: pid → its agent's socket
        self.t_start_ns = 0
        self.stopped = False
        self.unsupported: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.absent = ""  # attached mode: why there is no agent
        self.remote: Any = None  # attached mode: the loader that put the agent into the target
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ set-up

    @classmethod
    def announce(cls, warn: Callable[[str], None]) -> AgentTraceSource:
        """A private hand-off directory (in /dev/shm when there is one) with the bootstrap in it."""
        import shutil
        import tempfile

        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        directory = tempfile.mkdtemp(prefix="perfdiff-agent-", dir=shm)
        boot = os.path.join(directory, "boot")
        os.mkdir(boot, 0o700)
        shutil.copyfile(BOOTSTRAP_FILE, os.path.join(boot, "sitecustomize.py"))
        return cls(directory, announced=True, warn=warn, remove_dir=True)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment entries that start an agent in every Python process of the command."""
        base = os.environ if base is None else base
        boot = os.path.join(self.directory, "boot")
        pythonpath = os.pathsep.join(p for p in (boot, base.get("PYTHONPATH", "")) if p)
        return {ENV_DIR: self.directory, ENV_FILE: AGENT_FILE, ENV_WIRE: str(WIRE_VERSION),
                ENV_MARKER_FILE: MARKER_FILE, "PYTHONPATH": pythonpath}

    @classmethod
    def attach(cls, pid: int, warn: Callable[[str], None], *, proc_root: str = "/proc",
               nspid: int | None = None, loader: Any = None) -> AgentTraceSource:
        """The source for running process `pid`: its agent's socket; else the agent loaded into
        it by `loader` (perfdiff.collectors.attach.RemoteLoader, Python ≥ 3.14), removed again
        at ``stop``; else a plain warning saying why and an inert source (host and GPU
        collection go on)."""
        directory = _agent_dir_of(pid, proc_root)
        src = cls(directory, announced=False, warn=warn)
        if src.watch(pid, nspid):
            return src
        why = loader.load(pid, lambda: src.watch(pid, nspid)) if loader is not None else None
        if loader is not None and why is None:
            src.remote = loader
            return src
        src.absent = (f"no perfdiff agent in pid {pid}: no kernel trace and no engine steps for that pid; "
                      "collecting host and GPU metrics only" + (f"; {why}" if why else ""))
        warn(src.absent)
        src._unsupported(src.absent)
        return src

    def watch(self, pid: int, nspid: int | None = None) -> bool:
        """Attached mode: follow the agent of target process `pid`, if one answers; True if so."""
        if self.announced or pid in self.sockets:
            return pid in self.sockets
        file_pid = nspid or pid
        path = os.path.join(self.directory, f"{file_pid}.sock")
        reply = request(path, "status", timeout_s=2.0)
        if reply is None:
            return False
        self.sockets[pid] = path
        self.spools[pid] = _Spool(self.directory, file_pid, pid)
        if self.t_start_ns:  # joined during the run: start it now
            self._command(pid, "start")
        return True

    # ------------------------------------------------------------------ sampler protocol

    def start(self, t_ns: int) -> None:
        """The collection starts at `t_ns`; attached agents are told to record."""
        # The converters' imports (numpy, pandas, perfdiff.model) happen here, before the collect
        # loop's first tick, not inside it at the first rows.
        import perfdiff.model.cuda_names  # noqa: F401
        import perfdiff.model.intervals  # noqa: F401
        import perfdiff.model.tables  # noqa: F401
        self.t_start_ns = t_ns
        for pid in list(self.sockets):
            self._command(pid, "start")

    def sample(self, t_ns: int) -> dict[str, pd.DataFrame]:
        """New rows since the last call (activity, markers)."""
        return self._collect(final=False)

    poll = sample

    def stop(self, t_ns: int | None = None) -> dict[str, pd.DataFrame]:
        """Ask every agent still answering to stop (a forced flush), then the last rows.
        (`t_ns`, the collection's end, is accepted for the collect loop's calling convention.)"""
        if self.stopped:
            return {}
        self.stopped = True
        for pid, path in self._live_sockets().items():
            reply = request(path, "stop")
            if reply is None:
                self.events.append({"t_ns": time.time_ns(), "device": "Host", "event": "agent-no-answer",
                                    "pid": pid})
        rows = self._collect(final=True)
        if self.remote is not None:
            for problem in self.remote.unload():
                self.warn(problem)
        if self.announced and not self.spools:
            self._unsupported("no perfdiff agent started in the command (not a Python program, Python run "
                              "with -S or -I, or a sitecustomize that could not run): no kernel trace; "
                              "for other programs use --nsys", warn=True)
        return rows

    def manifest(self) -> dict[str, Any]:
        """Collector entry (agents, counts, drops, clock), unsupported reasons, events."""
        agents = []
        dropped: dict[str, int] = {}
        for sp in self.spools.values():
            st = sp.status
            agents.append({
                "pid": sp.pid, "state": st.get("state", "unknown"), "reason": st.get("reason", ""),
                "cupti_python": st.get("cupti_python"), "enabled": st.get("enabled", []),
                "thread_ids": st.get("thread_ids"), "rows": dict(sp.rows), "records": st.get("records", {}),
                "dropped": st.get("dropped", {}), "invalid": sp.invalid, "unjoined_launches": sp.unjoined,
                "ranges_before_start": sp.ranges_before_start, "flushes": st.get("flushes", 0),
                "flush_ns_total": st.get("flush_ns_total", 0), "flush_ns_max": st.get("flush_ns_max", 0),
                "clock": sp.clock, "anchors": st.get("anchors", []), "nvtx": st.get("nvtx", {}),
                "errors": st.get("errors", []), "adapters": st.get("adapters", {}),
            })
            for key, n in (st.get("dropped") or {}).items():
                if n:
                    dropped[f"kernel-trace {key}"] = dropped.get(f"kernel-trace {key}", 0) + int(n)
            if sp.invalid:
                dropped["kernel-trace incomplete records"] = dropped.get("kernel-trace incomplete records", 0) + sp.invalid
        return {
            "collector": {"name": self.name, "method": "cupti-agent", "mode": "announced" if self.announced else "attached",
                          "directory": self.directory, "agents": agents, "absent": self.absent},
            "unsupported": list(self.unsupported.values()),
            "events": list(self.events),
            "dropped": dropped,
        }

    def close(self) -> None:
        """Remove the hand-off files (and the private directory, and a loader's scripts)."""
        if self.remote is not None:
            self.remote.close()
        if self.remove_dir:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for sp in self.spools.values():
            for suffix in ("rec", "names", "status.json"):
                try:
                    os.unlink(sp.path(suffix))
                except OSError:
                    pass

    # ------------------------------------------------------------------ reading

    def _command(self, pid: int, cmd: str) -> None:
        reply = request(self.sockets[pid], cmd)
        if reply is None:
            self.events.append({"t_ns": time.time_ns(), "device": "Host", "event": "agent-no-answer", "pid": pid,
                                "command": cmd})
        elif reply.get("state") == "unsupported":
            self._unsupported(f"no kernel trace from pid {pid}: {reply.get('reason')}", warn=True)

    def _live_sockets(self) -> dict[int, str]:
        if not self.announced:
            return dict(self.sockets)
        self._discover()
        out = {}
        for pid, sp in self.spools.items():
            path = sp.path("sock")
            if os.path.exists(path) and sp.read_status().get("state") == "recording":
                out[pid] = path
        return out

    def _discover(self) -> None:
        if not self.announced:
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name.endswith(".status.json") and name.split(".", 1)[0].isdigit():
                pid = int(name.split(".", 1)[0])
                if pid not in self.spools:
                    self.spools[pid] = _Spool(self.directory, pid, pid)

    def _collect(self, *, final: bool) -> dict[str, pd.DataFrame]:
        self._discover()
        if not self.spools:
            return {}  # no agent (yet): nothing to read, nothing to import
        from perfdiff.model.tables import concat_parts

        activity, markers = [], []
        for sp in self.spools.values():
            st = sp.read_status()
            if st.get("state") == "unsupported":
                self._unsupported(f"no kernel trace from pid {sp.pid}: {st.get('reason')}", warn=True)
            self._warn_adapters(sp, st)
            a, m = self._convert(sp, sp.read_records(), final=final)
            activity += a
            markers += m
            self._warn_drops(sp, st)
        out = {}
        if activity:
            out["activity"] = concat_parts("activity", activity)
        if markers:
            out["markers"] = concat_parts("markers", markers)
        return out

    def _warn_adapters(self, sp: _Spool, st: dict[str, Any]) -> None:
        """A framework adapter that failed to install in the process (docs/COLLECTORS.md,
        Framework adapters): one warning of the collection, so that the bundle says why that
        process has no steps."""
        frameworks = (st.get("adapters") or {}).get("frameworks") or {}
        for name, state in frameworks.items() if isinstance(frameworks, dict) else ():
            if not isinstance(state, dict) or state.get("state") != "failed":
                continue
            key = f"adapter-failed {name}"
            if key in sp.warned:
                continue
            sp.warned.add(key)
            line = f"{name} adapter failed in pid {sp.pid}: {state.get('error', 'unknown error')}; no steps from it"
            if line not in self._warned:
                self._warned.add(line)
                self.warn(line)

    def _warn_drops(self, sp: _Spool, st: dict[str, Any]) -> None:
        lost = int((st.get("dropped") or {}).get("cupti", 0)) + int((st.get("dropped") or {}).get("agent", 0))
        if lost and "dropped" not in sp.warned:
            sp.warned.add("dropped")
            self.warn(f"pid {sp.pid}: {lost:,} kernel-trace records dropped (CUPTI buffers full or a failed "
                      "write): the kernel trace is incomplete (counts in the manifest)")

    def _convert(self, sp: _Spool, recs: np.ndarray, *, final: bool) -> tuple[list, list]:
        """Records → activity and markers parts (launch join, wall clock, names)."""
        import numpy as np

        from perfdiff.model.tables import Part

        good = (recs["start"] > 0) & (recs["end"] >= recs["start"])
        sp.invalid += int((~good).sum())
        recs = recs[good]
        kind = recs["kind"]
        start, sp.clock = cupti_to_wall(recs["start"], sp.status.get("anchors") or [])
        end = start + (recs["end"] - recs["start"])
        parts: list[Part] = []
        api = kind == K_API
        if api.any():
            self._remember_launches(sp, recs["corr"][api].astype(np.int64), start[api], recs["tid"][api].astype(np.int64))
            parts.append(self._part(sp, recs[api], start[api], end[api], "api"))
        gpu_new = np.isin(kind, (K_KERNEL, K_MEMCPY, K_MEMSET))
        gpu = np.concatenate([sp.held, recs[gpu_new]])
        g_start = np.concatenate([cupti_to_wall(sp.held["start"], sp.status.get("anchors") or [])[0], start[gpu_new]])
        may_hold = np.concatenate([np.zeros(len(sp.held), bool), np.ones(int(gpu_new.sum()), bool)])
        launch, tid = self._launches(sp, gpu["corr"].astype(np.int64))
        hold = (launch < 0) & may_hold & (not final)
        sp.held = gpu[hold]
        keep = ~hold
        gpu, g_start, launch, tid = gpu[keep], g_start[keep], launch[keep], tid[keep]
        sp.unjoined += int((launch < 0).sum())
        g_end = g_start + (gpu["end"] - gpu["start"])
        for k, label in ((K_KERNEL, "kernel"), (K_MEMCPY, "memcpy"), (K_MEMSET, "memset")):
            sel = gpu["kind"] == k
            if sel.any():
                parts.append(self._part(sp, gpu[sel], g_start[sel], g_end[sel], label, launch[sel], tid[sel]))
        markers: list[Part] = []
        rng = kind == K_RANGE
        if rng.any():
            markers += self._ranges(sp, recs[rng], start[rng], end[rng])
        if final:
            parts += self._cpu_rows(sp)
        return parts, markers

    @staticmethod
    def _remember_launches(sp: _Spool, corr: np.ndarray, start: np.ndarray, tid: np.ndarray) -> None:
        import numpy as np

        sp.api_corr = np.concatenate([sp.api_corr, corr])[-RETAIN_API:]
        sp.api_start = np.concatenate([sp.api_start, start])[-RETAIN_API:]
        sp.api_tid = np.concatenate([sp.api_tid, tid])[-RETAIN_API:]

    @staticmethod
    def _launches(sp: _Spool, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(launch_ns, tid) of the runtime call with each correlation id; -1 where none was seen."""
        import numpy as np

        n = len(corr)
        launch = np.full(n, -1, dtype=np.int64)
        tid = np.full(n, -1, dtype=np.int64)
        if n == 0 or len(sp.api_corr) == 0:
            return launch, tid
        order = np.argsort(sp.api_corr, kind="stable")
        keys = sp.api_corr[order]
        pos = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
        hit = (keys[pos] == corr) & (corr > 0)
        row = order[pos[hit]]
        launch[hit] = sp.api_start[row]
        tid[hit] = sp.api_tid[row]
        return launch, tid

    @staticmethod
    def _labels(sp: _Spool, name_ids: np.ndarray, strip: bool = False) -> Any:
        """Name ids → a categorical of their names (runtime calls without the `_v7000` suffix)."""
        import numpy as np

        from perfdiff.model.cuda_names import strip_api_version
        from perfdiff.model.tables import categorical, dense_codes

        codes, uniq = dense_codes(np.asarray(name_ids, dtype=np.int64))
        labels = [sp.names.get(int(u), f"<name {int(u)}>") for u in uniq]
        return categorical(codes, [strip_api_version(x) for x in labels] if strip else labels)

    def _part(self, sp: _Spool, recs: np.ndarray, start: np.ndarray, end: np.ndarray, kind: str,
              launch: np.ndarray | None = None, tid: np.ndarray | None = None) -> Any:
        import numpy as np

        from perfdiff.model.schema import MISSING
        from perfdiff.model.tables import Part, categorical, constant_categorical, dense_codes

        n = len(recs)
        sp.rows[kind] += n
        if kind == "api":
            device = constant_categorical("Host", n)
            tid = recs["tid"].astype(np.int64)
        else:
            codes, uniq = dense_codes(recs["device"].astype(np.int64))
            device = categorical(codes, [f"GPU {int(d)}" for d in uniq])
        cols = {"function": self._labels(sp, recs["name"], strip=kind == "api"),
                "kind": constant_categorical(kind, n), "device": device,
                "start_ns": start, "end_ns": end, "busy_ns": end - start,
                "tid": np.full(n, MISSING, np.int64) if tid is None else np.where(tid > 0, tid, MISSING),
                "correlation": recs["corr"].astype(np.int64)}
        if kind != "api":
            cols["stream"] = recs["stream"].astype(np.int64)
            cols["launch_ns"] = np.where(launch >= 0, launch, MISSING) if launch is not None else np.full(n, MISSING)
        if kind in ("memcpy", "memset"):
            cols["bytes"] = recs["bytes"].astype(np.int64)
        return Part("activity", cols)

    def _ranges(self, sp: _Spool, recs: np.ndarray, start: np.ndarray, end: np.ndarray) -> list:
        """NVTX ranges → markers (those begun before the collection started are dropped, as
        collect drops its own marks: their cycle lacks samples)."""
        import numpy as np

        from perfdiff.model.tables import Part, constant_categorical

        inside = start >= self.t_start_ns
        sp.ranges_before_start += int((~inside).sum())
        recs, start, end = recs[inside], start[inside], end[inside]
        n = len(recs)
        if n == 0:
            return []
        tid = np.where(recs["tid"] > 0, recs["tid"].astype(np.int64), -1)
        sp.ranges.append((recs["name"].astype(np.int64), start, end, tid))
        sp.rows["nvtx"] += n
        return [Part("markers", {"name": self._labels(sp, recs["name"]), "start_ns": start, "end_ns": end,
                                 "tid": tid, "source": constant_categorical("nvtx", n)})]

    def _cpu_rows(self, sp: _Spool) -> list:
        """All NVTX ranges of the run as kind "cpu" with their self time (needs every range: at stop)."""
        import numpy as np

        from perfdiff.model.tables import Part, constant_categorical
        from perfdiff.model.intervals import self_time_ns

        if not sp.ranges:
            return []
        name, start, end, tid = (np.concatenate(c) for c in zip(*sp.ranges, strict=True))
        sp.ranges = []
        n = len(name)
        return [Part("activity", {"function": self._labels(sp, name), "kind": constant_categorical("cpu", n),
                                  "device": constant_categorical("Host", n), "start_ns": start, "end_ns": end,
                                  "busy_ns": self_time_ns(tid, start, end), "tid": tid})]

    def _unsupported(self, reason: str, *, warn: bool = False) -> None:
        if reason in self.unsupported:
            return
        self.unsupported[reason] = {"device": "GPU", "metric": "kernel_trace", "reason": reason,
                                    "since_ns": time.time_ns()}
        if warn and reason not in self._warned:
            self._warned.add(reason)
            self.warn(reason)


def _agent_dir_of(pid: int, proc_root: str) -> str:
    """Where the agent of `pid` listens, as this collector sees it (through /proc/PID/root
    when the target lives in another mount namespace)."""
    root = os.path.join(proc_root, str(pid), "root") if other_mount_ns(pid, proc_root) else ""
    env_dir = target_env(pid, proc_root).get(ENV_DIR)
    return root + env_dir if env_dir else default_agent_dir(target_uid(pid, proc_root), root)
