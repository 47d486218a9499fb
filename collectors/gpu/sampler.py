"""The GPU side of `perfdiff collect`: an NVML sampler (docs/COLLECTORS.md, GPU and Timestamps).

`open_gpu_sampler` is the entry point the collect loop calls.  The sampler finds the GPUs the
target uses (NVML process lists of the target and its children, pid namespaces, the
/dev/nvidiaN fallback; `gpus` overrides), then at every tick reads each of those GPUs and
returns rows of the bundle's `samples` table in the registry's units.

Timestamps: rows carry CLOCK_REALTIME ns.  Values that NVML stamps itself (buffered samples,
field values) keep NVML's µs timestamps; an untimestamped getter is stamped at the midpoint
of its call, measured as the tick's `t_ns` plus the monotonic time elapsed since the tick
began.  A rate from a cumulative counter covers [previous reading, this reading].

Nothing here blocks: buffered APIs are read with their last-seen timestamp, GPM is computed
from the previous tick's sample, events are polled with a 0 ms timeout, and
nvmlDeviceGetPcieThroughput (a ~20 ms measurement) is never called.  No function that changes
GPU state is ever called (NvmlQuery refuses them).
"""
from __future__ import annotations

import ctypes
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pandas as pd

from perfdiff.collectors.base import SamplerState
from perfdiff.errors import InputError

from .context import GpuContext, TickClock, try_call
from .device import GpuDevice
from .nvml_query import NO_DRIVER, NvmlFailure, NvmlQuery
from .pids import PidMatcher, nvidia_minors_open, read_comm
from .read import DeviceReader
from .rows import Names, Rows

NO_DRIVER_LINE = "no NVIDIA driver found; collecting host metrics only"
DISCOVERY_NS = 1_000_000_000  # how often GPUs the target does not use yet are re-checked
MAX_EVENTS_PER_TICK = 64  # bound on nvmlEventSetWait polls in one tick


