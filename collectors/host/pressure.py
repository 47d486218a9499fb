"""Memory pressure and stalls: PSI, the target's memory cgroup, host swap and major faults.

What a memory-pressure verdict rests on, read every `interval_ns` (default 1 s) through the
ProcFS seam (tests point it at fake /proc and /sys trees), each file through a kept
descriptor.  Samples (device "Host"; units in the registry, docs/COLLECTORS.md):

* pressure stall information, as % of the interval stalled, from the `total=` µs counters
  (not the kernel's avg10, an average over the last 10 s that lags and smears across
  intervals): `host_pressure_{cpu,io,memory}_{some,full}` from /proc/pressure (no host-wide
  cpu `full`: the kernel reports it as 0), `cgroup_pressure_…` from the target's cgroup v2
  `*.pressure` files;
* the target's memory cgroup: `cgroup_mem_events_{high,max,oom,oom_kill}` (events per s;
  v2 memory.events, v1 memory.failcnt as `max` and memory.oom_control's oom_kill),
  `cgroup_mem_under_oom` (v1 only, 0 or 100 %), and the point readings `cgroup_mem_current`,
  `cgroup_swap_current`, `cgroup_mem_max`, `cgroup_mem_high` in bytes (no row without a limit);
* `host_swap_in`, `host_swap_out` (B/s, /proc/vmstat pswpin/pswpout pages);
* `process_major_faults` (1/s): majflt of /proc/PID/stat summed over the target's live
  processes (each counts all its threads).

What cannot be read is unsupported with the reason, never 0.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from perfdiff.collectors.base import RowBuffer, SamplerState
from perfdiff.collectors.procfs import FdCache, ProcFS, read_all

DEVICE = "Host"
PSI = ("cpu", "io", "memory")
EVENTS = ("high", "max", "oom", "oom_kill")
# cgroup v1 prints "no limit" as the page counter's maximum times the page size
# (9223372036854771712 with 4 KiB pages): anything this large is no limit.
UNLIMITED = 1 << 62
LIMITS = ("cgroup_mem_max", "cgroup_mem_high")
MAX_FDS = 64  # kept descriptors: a dozen files and the target's processes' stat

Reading = dict[str, tuple[bool, float]]  # metric → (cumulative counter?, value)


def parse_keyed(raw: bytes) -> dict[str, int]:
    """"key value" lines (memory.events, memory.oom_control, /proc/vmstat) → {key: int}."""
    out = {}
    for line in raw.split(b"\n"):
        k, _, v = line.partition(b" ")
        v = v.strip()
        if v.isdigit():
            out[k.decode()] = int(v)
    return out


def parse_psi(raw: bytes) -> dict[str, int]:
    """A pressure file ("some avg10=… total=N" and "full …" lines) → {"some": µs, "full": µs}."""
    out = {}
    for line in raw.split(b"\n"):
        kind, _, rest = line.partition(b" ")
        i = rest.find(b"total=")
        if i >= 0:
            out[kind.decode()] = int(rest[i + 6:].split()[0])
    return out


def parse_majflt(raw: bytes) -> int:
    """majflt (field 12) of a /proc/PID/stat line; the name may hold spaces and parentheses."""
    return int(raw[raw.rindex(b")") + 2:].split()[9])


def _psi(prefix: str, full: bool) -> Callable[[bytes], Reading]:
    def parse(raw: bytes) -> Reading:
        t = parse_psi(raw)
        return {f"{prefix}_{k}": (True, float(v)) for k, v in t.items() if k == "some" or full}
    return parse


def _gauge(metric: str, unlimited: bool = False) -> Callable[[bytes], Reading]:
    """A one-number file in bytes; "max" (v2) or a v1 no-limit value (when `unlimited`) gives no row."""
    def parse(raw: bytes) -> Reading:
        text = raw.strip()
        if text == b"max":
            return {}
        v = int(text)
        return {} if unlimited and v >= UNLIMITED else {metric: (False, float(v))}
    return parse


def _events_v2(raw: bytes) -> Reading:
    d = parse_keyed(raw)
    return {f"cgroup_mem_events_{k}": (True, float(d[k])) for k in EVENTS if k in d}


def _oom_control_v1(raw: bytes) -> Reading:
    d = parse_keyed(raw)
    out: Reading = {"cgroup_mem_under_oom": (False, 100.0 * bool(d["under_oom"]))}
    if "oom_kill" in d:  # since Linux 4.13
        out["cgroup_mem_events_oom_kill"] = (True, float(d["oom_kill"]))
    return out


def _failcnt_v1(raw: bytes) -> Reading:
    return {"cgroup_mem_events_max": (True, float(int(raw.strip())))}


def _memsw_v1(raw: bytes) -> Reading:
    return {"_memsw": (False, float(int(raw.strip())))}  # memory + swap: less memory → swap


def cgroup_lines(fs: ProcFS, pid: int) -> list[tuple[str, str]]:
    """(controllers, path) of each line of /proc/PID/cgroup ("" controllers: the v2 hierarchy)."""
    out = []
    for line in fs.read(pid, "cgroup").decode(errors="replace").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2].rstrip("/")))
    return out


def unified_folder(fs: ProcFS, lines: list[tuple[str, str]]) -> str | None:
    """The target's folder under /sys in the v2 hierarchy: /sys/fs/cgroup on a v2 host, or
    /sys/fs/cgroup/unified on a hybrid one (whichever holds cgroup.procs); None without one."""
    path = next((p for c, p in lines if c == ""), None)
    if path is None:
        return None
    for mount in ("fs/cgroup", "fs/cgroup/unified"):
        try:
            fs.read_sys(mount + path, "cgroup.procs")
            return mount + path
        except OSError:
            continue
    return None


class PressureSampler:
    """PSI, the memory cgroup, swap and major faults of the target, every `interval_ns`."""

    name = "pressure"

    def __init__(self, target_pids: Callable[[], set[int]], root: int | Callable[[], int | None], *,
                 procfs: ProcFS | None = None, interval_ns: int = 1_000_000_000, page_size: int | None = None):
        self.target_pids = target_pids
        self._root = root  # or a callable: a started command's pid is known only at start
        self.fs = procfs or ProcFS()
        self.interval_ns = interval_ns
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self.state = SamplerState()
        self.fds = FdCache(MAX_FDS)
        self.files: dict[str, int] = {}  # path → kept descriptor (-1: opened per read)
        self.reads: list[tuple[str, Callable[[bytes], Reading]]] = []  # what each tick reads
        self.sources: dict[str, str] = {}  # metric → the file it comes from
        self.memory: tuple[str, str] | None = None  # (cgroup version, folder under /sys)
        self.unified: str | None = None
        self.last: dict[str, tuple[int, float]] = {}  # counter → (when read, ns; value)
        self.t_last = 0
        self.majflt: dict[int, tuple[int, int]] = {}  # pid → (kept stat descriptor, last majflt)

    # ------------------------------------------------------------------ what there is

    def _add(self, path: str, parse: Callable[[bytes], Reading], metrics: tuple[str, ...], t_ns: int,
             why: str = "") -> None:
        """Read `path` once: where it gives `metrics`, read it at every tick; the metrics it
        cannot give are unsupported with the reason (`why`, else the read's error)."""
        try:
            got = parse(self._read(path))
        except (OSError, ValueError, KeyError, IndexError) as exc:
            reason = why or f"{path} unreadable ({getattr(exc, 'strerror', None) or exc.__class__.__name__})"
            for m in metrics:
                self.state.mark_unsupported(DEVICE, m, reason, t_ns)
            return
        for m in metrics:
            # A limit that is not set gives no row, but is not unsupported.
            if m in got or m in LIMITS or (m == "cgroup_swap_current" and "_memsw" in got):
                self.sources[m] = path
            else:
                self.state.mark_unsupported(DEVICE, m, f"{path} does not give it", t_ns)
        self.reads.append((path, parse))

    def start(self, t_ns: int) -> None:
        sysfs = self.fs.sys
        for res in PSI:
            metrics = tuple(f"host_pressure_{res}_{k}" for k in ("some", "full") if k == "some" or res != "cpu")
            self._add(self.fs.path("pressure", res), _psi(f"host_pressure_{res}", res != "cpu"), metrics, t_ns,
                      why="" if os.path.exists(self.fs.path("pressure")) else
                      "no /proc/pressure: a kernel without PSI (CONFIG_PSI, or booted with psi=0)")
        self._add(self.fs.path("vmstat"), self._vmstat, ("host_swap_in", "host_swap_out"), t_ns)
        root = self._root() if callable(self._root) else self._root
        lines: list[tuple[str, str]] = []
        no_cgroup = "no target process"
        try:
            if root is not None:
                lines = cgroup_lines(self.fs, root)
        except OSError as exc:
            no_cgroup = f"/proc/{root}/cgroup unreadable ({exc.strerror})"
        self.unified = unified_folder(self.fs, lines)
        cg_psi = tuple(f"cgroup_pressure_{r}_{k}" for r in PSI for k in ("some", "full"))
        if self.unified is None:
            why = "the target has no cgroup v2 folder (cgroup v1 only)" if lines else no_cgroup
            for m in cg_psi:
                self.state.mark_unsupported(DEVICE, m, why, t_ns)
        elif next(p for c, p in lines if c == "") == "":
            for m in cg_psi:
                self.state.mark_unsupported(DEVICE, m, "the target is in the root cgroup: its pressure is the "
                                                       "host's (host_pressure_*)", t_ns)
        else:
            for r in PSI:
                self._add(os.path.join(sysfs, self.unified, f"{r}.pressure"), _psi(f"cgroup_pressure_{r}", True),
                          (f"cgroup_pressure_{r}_some", f"cgroup_pressure_{r}_full"), t_ns)
        self._start_memory(lines, t_ns, no_cgroup)
        for pid in self.target_pids():
            self._fault_count(pid)
        self.last = {m: (t_ns, v) for m, (counter, v) in self._reading().items() if counter}
        self.t_last = t_ns

    def _start_memory(self, lines: list[tuple[str, str]], t_ns: int, no_cgroup: str) -> None:
        """The memory cgroup: v2 where the unified folder has memory.current, else v1's `memory`."""
        sysfs = self.fs.sys
        if self.unified is not None and os.path.exists(os.path.join(sysfs, self.unified, "memory.current")):
            self.memory = ("v2", self.unified)
            d = os.path.join(sysfs, self.unified)
            self._add(f"{d}/memory.events", _events_v2, tuple(f"cgroup_mem_events_{k}" for k in EVENTS), t_ns)
            self._add(f"{d}/memory.current", _gauge("cgroup_mem_current"), ("cgroup_mem_current",), t_ns)
            self._add(f"{d}/memory.swap.current", _gauge("cgroup_swap_current"), ("cgroup_swap_current",), t_ns)
            self._add(f"{d}/memory.max", _gauge("cgroup_mem_max"), ("cgroup_mem_max",), t_ns)
            self._add(f"{d}/memory.high", _gauge("cgroup_mem_high"), ("cgroup_mem_high",), t_ns)
            self.state.mark_unsupported(DEVICE, "cgroup_mem_under_oom", "cgroup v2 has no under_oom (see "
                                                                          "cgroup_mem_events_oom)", t_ns)
            return
        v1 = next((f"fs/cgroup/{c}{p}" for c, p in lines if "memory" in c.split(",")), None)
        if v1 is None:
            reason = (no_cgroup if not lines else
                      "the target has no memory cgroup (no memory.current in its v2 folder, no v1 memory line)")
            for m in (*(f"cgroup_mem_events_{k}" for k in EVENTS), "cgroup_mem_under_oom", "cgroup_mem_current",
                      "cgroup_swap_current", "cgroup_mem_max", "cgroup_mem_high"):
                self.state.mark_unsupported(DEVICE, m, reason, t_ns)
            return
        self.memory = ("v1", v1)
        d = os.path.join(sysfs, v1)
        self._add(f"{d}/memory.usage_in_bytes", _gauge("cgroup_mem_current"), ("cgroup_mem_current",), t_ns)
        self._add(f"{d}/memory.limit_in_bytes", _gauge("cgroup_mem_max", unlimited=True), ("cgroup_mem_max",), t_ns)
        self._add(f"{d}/memory.failcnt", _failcnt_v1, ("cgroup_mem_events_max",), t_ns)
        self._add(f"{d}/memory.oom_control", _oom_control_v1, ("cgroup_mem_under_oom", "cgroup_mem_events_oom_kill"),
                  t_ns)
        self._add(f"{d}/memory.memsw.usage_in_bytes", _memsw_v1, ("cgroup_swap_current",), t_ns,
                  why="no memory.memsw.usage_in_bytes (swap accounting off)")
        for m, what in (("cgroup_mem_high", "memory.high"), ("cgroup_mem_events_high", "memory.high events"),
                        ("cgroup_mem_events_oom", "memory.events oom")):
            self.state.mark_unsupported(DEVICE, m, f"cgroup v1 has no {what}", t_ns)

    def _vmstat(self, raw: bytes) -> Reading:
        """pswpin / pswpout of /proc/vmstat, found by name (the file has ~200 lines) → bytes."""
        out: Reading = {}
        for m, key in (("host_swap_in", b"\npswpin "), ("host_swap_out", b"\npswpout ")):
            i = raw.find(key)
            if i >= 0:
                j = i + len(key)
                out[m] = (True, float(int(raw[j:raw.find(b"\n", j) % (len(raw) + 1)]) * self.page_size))
        return out

    # ------------------------------------------------------------------ the tick

    def _read(self, path: str) -> bytes:
        fd = self.files.get(path)
        if fd is None:
            fd = self.files[path] = self.fds.open(path)
        return read_all(fd, path)

    def _reading(self) -> Reading:
        """Every file once: {metric: (counter?, value)}; a file that fails gives nothing this time."""
        out: Reading = {}
        for path, parse in self.reads:
            try:
                out.update(parse(self._read(path)))
            except (OSError, ValueError, KeyError, IndexError):
                continue  # the cgroup went away with the target, or a torn read: no row
        memsw = out.pop("_memsw", None)
        if memsw is not None and "cgroup_mem_current" in out:
            out["cgroup_swap_current"] = (False, max(0.0, memsw[1] - out["cgroup_mem_current"][1]))
        return out

    def _fault_count(self, pid: int) -> int:
        """Major faults of `pid` since its last reading (its first reading: the baseline, 0)."""
        fd, before = self.majflt.get(pid, (-2, -1))
        path = self.fs.path(pid, "stat")
        try:
            if fd == -2:
                fd = self.fds.open(path)
            now = parse_majflt(read_all(fd, path))
        except (OSError, ValueError, IndexError):
            self.fds.close(fd if fd != -2 else -1)
            self.majflt.pop(pid, None)
            return 0
        self.majflt[pid] = (fd, now)
        return now - before if before >= 0 else 0

    def sample(self, t_ns: int) -> dict[str, Any]:
        dt = t_ns - self.t_last
        if dt <= 0:
            return {}
        rows = RowBuffer()
        for m, (counter, v) in self._reading().items():
            if not counter:
                rows.sample(m, DEVICE, t_ns, t_ns, v)
                continue
            before = self.last.get(m)
            self.last[m] = (t_ns, v)
            # Over the time since this counter's last good reading; a reset (a new cgroup): no row.
            if before is not None and v >= before[1] and t_ns > before[0]:
                scale = 1e5 if "_pressure_" in m else 1e9  # µs → % of the interval; counts → per s
                rows.sample(m, DEVICE, before[0], t_ns, (v - before[1]) * scale / (t_ns - before[0]))
        pids = self.target_pids()
        for pid in [p for p in self.majflt if p not in pids]:
            self.fds.close(self.majflt.pop(pid)[0])
        if pids:
            had = [p for p in pids if p in self.majflt]
            faults = sum(self._fault_count(p) for p in pids)
            if had:
                rows.sample("process_major_faults", DEVICE, self.t_last, t_ns, faults * 1e9 / dt)
        self.t_last = t_ns
        return rows.take()

    def close(self) -> None:
        for fd in self.files.values():
            self.fds.close(fd)
        for fd, _ in self.majflt.values():
            self.fds.close(fd)
        self.files.clear()
        self.majflt.clear()

    def manifest(self) -> dict[str, Any]:
        return {"collector": {"name": self.name, "interval_ns": self.interval_ns, "sources": dict(self.sources),
                              "memory_cgroup": list(self.memory) if self.memory else None,
                              "cgroup_v2": f"/sys/{self.unified}" if self.unified else None},
                "unsupported": self.state.unsupported_list(), "events": self.state.events}
