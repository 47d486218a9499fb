"""One GPU as the sampler sees it: static facts, the per-source reading state, its book-keeping."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from .context import GpuContext
from .metrics import PROCESS_METRICS, PROCESS_UTIL_METRICS
from .nvml_query import NvmlFailure

# A buffered or field timestamp further than this from the call's wall time is not
# CLOCK_REALTIME µs (one report says GetSamples stamps µs since boot on some systems,
# polarsignals/gpu-metrics-agent#37): it is then shifted onto the call's wall time.
TS_TOLERANCE_NS = 60_000_000_000


@dataclass
class GpmState:
    """Two GPM sample buffers used as a ring, and the request struct reused every window."""

    bufs: list[Any]
    request: Any
    metrics: list[str]
    prev_i: int | None = None
    prev_stamp: int | None = None


@dataclass
class FieldSpec:
    """One value requested through nvmlDeviceGetFieldValues."""

    kind: str  # rate | share | ecc
    metric: str  # registry metric (rate, share) or "corrected"/"uncorrected" (ecc)
    const: str  # NVML_FI_* name, for reasons
    field_id: int
    scope: int
    factor: float = 1.0
    bit: int = 0  # share: the bitmask bit used when the counter is unavailable


@dataclass
class GpuDevice:
    """A GPU: static facts for the manifest plus the per-source reading state."""

    ctx: GpuContext
    index: int
    handle: Any = None
    address: int | None = None
    open_error: str = ""
    uuid: str | None = None
    model: str | None = None
    minor: int | None = None
    max_clock_mhz: dict[str, int | None] = field(default_factory=dict)
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None
    static_errors: dict[str, str] = field(default_factory=dict)
    sampled: bool = False
    selected_by: str = ""
    attached_ns: int | None = None
    by_fd: bool = False
    lost: bool = False
    lost_call: str = ""
    lost_reason: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    transient: dict[str, int] = field(default_factory=dict)
    ts_offset: dict[str, int] = field(default_factory=dict)
    clipped: dict[str, float] = field(default_factory=dict)
    # buffered utilisation
    util_mode: dict[str, str] = field(default_factory=dict)
    util_reason: dict[str, str] = field(default_factory=dict)
    util_last_us: dict[str, int] = field(default_factory=dict)
    util_prev_end: dict[str, int] = field(default_factory=dict)
    putil_last_us: int = 0
    putil_prev_end: int | None = None
    idle_at_ns: int | None = None  # this tick's utilisation snapshot read 0 % at this time
    invalid_util_samples: int = 0
    # process lists and attribution
    list_chains: list[list[str]] | None = None
    list_cache: list[dict[int, int | None]] = field(default_factory=list)
    lists_refreshed_ns: int = -(1 << 62)
    list_stamp: int = 0
    target_seen: bool = False
    target_pids_seen: set[int] = field(default_factory=set)
    ambiguous_pids: set[int] = field(default_factory=set)
    # counters
    mem_variant: str = "v2"
    mem_v2_reason: str = ""
    power_mode: str | None = None
    energy_reason: str = ""
    energy_prev: tuple[int, int] | None = None
    fields: list[FieldSpec] = field(default_factory=list)
    field_prev: dict[int, tuple[int, float]] = field(default_factory=dict)
    bitmask_reasons: list[tuple[str, int]] = field(default_factory=list)
    bitmask_notes: dict[str, str] = field(default_factory=dict)
    reason_funcs: list[str] = field(default_factory=list)
    gpm: GpmState | None = None

    name: str = ""  # the device label of the bundle ("GPU 0")

    def __post_init__(self) -> None:
        self.name = f"GPU {self.index}"

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, ctx: GpuContext, index: int) -> GpuDevice:
        """Get the handle and the static facts (name, uuid, max clocks, memory, power limit)."""
        dev = cls(ctx, index)
        q = ctx.query
        try:
            dev.handle = q.call("nvmlDeviceGetHandleByIndex", index)[0]
        except NvmlFailure as f:
            # A GPU outside this container's cgroup answers NoPermission here.
            dev.open_error = f.reason
            if f.kind == "lost":
                dev.lost, dev.lost_call, dev.lost_reason = True, f.func, f.reason
            return dev
        try:
            dev.address = ctypes.cast(dev.handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            dev.address = None
        dev.uuid = dev._static("uuid", "nvmlDeviceGetUUID")
        dev.model = dev._static("name", "nvmlDeviceGetName")
        dev.minor = dev._static("minor", "nvmlDeviceGetMinorNumber")
        nvml = ctx.nvml
        for key, const in (("graphics", "NVML_CLOCK_GRAPHICS"), ("sm", "NVML_CLOCK_SM"), ("mem", "NVML_CLOCK_MEM")):
            clk = getattr(nvml, const, None)
            dev.max_clock_mhz[key] = None if clk is None else dev._static(
                f"max_{key}_clock_mhz", "nvmlDeviceGetMaxClockInfo", clk)
        mem = dev._static("mem_total_bytes", "nvmlDeviceGetMemoryInfo")
        dev.mem_total_bytes = None if mem is None else int(mem.total)
        limit_mw = dev._static("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        dev.power_limit_w = None if limit_mw is None else limit_mw / 1000.0  # mW → W
        return dev

    def _static(self, key: str, func: str, *args: Any) -> Any:
        if self.lost:
            return None
        try:
            value = self.ctx.query.call(func, self.handle, *args)[0]
        except NvmlFailure as f:
            self.static_errors[key] = f.reason
            if f.kind == "lost":
                self.lost, self.lost_call, self.lost_reason = True, f.func, f.reason
            return None
        return value.decode() if isinstance(value, bytes) else value

    def attach(self, t_ns: int, why: str) -> None:
        """Mark this GPU sampled (the reader then primes it); unsupported without a handle."""
        if self.handle is None:
            self.unsupported("device", self.open_error or "no NVML handle", t_ns)
            return
        self.sampled = True
        self.selected_by = why
        self.attached_ns = t_ns

    # ------------------------------------------------------------------ book-keeping

    def unsupported(self, metric: str, reason: str, t_ns: int | None = None) -> None:
        """Record once that `metric` cannot be read on this GPU, and why."""
        ctx = self.ctx
        ctx.state.mark_unsupported(self.name, metric, reason, ctx.clock.now() if t_ns is None else t_ns)

    def is_unsupported(self, metric: str) -> bool:
        return self.ctx.state.is_unsupported(self.name, metric)

    def count_transient(self, metric: str) -> None:
        self.transient[metric] = self.transient.get(metric, 0) + 1

    def lose(self, t_ns: int, failure: NvmlFailure) -> None:
        """The GPU is gone: stop reading it and record the event with its time."""
        if self.lost:
            return
        self.lost, self.lost_call, self.lost_reason = True, failure.func, failure.reason
        self.ctx.state.event(t_ns, self.name, "gpu-lost", call=failure.func, error=failure.reason)

    def wall_ns(self, source: str, ts_us: int, ref_ns: int, newest_us: int) -> int:
        """CLOCK_REALTIME ns of an NVML µs timestamp of `source` (offset fixed at first use)."""
        off = self.ts_offset.get(source)
        if off is None:
            newest_ns = int(newest_us) * 1000
            off = 0 if abs(ref_ns - newest_ns) <= TS_TOLERANCE_NS else ref_ns - newest_ns
            self.ts_offset[source] = off
        return int(ts_us) * 1000 + off

    def mark_unattributed(self) -> None:
        """When NVML's pids were never resolved to the target here, say so per process metric."""
        if not self.sampled or self.target_seen or not self.ambiguous_pids:
            return
        pids = sorted(self.ambiguous_pids)[:5]
        reason = (f"NVML lists pids {pids} that {self.ctx.matcher.proc_root} does not show and none "
                  f"resolves to the target through NSpid: per-process use cannot be attributed "
                  f"(pid namespace); run the collector in the host's pid namespace")
        for metric in PROCESS_UTIL_METRICS + PROCESS_METRICS:
            self.unsupported(metric, reason, self.attached_ns)

    def free(self) -> None:
        """Give the GPM buffers back to NVML."""
        if self.gpm is not None:
            for buf in self.gpm.bufs:
                self.ctx.try_call("nvmlGpmSampleFree", buf)
            self.gpm = None

    def info(self) -> dict[str, Any]:
        """This GPU's entry in the manifest's `gpus` list."""
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.model,
            "driver": self.ctx.driver,
            "minor": self.minor,
            "max_graphics_clock_mhz": self.max_clock_mhz.get("graphics"),
            "max_sm_clock_mhz": self.max_clock_mhz.get("sm"),
            "max_mem_clock_mhz": self.max_clock_mhz.get("mem"),
            "mem_total_bytes": self.mem_total_bytes,
            "power_limit_w": self.power_limit_w,
            "sampled": self.sampled,
            "selected_by": self.selected_by,
            "lost": self.lost,
        }
        if self.sampled:
            out["target_pids"] = sorted(self.target_pids_seen)
            out["mem_info_version"] = self.mem_variant
        if self.open_error:
            out["open_error"] = self.open_error
        if self.static_errors:
            out["static_errors"] = dict(self.static_errors)
        shifted = {k: v for k, v in self.ts_offset.items() if v}
        if shifted:
            out["timestamp_offset_ns"] = shifted  # NVML stamps that were not CLOCK_REALTIME µs
        if self.clipped:
            out["share_above_100_pct"] = {k: round(v, 3) for k, v in self.clipped.items()}
        if self.invalid_util_samples:
            out["invalid_process_samples"] = self.invalid_util_samples
        return out