def open_gpu_sampler(target_pids: Callable[[], set[int]], *, gpus: list[int] | None, interval_ns: int,
                     nvml: ModuleType | None = None, warn: Callable[[str], None] = lambda s: None,
                     proc_root: str = "/proc") -> GpuSampler | None:
    """Start NVML and return a sampler of the target's GPUs, or None when there is no GPU.

    `target_pids()` returns the target's pids and its children's (called once per tick);
    `gpus` lists NVML indices to sample whatever the target uses (None: the target's GPUs);
    `interval_ns` is the collect loop's tick.  `nvml` is the NVML module (None: `import
    pynvml`); tests pass a fake.  With no driver, one line goes to `warn` and None comes back.
    Raises InputError when `gpus` names a GPU that does not exist.
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            warn(NO_DRIVER_LINE + " (the NVML binding nvidia-ml-py is not installed: pip install 'perfdiff[gpu]')")
            return None
    query = NvmlQuery(nvml)
    query.recording_startup = True
    try:
        query.call("nvmlInit")
    except NvmlFailure as f:
        if f.code in {getattr(nvml, n, None) for n in NO_DRIVER}:
            warn(NO_DRIVER_LINE)
        else:
            warn(f"NVML did not start ({f.reason}); collecting host metrics only")
        return None
    try:
        count = int(query.call("nvmlDeviceGetCount")[0])
    except NvmlFailure as f:
        _shutdown(query)
        warn(f"NVML cannot count GPUs ({f.reason}); collecting host metrics only")
        return None
    if count == 0:
        _shutdown(query)
        warn("no NVIDIA GPU found; collecting host metrics only")
        return None
    if gpus is not None:
        bad = [i for i in gpus if not 0 <= int(i) < count]
        if bad:
            _shutdown(query)
            raise InputError(f"--gpus {','.join(map(str, bad))}: no such GPU (NVML sees {count}: 0..{count - 1})")
    return GpuSampler(query, count, target_pids, gpus=gpus, interval_ns=interval_ns, proc_root=proc_root)


def _shutdown(query: NvmlQuery) -> None:
    try:
        query.call("nvmlShutdown")
    except NvmlFailure:
        pass


def _binding_version(nvml: Any) -> str:
    version = getattr(nvml, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version

        return dist_version("nvidia-ml-py")
    except Exception:  # no distribution metadata (vendored module): unknown, not fatal
        return ""


class GpuSampler:
    """Samples the target's GPUs through NVML; follows the Sampler contract of base.py."""

    name = "nvml"

    def __init__(self, query: NvmlQuery, count: int, target_pids: Callable[[], set[int]], *,
                 gpus: list[int] | None, interval_ns: int, proc_root: str):
        self.q = query
        self.nvml = query.nvml
        self.interval_ns = int(interval_ns)
        self.state = SamplerState()
        self._target_pids = target_pids
        self._gpus = None if gpus is None else sorted({int(i) for i in gpus})
        self._proc_root = proc_root
        self.matcher = PidMatcher(proc_root)
        self.driver = self._system_string("nvmlSystemGetDriverVersion")
        self.nvml_version = self._system_string("nvmlSystemGetNVMLVersion")
        self.q.driver = self.driver
        self.q.binding = _binding_version(self.nvml)
        self.clock = TickClock()
        self.ctx = GpuContext(query, self.clock, self.state, self.matcher, self._note_other_process,
                              self._shared_event_set, self.driver)
        self.reader = DeviceReader(self.ctx)
        self.devices = [GpuDevice.open(self.ctx, i) for i in range(count)]
        self._by_address = {d.address: d for d in self.devices if d.address is not None}
        self._event_set: Any = None  # None: not created yet; False: NVML could not create one
        self.event_set_reason = ""
        self._started = False
        self._closed = False
        self.prev_tick_ns: int | None = None
        self._last_discovery_ns = 0
        self._other_seen: set[tuple[str, int]] = set()
        self._names = (Names(), Names())  # metric and device codes shared by every tick's Rows

    # ------------------------------------------------------------------ contract

    def start(self, t_ns: int) -> None:
        """Find the target's GPUs and take the first reading of every counter (no rows)."""
        if self._started:
            return
        self._started = True
        self.clock.begin(t_ns)
        for dev in self.devices:
            if dev.lost:  # lost while opening: record it with this run's first time
                self.state.event(t_ns, dev.name, "gpu-lost", call=dev.lost_call, error=dev.lost_reason)
        self.matcher.set_targets(self._targets())
        if self._gpus is not None:
            for i in self._gpus:
                self._attach(self.devices[i], t_ns, "--gpus", announce=False)
        else:
            self._discover(announce=False)
        self._last_discovery_ns = t_ns
        self.prev_tick_ns = t_ns
        self.q.recording_startup = False

    def sample(self, t_ns: int) -> dict[str, pd.DataFrame]:
        """Rows of the `samples` table for everything read in this tick (registry units)."""
        if not self._started:
            self.start(t_ns)
            return {"samples": Rows(*self._names).frame()}
        self.clock.begin(t_ns)
        rows = Rows(*self._names)
        self.matcher.set_targets(self._targets())
        for dev in self.devices:
            if dev.sampled and not dev.lost:
                self.reader.read(dev, rows)
        self._poll_events()
        if self._gpus is None and t_ns - self._last_discovery_ns >= DISCOVERY_NS:
            self._last_discovery_ns = t_ns
            self._discover(announce=True)
        self.prev_tick_ns = t_ns
        return {"samples": rows.frame()}

    def manifest(self) -> dict[str, Any]:
        """{"collector", "unsupported", "gpus", "events"} for the bundle's manifest."""
        for dev in self.devices:
            dev.mark_unattributed()
        return {
            "collector": {
                "name": self.name,
                "interval_ns": self.interval_ns,
                "driver": self.driver,
                "nvml_version": self.nvml_version,
                "binding": "nvidia-ml-py " + self.q.binding if self.q.binding else "",
                "call_latency_us": self.q.latency_us(),
                "call_stats": self.q.run_stats(),
                "sources": {d.name: dict(d.sources) for d in self.devices if d.sampled},
                "transient_errors": {f"{d.name}/{k}": v for d in self.devices for k, v in d.transient.items()},
                "proc_root": self._proc_root,
                # GPUs on this host that were not sampled (the target did not use them).
                "other_gpus": [{"index": d.index, "name": d.model, "uuid": d.uuid,
                                **({"open_error": d.open_error} if d.open_error else {})}
                               for d in self.devices if not d.sampled],
            },
            "unsupported": self.state.unsupported_list(),
            "gpus": [d.info() for d in self.devices if d.sampled],
            "events": [dict(e) for e in self.state.events],
        }

    def close(self) -> None:
        """Free GPM buffers and the event set and shut NVML down (failures ignored)."""
        if self._closed:
            return
        self._closed = True
        for dev in self.devices:
            dev.free()
        if self._event_set is not None:
            self.try_call("nvmlEventSetFree", self._event_set)
            self._event_set = None
        self.try_call("nvmlShutdown")

    # ------------------------------------------------------------------ helpers for devices

    def try_call(self, func: str, *args: Any) -> Any:
        """Call for clean-up or static information: the value, or None on any NVML failure."""
        return try_call(self.q, func, *args)

    def _shared_event_set(self) -> tuple[Any, str]:
        """The shared XID event set, created on first use, or (None, why NVML could not create one)."""
        if self._event_set is None:
            try:
                self._event_set = self.q.call("nvmlEventSetCreate")[0]
            except NvmlFailure as f:
                self._event_set = False
                self.event_set_reason = f.reason
        return self._event_set or None, self.event_set_reason

    def _note_other_process(self, device: str, pid: int, t_ns: int, **detail: Any) -> None:
        """Record once per (device, pid) that a process other than the target uses the GPU."""
        key = (device, pid)
        if key in self._other_seen:
            return
        self._other_seen.add(key)
        self.state.event(t_ns, device, "other-process", pid=pid, name=read_comm(self._proc_root, pid), **detail)

    def _system_string(self, func: str) -> str:
        value = self.try_call(func)
        return "" if value is None else (value.decode() if isinstance(value, bytes) else str(value))

    def _targets(self) -> set[int]:
        return {int(p) for p in self._target_pids()}

    # ------------------------------------------------------------------ discovery

    def _attach(self, dev: GpuDevice, t_ns: int, why: str, *, announce: bool) -> None:
        """Start sampling `dev`; `announce` records the event (a GPU joining mid-run)."""
        if dev.sampled or dev.lost:
            return
        if announce:
            self.state.event(t_ns, dev.name, "gpu-attached", reason=why)
        dev.attach(t_ns, why)
        if dev.sampled:
            self.reader.prime(dev)

    def _discover(self, *, announce: bool) -> None:
        """Attach the GPUs whose NVML process lists hold a target pid; else the /dev/nvidiaN ones."""
        unreadable = []
        found_any = any(d.sampled for d in self.devices)
        for dev in self.devices:
            if dev.sampled or dev.lost:
                continue
            procs = self.reader.list_processes(dev)
            if procs is None:
                unreadable.append(dev)
                continue
            hits = sorted(p for p in procs if self.matcher.is_target(p))
            if hits:
                found_any = True
                self._attach(dev, self.clock.now(), f"NVML process list: pids {hits}", announce=announce)
        # Fallback (docs/COLLECTORS.md): the target's open /dev/nvidiaN files, for the devices whose
        # lists could not be read, or all of them when no list showed the target.
        candidates = [d for d in self.devices if not d.sampled and not d.lost] if not found_any else unreadable
        if candidates:
            minors = nvidia_minors_open(self._proc_root, self.matcher.targets)
            for dev in candidates:
                if dev.minor is not None and dev.minor in minors:
                    dev.by_fd = True
                    self._attach(dev, self.clock.now(), f"/proc/PID/fd holds /dev/nvidia{dev.minor}", announce=announce)

    # ------------------------------------------------------------------ events

    def _poll_events(self) -> None:
        """Drain XID events without blocking (timeout 0) and record each with its time."""
        if not self._event_set:
            return
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data, t0, t1 = self.q.call("nvmlEventSetWait_v2", self._event_set, 0)
            except NvmlFailure:
                return  # Timeout: nothing pending; a lost GPU shows in its own calls
            t = self.clock.stamp((t0 + t1) // 2)
            dev = self._device_of(data.device)
            if dev is None:
                continue
            xid = int(data.eventData)
            detail: dict[str, Any] = {"xid": xid, "window_start_ns": self.prev_tick_ns,
                                      "event_type": int(data.eventType)}
            meaning = self.reader.xid_meaning(xid)
            if meaning:
                detail["meaning"] = meaning
            self.state.event(t, dev.name, "xid", **detail)

    def _device_of(self, handle: Any) -> GpuDevice | None:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            return None
        return self._by_address.get(address)
