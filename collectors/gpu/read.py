"""Per-tick readers of one GPU: one method per source, each handling its own failures.

Every reader turns an NVML failure into state for its (device, metric) — unsupported with a
reason, a fallback to an older call, or a lost device — and never raises it (base.py).
"""
from __future__ import annotations

from typing import Any

from .context import GpuContext
from .device import FieldSpec, GpmState, GpuDevice
from .metrics import (ECC_FIELDS, GPM_METRICS, POINT_GETTERS, PROCESS_LISTS, PROCESS_METRICS, PROCESS_UTIL_METRICS,
                      RATE_FIELDS, REASON_FUNCS, THROTTLE_REASONS, UTIL_SAMPLES, XID_MEANING)
from .nvml_query import FIELD_VALUE_ATTR, FIELD_VALUE_BITS, NvmlFailure, field_values_dtype, read_field_values
from .rows import Rows

DRY_NS = 1_000_000_000  # no buffered utilisation sample for this long: read the current rate
LIST_REFRESH_NS = 1_000_000_000  # graphics and MPS process lists are re-read this often
GPM_MIN_NS = 100_000_000  # GPM metrics need two samples at least 100 ms apart (docs/COLLECTORS.md)
_NAN = float("nan")


class DeviceReader:
    """Reads GPUs through a GpuContext; holds the NVML constants resolved once."""

    def __init__(self, ctx: GpuContext):
        self.ctx = ctx
        self.clock = ctx.clock
        self.q = ctx.query
        nvml = ctx.nvml
        self.nvml = nvml
        self.success = getattr(nvml, "NVML_SUCCESS", 0)
        self.fnf = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        self.fv_dtype = field_values_dtype(getattr(nvml, "c_nvmlFieldValue_t", None))
        self.points: list[tuple[str, str, tuple[Any, ...] | None, float]] = []
        for metric, func, args, factor in POINT_GETTERS:
            values = tuple(getattr(nvml, a, None) for a in args)
            self.points.append((metric, func, None if None in values else values, factor))

    def const(self, name: str) -> Any:
        return getattr(self.nvml, name, None)

    # ------------------------------------------------------------------ calling

    def get(self, dev: GpuDevice, func: str, *args: Any, **kwargs: Any) -> tuple[Any, int]:
        """(value, wall-time stamp at the call's midpoint); a lost GPU is recorded, then re-raised."""
        try:
            value, t0, t1 = self.q.call(func, *args, **kwargs)
        except NvmlFailure as f:
            if f.kind == "lost":
                dev.lose(self.clock.now(), f)
            raise
        return value, self.clock.stamp((t0 + t1) // 2)

    def fail(self, dev: GpuDevice, metrics: tuple[str, ...], f: NvmlFailure, prefix: str = "") -> None:
        """Unsupported → recorded once per metric; transient → counted; lost → already recorded."""
        if f.kind == "unsupported":
            for m in metrics:
                dev.unsupported(m, prefix + f.reason)
        elif f.kind != "lost":
            for m in metrics:
                dev.count_transient(m)

    def err_text(self, code: int) -> str:
        try:
            return str(self.nvml.NVMLError(code))
        except Exception:  # an unknown code asks the library for its text, which may fail
            return f"NVML error {code}"

    # ------------------------------------------------------------------ tick

    def read(self, dev: GpuDevice, rows: Rows) -> None:
        """Read every source of `dev` once, appending rows; stops at once if the GPU is lost."""
        for step in (self._util, self._process_util, self._processes, self._points, self._memory,
                     self._power, self._fields, self._bitmask, self._gpm):
            if dev.lost:
                return
            step(dev, rows)

    def prime(self, dev: GpuDevice) -> None:
        """First reading of every source (baselines; rows discarded), GPM buffers, XID events."""
        self._init_fields(dev)
        self._init_gpm(dev)
        self._register_events(dev)
        if not dev.lost:
            self.read(dev, Rows())

    # ------------------------------------------------------------------ utilisation

    def _util(self, dev: GpuDevice, rows: Rows) -> None:
        """gpu_usage, gpu_mem_bw_util from the driver's sample buffer (each sample covers the
        interval since the previous one); the current rate when the buffer is unavailable or
        has run dry (an idle GPU stops producing samples)."""
        snapshot: list[tuple[str, str]] = []
        for metric, stype_name, attr in UTIL_SAMPLES:
            if dev.is_unsupported(metric):
                continue
            if dev.util_mode.get(metric, "samples") == "samples":
                got = self._util_samples(dev, rows, metric, stype_name)
                if dev.lost:
                    return
                if got:
                    continue
            snapshot.append((metric, attr))
        if not snapshot:
            return
        try:
            util, stamp = self.get(dev, "nvmlDeviceGetUtilizationRates", dev.handle)
        except NvmlFailure as f:
            for metric, _ in snapshot:
                if dev.util_mode.get(metric) == "rates":  # no buffer either: unsupported
                    prior = dev.util_reason.get(metric, "")
                    self.fail(dev, (metric,), f, prefix=f"{prior}; " if prior else "")
            return
        for metric, attr in snapshot:
            value = float(getattr(util, attr))
            rows.add(metric, dev.name, stamp, stamp, value)
            if dev.util_mode.get(metric) == "rates":
                dev.sources[metric] = "nvmlDeviceGetUtilizationRates"
            else:
                dev.util_prev_end[metric] = stamp
            if metric == "gpu_usage" and value == 0:
                dev.idle_at_ns = stamp  # no kernel ran: no process used the GPU either

    def _util_samples(self, dev: GpuDevice, rows: Rows, metric: str, stype_name: str) -> bool:
        """Rows from nvmlDeviceGetSamples; False when a snapshot should be read instead."""
        stype = self.const(stype_name)
        if stype is None:
            dev.util_mode[metric] = "rates"
            dev.util_reason[metric] = f"binding lacks {stype_name}"
            return False
        last = dev.util_last_us.get(metric, 0)
        try:
            (vtype, samples), stamp = self.get(dev, "nvmlDeviceGetSamples", dev.handle, stype, last)
        except NvmlFailure as f:
            if f.kind == "unsupported":
                dev.util_mode[metric] = "rates"
                dev.util_reason[metric] = f.reason
                return False
            if f.kind != "empty":
                self.fail(dev, (metric,), f)
                return True
            samples, stamp = [], self.clock.now()
        attr = FIELD_VALUE_ATTR.get(int(vtype), "uiVal") if samples else "uiVal"
        new = sorted((int(x.timeStamp), getattr(x.sampleValue, attr)) for x in samples if x.timeStamp > last)
        dev.sources.setdefault(metric, "nvmlDeviceGetSamples(" + stype_name + ")")
        prev = dev.util_prev_end.get(metric)
        if not new:
            return prev is not None and stamp - prev <= DRY_NS
        newest = new[-1][0]
        dev.util_last_us[metric] = newest
        for ts, value in new:
            t1 = dev.wall_ns("samples", ts, stamp, newest)
            rows.add(metric, dev.name, t1 if prev is None else prev, t1, float(value))
            prev = t1
        dev.util_prev_end[metric] = prev
        return True

    def _process_util(self, dev: GpuDevice, rows: Rows) -> None:
        """process_gpu_usage (target and children) and other_process_gpu_usage from the driver's
        per-process samples since the last one seen: per pid the mean smUtil of its new samples,
        summed over the target's pids and over the others, for the interval since the previous
        batch.  A pid without a sample in a batch had no kernel running (as nvitop reads it)."""
        if dev.is_unsupported(PROCESS_UTIL_METRICS[0]):
            return
        last = dev.putil_last_us
        try:
            samples, stamp = self.get(dev, "nvmlDeviceGetProcessUtilization", dev.handle, last)
        except NvmlFailure as f:
            if f.kind != "empty":  # NotFound: no sample since `last`
                self.fail(dev, PROCESS_UTIL_METRICS, f)
            elif dev.idle_at_ns is not None and (dev.putil_prev_end is None or
                                                 dev.idle_at_ns - dev.putil_prev_end > DRY_NS):
                # The GPU is idle (its own rate reads 0) and no process sample came for a while:
                # every process's share is 0, known, not missing.
                t = dev.idle_at_ns
                if self._attributable(dev, ()):
                    rows.add(PROCESS_UTIL_METRICS[0], dev.name, t, t, 0.0)
                    rows.add(PROCESS_UTIL_METRICS[1], dev.name, t, t, 0.0)
                dev.putil_prev_end = t
            dev.idle_at_ns = None
            return
        dev.idle_at_ns = None
        per_pid: dict[int, list[float]] = {}
        newest = last
        for x in samples:
            ts = int(x.timeStamp)
            if ts <= last:
                continue  # some drivers return old samples again (nvtop#110)
            newest = max(newest, ts)
            sm = int(x.smUtil)
            if sm > 100:  # impossible share seen from zombie processes (nvtop#110): unknown
                dev.invalid_util_samples += 1
                continue
            acc = per_pid.setdefault(int(x.pid), [0.0, 0.0])
            acc[0] += sm
            acc[1] += 1
        if newest == last:
            return
        dev.putil_last_us = newest
        if not per_pid:
            return  # only impossible values: unknown, not 0
        dev.sources[PROCESS_UTIL_METRICS[0]] = "nvmlDeviceGetProcessUtilization"
        t1 = dev.wall_ns("process_samples", newest, stamp, newest)
        t0 = t1 if dev.putil_prev_end is None else dev.putil_prev_end
        dev.putil_prev_end = t1
        ok = self._attributable(dev, per_pid)
        target = other = 0.0
        for pid, (total, n) in per_pid.items():
            if self.ctx.matcher.is_target(pid):
                target += total / n
            elif self.ctx.matcher.is_own(pid):
                continue  # perfdiff's own process (pids.PidMatcher.is_own): not another process
            else:
                other += total / n
                self.ctx.other_process(dev.name, pid, t1, seen_in="nvmlDeviceGetProcessUtilization",
                                          sm_util_pct=total / n)
        if ok:
            rows.add(PROCESS_UTIL_METRICS[0], dev.name, t0, t1, target)
            rows.add(PROCESS_UTIL_METRICS[1], dev.name, t0, t1, other)

    def _attributable(self, dev: GpuDevice, pids: Any) -> bool:
        """Whether NVML's pids on `dev` can be split into target and others (pid namespaces)."""
        m = self.ctx.matcher
        for pid in pids:
            if m.is_target(pid):
                dev.target_seen = True
                dev.target_pids_seen.add(m.aliases.get(pid, pid))
        if dev.target_seen:
            return True
        unseen = [p for p in pids if not m.visible(p)]
        if unseen:
            dev.ambiguous_pids.update(unseen)
            return False
        return True

    # ------------------------------------------------------------------ processes

    def list_processes(self, dev: GpuDevice) -> dict[int, int | None] | None:
        """{pid: used GPU memory in bytes (None = not available)} from the compute, graphics and
        MPS lists (newest interface first, older ones on FunctionNotFound); None when the
        compute list cannot be read.  The compute list is read every time; the graphics and
        MPS lists, rarely used by GPU servers, once per LIST_REFRESH_NS (cached in between)."""
        if dev.handle is None or dev.lost:
            return None
        if dev.list_chains is None:
            dev.list_chains = [list(chain) for chain in PROCESS_LISTS]
            dev.list_cache = [{} for _ in PROCESS_LISTS]
        out: dict[int, int | None] = {}
        first = last = None
        now = self.clock.now()
        refresh = now - dev.lists_refreshed_ns >= LIST_REFRESH_NS
        if refresh:
            dev.lists_refreshed_ns = now
        for i, chain in enumerate(dev.list_chains):
            if i and not refresh:
                for pid, used in dev.list_cache[i].items():
                    out.setdefault(pid, used)
                continue
            reasons = []
            while chain:
                func = chain[0]
                try:
                    procs, t0, t1 = self.q.call(func, dev.handle)
                except NvmlFailure as f:
                    if f.kind == "lost":
                        dev.lose(self.clock.now(), f)
                        return None
                    if f.kind == "unsupported":
                        reasons.append(f.reason)
                        if f.code == self.fnf:
                            chain.pop(0)  # driver older than the binding: try the older call
                            continue
                        chain.clear()
                    elif i == 0:
                        dev.count_transient(PROCESS_METRICS[0])
                        return None
                    break
                first = t0 if first is None else first
                last = t1
                dev.sources[f"process_list_{i}"] = func
                listed = {int(p.pid): (None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs}
                dev.list_cache[i] = listed
                for pid, used in listed.items():
                    out.setdefault(pid, used)
                break
            if not chain and reasons:
                dev.sources[f"process_list_{i}"] = "unavailable: " + "; ".join(reasons)
                if i == 0:
                    for metric in PROCESS_METRICS:
                        dev.unsupported(metric, "; ".join(reasons))
        if not dev.list_chains[0] or first is None:
            return None
        dev.list_stamp = self.clock.stamp((first + last) // 2)
        return out

    def _processes(self, dev: GpuDevice, rows: Rows) -> None:
        """process_gpu_mem_used / other_process_gpu_mem_used (bytes) at the lists' midpoint."""
        procs = self.list_processes(dev)
        if procs is None:
            return
        t = dev.list_stamp
        ok = self._attributable(dev, procs)
        target = other = 0.0
        for pid, used in procs.items():
            if self.ctx.matcher.is_target(pid):
                target += _NAN if used is None else used
            elif self.ctx.matcher.is_own(pid):
                continue  # perfdiff's own process (pids.PidMatcher.is_own): not another process
            else:
                other += _NAN if used is None else used
                self.ctx.other_process(dev.name, pid, t, seen_in="process list", used_gpu_memory_bytes=used)
        if ok:
            rows.add(PROCESS_METRICS[0], dev.name, t, t, target)
            rows.add(PROCESS_METRICS[1], dev.name, t, t, other)

    # ------------------------------------------------------------------ point getters

    def _points(self, dev: GpuDevice, rows: Rows) -> None:
        """Clocks (MHz), temperature (°C), enforced power limit (W): point readings."""
        for metric, func, args, factor in self.points:
            if dev.is_unsupported(metric):
                continue
            if args is None:
                dev.unsupported(metric, f"the NVML binding lacks a constant {func} needs")
                continue
            try:
                value, stamp = self.get(dev, func, dev.handle, *args)
            except NvmlFailure as f:
                if dev.lost:
                    return
                self.fail(dev, (metric,), f)
                continue
            rows.add(metric, dev.name, stamp, stamp, float(value) * factor)

    def _memory(self, dev: GpuDevice, rows: Rows) -> None:
        """gpu_mem_used (bytes): nvmlMemory_v2 (used without reserved), v1 on older drivers."""
        metric = "gpu_mem_used"
        if dev.is_unsupported(metric):
            return
        version = self.const("nvmlMemory_v2")
        mem = None
        if dev.mem_variant == "v2" and version is not None:
            try:
                mem, stamp = self.get(dev, "nvmlDeviceGetMemoryInfo", dev.handle, version=version)
                dev.sources[metric] = "nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)"
            except NvmlFailure as f:
                if f.kind != "unsupported":
                    self.fail(dev, (metric,), f)
                    return
                dev.mem_variant, dev.mem_v2_reason = "v1", f.reason + " (version=nvmlMemory_v2)"
        if mem is None:
            dev.mem_variant = "v1"
            try:
                mem, stamp = self.get(dev, "nvmlDeviceGetMemoryInfo", dev.handle)
            except NvmlFailure as f:
                self.fail(dev, (metric,), f, prefix=f"{dev.mem_v2_reason}; " if dev.mem_v2_reason else "")
                return
            dev.sources[metric] = "nvmlDeviceGetMemoryInfo (v1: used includes reserved memory)"
        rows.add(metric, dev.name, stamp, stamp, float(mem.used))

    def _power(self, dev: GpuDevice, rows: Rows) -> None:
        """gpu_power (W): the energy counter's (mJ) mean over [previous, this] reading; else
        nvmlDeviceGetPowerUsage (mW) as a point reading."""
        metric = "gpu_power"
        if dev.is_unsupported(metric):
            return
        if dev.power_mode in (None, "energy"):
            try:
                mj, stamp = self.get(dev, "nvmlDeviceGetTotalEnergyConsumption", dev.handle)
            except NvmlFailure as f:
                if f.kind != "unsupported":
                    self.fail(dev, (metric,), f)
                    return
                dev.power_mode, dev.energy_reason = "usage", f.reason
            else:
                dev.power_mode = "energy"
                dev.sources[metric] = "nvmlDeviceGetTotalEnergyConsumption"
                prev, dev.energy_prev = dev.energy_prev, (stamp, int(mj))
                if prev is not None and stamp > prev[0] and mj >= prev[1]:
                    rows.add(metric, dev.name, prev[0], stamp, (mj - prev[1]) * 1e6 / (stamp - prev[0]))
                return
        try:
            mw, stamp = self.get(dev, "nvmlDeviceGetPowerUsage", dev.handle)
        except NvmlFailure as f:
            self.fail(dev, (metric,), f, prefix=f"{dev.energy_reason}; " if dev.energy_reason else "")
            return
        dev.sources[metric] = "nvmlDeviceGetPowerUsage"
        rows.add(metric, dev.name, stamp, stamp, mw / 1000.0)

    # ------------------------------------------------------------------ field values

    def _init_fields(self, dev: GpuDevice) -> None:
        specs: list[FieldSpec] = []
        for metric, const, scope, factor in RATE_FIELDS:
            fid = self.const(const)
            if fid is None:
                dev.unsupported(metric, f"the NVML binding lacks {const}")
            else:
                specs.append(FieldSpec("rate", metric, const, int(fid), scope, factor))
        for metric, bits, counter in THROTTLE_REASONS:
            bit = next((self.const(b) for b in bits if self.const(b) is not None), None)
            fid = self.const(counter) if counter else None
            if fid is not None:
                specs.append(FieldSpec("share", metric, counter, int(fid), 0, 1.0, bit or 0))
            elif bit is not None:
                dev.bitmask_reasons.append((metric, int(bit)))
                dev.bitmask_notes[metric] = "no cumulative counter" if counter is None else f"binding lacks {counter}"
            else:
                dev.unsupported(metric, f"the NVML binding lacks {bits[0]}")
        for kind, const in ECC_FIELDS:
            fid = self.const(const)
            if fid is not None:
                specs.append(FieldSpec("ecc", kind, const, int(fid), 0))
        dev.fields = specs
        dev.reason_funcs = list(REASON_FUNCS)

    def _fields(self, dev: GpuDevice, rows: Rows) -> None:
        """PCIe and NVLink rates (B/s), throttle shares (% of window), ECC increases (events)."""
        specs = dev.fields
        if not specs:
            return
        try:
            values, stamp = self.get(dev, "nvmlDeviceGetFieldValues", dev.handle,
                                     [(s.field_id, s.scope) for s in specs])
        except NvmlFailure as f:
            if f.kind == "unsupported":
                self._drop_fields(dev, [(s, f.reason) for s in specs])
            elif f.kind != "lost":
                dev.count_transient("field_values")
            return
        dropped = []
        for spec, (ret, ts_us, vtype, raw) in zip(specs, read_field_values(values, self.fv_dtype), strict=True):
            if ret != self.success:
                dropped.append((spec, f"{spec.const} (field {spec.field_id}): {self.err_text(ret)}"))
                continue
            ts = dev.wall_ns("fields", ts_us, stamp, ts_us)
            prev = dev.field_prev.get(spec.field_id)
            if prev is not None and ts <= prev[0]:
                continue  # the same cached reading again
            dev.field_prev[spec.field_id] = (ts, raw)
            if prev is None:
                continue
            delta = raw - prev[1]
            if delta < 0:
                bits = FIELD_VALUE_BITS.get(vtype, 64)
                if bits >= 64:  # a 64-bit counter does not wrap: it was reset (driver reload)
                    dev.count_transient(f"{spec.metric}: counter reset")
                    continue
                delta += 1 << bits
            dt = ts - prev[0]
            if spec.kind == "rate":
                rows.add(spec.metric, dev.name, prev[0], ts, delta * spec.factor * 1e9 / dt)
                dev.sources[spec.metric] = spec.const
            elif spec.kind == "share":
                pct = 100.0 * delta / dt
                if pct > 100.0:  # counter and timestamps are read at slightly different instants
                    dev.clipped[spec.metric] = max(dev.clipped.get(spec.metric, 0.0), pct)
                    pct = 100.0
                rows.add(spec.metric, dev.name, prev[0], ts, pct)
                dev.sources[spec.metric] = spec.const + " (ns counter)"
            elif delta > 0:
                self.ctx.state.event(ts, dev.name, "ecc", kind=spec.metric, count=int(delta), total=int(raw),
                                   window_start_ns=prev[0], field=spec.const)
        if dropped:
            self._drop_fields(dev, dropped)

    def _drop_fields(self, dev: GpuDevice, dropped: list[tuple[FieldSpec, str]]) -> None:
        """Fields the GPU does not give: rates unsupported, throttle reasons to the bitmask."""
        gone = {id(s) for s, _ in dropped}
        dev.fields = [s for s in dev.fields if id(s) not in gone]
        for spec, reason in dropped:
            if spec.kind == "rate":
                if spec.metric.startswith("gpu_pcie"):
                    reason += "; nvmlDeviceGetPcieThroughput is not used instead: it measures for 20 ms"
                dev.unsupported(spec.metric, reason)
            elif spec.kind == "share":
                if spec.bit:
                    dev.bitmask_reasons.append((spec.metric, spec.bit))
                    dev.bitmask_notes[spec.metric] = reason
                else:
                    dev.unsupported(spec.metric, reason)
            else:
                dev.unsupported("ecc_errors", reason)

    def _bitmask(self, dev: GpuDevice, rows: Rows) -> None:
        """Throttle reasons without a counter: 100 or 0 at this instant, per reason."""
        if not dev.bitmask_reasons:
            return
        reasons: list[str] = []
        while dev.reason_funcs:
            func = dev.reason_funcs[0]
            try:
                mask, stamp = self.get(dev, func, dev.handle)
                break
            except NvmlFailure as f:
                if f.kind == "lost":
                    return
                if f.kind != "unsupported":
                    dev.count_transient("clock_event_reasons")
                    return
                reasons.append(f.reason)
                if f.code == self.fnf:
                    dev.reason_funcs.pop(0)  # older driver: the pre-535 name
                    continue
                dev.reason_funcs.clear()
        else:
            for metric, _ in dev.bitmask_reasons:
                note = dev.bitmask_notes.get(metric, "")
                dev.unsupported(metric, "; ".join([note] + reasons) if note else "; ".join(reasons))
            dev.bitmask_reasons = []
            return
        for metric, bit in dev.bitmask_reasons:
            rows.add(metric, dev.name, stamp, stamp, 100.0 if int(mask) & bit else 0.0)
            dev.sources[metric] = f"{func} bit 0x{bit:x} (point reading; {dev.bitmask_notes.get(metric, '')})"

    # ------------------------------------------------------------------ GPM

    def _init_gpm(self, dev: GpuDevice) -> None:
        metrics = [m for m, _ in GPM_METRICS]
        ids = [self.const(c) for _, c in GPM_METRICS]
        if None in ids or self.const("c_nvmlGpmMetricsGet_t") is None:
            for m in metrics:
                dev.unsupported(m, "the NVML binding has no GPM interface")
            return
        try:
            support, _ = self.get(dev, "nvmlGpmQueryDeviceSupport", dev.handle)
        except NvmlFailure as f:
            self.fail(dev, tuple(metrics), f)
            return
        if not int(support.isSupportedDevice):
            for m in metrics:
                dev.unsupported(m, "nvmlGpmQueryDeviceSupport: isSupportedDevice = 0 (GPM needs Hopper or newer; "
                                   "DCGM or nsys GPU metrics give SM activity on older GPUs)")
            return
        bufs = []
        try:
            for _ in range(2):
                bufs.append(self.get(dev, "nvmlGpmSampleAlloc")[0])
        except NvmlFailure as f:
            for buf in bufs:
                self.ctx.try_call("nvmlGpmSampleFree", buf)
            self.fail(dev, tuple(metrics), f)
            return
        request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.const("NVML_GPM_METRICS_GET_VERSION")
        request.numMetrics = len(ids)
        for i, mid in enumerate(ids):
            request.metrics[i].metricId = int(mid)
        dev.gpm = GpmState(bufs=bufs, request=request, metrics=metrics)

    def _gpm_failed(self, dev: GpuDevice, g: Any, f: NvmlFailure) -> None:
        """A GPM call failed: unsupported marks the GPM metrics and frees the buffers; a lost
        GPU is handled by the device; anything else counts as transient."""
        if f.kind == "unsupported":
            self.fail(dev, tuple(g.metrics), f)
            dev.free()
        elif f.kind != "lost":
            dev.count_transient("gpm")

    def _gpm(self, dev: GpuDevice, rows: Rows) -> None:
        """gpu_sm_util, gpu_sm_occupancy, gpu_tensor_util, gpu_dram_bw_util (%) over the window
        between this GPM sample and the previous one, taken ≥100 ms apart (no blocking wait)."""
        g = dev.gpm
        if g is None:
            return
        if g.prev_stamp is not None and self.clock.now() - g.prev_stamp < GPM_MIN_NS:
            return
        nxt = 0 if g.prev_i is None else 1 - g.prev_i
        try:
            _, stamp = self.get(dev, "nvmlGpmSampleGet", dev.handle, g.bufs[nxt])
        except NvmlFailure as f:
            self._gpm_failed(dev, g, f)
            return
        prev_i, prev_stamp = g.prev_i, g.prev_stamp
        g.prev_i, g.prev_stamp = nxt, stamp
        if prev_i is None:
            return
        g.request.sample1 = g.bufs[prev_i]
        g.request.sample2 = g.bufs[nxt]
        try:
            self.get(dev, "nvmlGpmMetricsGet", g.request)
        except NvmlFailure as f:
            self._gpm_failed(dev, g, f)
            return
        for i, metric in enumerate(g.metrics):
            m = g.request.metrics[i]
            if int(m.nvmlReturn) != self.success:
                dev.unsupported(metric, f"nvmlGpmMetricsGet {GPM_METRICS[i][1]}: {self.err_text(int(m.nvmlReturn))}")
                continue
            rows.add(metric, dev.name, prev_stamp, stamp, float(m.value))
            dev.sources[metric] = "nvmlGpmMetricsGet " + GPM_METRICS[i][1]

    # ------------------------------------------------------------------ events

    def _register_events(self, dev: GpuDevice) -> None:
        """Register the GPU for XID events on the shared event set (polled each tick)."""
        metric = "xid_events"
        xid_bit = self.const("nvmlEventTypeXidCriticalError")
        event_set, why_not = self.ctx.event_set()
        if xid_bit is None or event_set is None:
            dev.unsupported(metric, why_not or "the NVML binding has no XID events")
            return
        try:
            supported, _ = self.get(dev, "nvmlDeviceGetSupportedEventTypes", dev.handle)
            if not int(supported) & int(xid_bit):
                dev.unsupported(metric, "nvmlDeviceGetSupportedEventTypes: no nvmlEventTypeXidCriticalError on this GPU")
                return
            self.get(dev, "nvmlDeviceRegisterEvents", dev.handle, int(xid_bit), event_set)
        except NvmlFailure as f:
            self.fail(dev, (metric,), f)

    @staticmethod
    def xid_meaning(xid: int) -> str:
        return XID_MEANING.get(xid, "")
