"""The verdict: what changed, as classes with their evidence, ordered by the share of the
cycle they explain (docs/STATISTICS.md, "Verdict").

Built from the findings and the analysis only, never from prose: each class names the
findings it rests on (indexes into the findings list), the share of the abnormal cycle it
explains (τ, pp) and how sure it is (the smallest q of its evidence).  A GPU whose busy
share of the cycle fell (the analysis's `gpu_busy`) while a host-side class holds is recorded
as `Starved` on that class: the GPU waited for the host.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from perfdiff.analyze.evidence import (CauseEvidence, DeviceWideEvidence, EventEvidence, FindingEvidence, LoadEvidence,
                                       MetricEvidence, SymptomEvidence)
from perfdiff.analyze.findings import Finding, FindingCode, more_calls
from perfdiff.analyze.records import Analysis, FunctionStats, GpuBusy
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.model.cuda_names import is_launch_call, is_sync_call
from perfdiff.model.schema import COLLECTIVE_KERNEL, GPU_KINDS, Kind

INPUT_PATTERN = re.compile(r"DataLoader|dataloader|data_loader|input_pipeline|prefetch|collate", re.I)
COLLECTIVE = re.compile(COLLECTIVE_KERNEL)
HOST_CPU_STATES = ("oncpu",)
CONTENTION_STATES = ("runq",)
IO_STATES = ("iowait", "blocked", "read", "write")


class VerdictCode(str, Enum):
    """A class of change; stable across releases."""

    CPU_CLOCK = "cpu-clock-reduced"  # CPU-side work slower at unchanged calls while the CPU clock fell
    CPU_QUOTA = "cpu-quota-throttling"  # the target's cgroup hit its CPU quota (CFS throttling grew)
    MEMORY_PRESSURE = "host-memory-pressure"  # memory stalls, swap, major faults or cgroup limit events grew
    CPU_CONTENTION = "cpu-contention"  # the target's threads waited for a CPU (runq grew)
    IO_WAIT = "io-wait"  # threads blocked on I/O
    INPUT_PIPELINE = "input-pipeline"  # data-loading ranges grew
    GPU_DEVICE_WIDE = "gpu-device-wide"  # every kernel of a GPU slower per call (clocks, power, thermal)
    GPU_THROTTLING = "gpu-throttling"  # kernels slower while the GPU's clocks fell or throttle reasons rose
    GPU_KERNEL = "gpu-kernel-regression"  # named kernels slower per call
    COLLECTIVES = "collectives-longer"  # NCCL collective kernels took longer (waiting for peers, or transfer)
    OTHER_PROCESS = "other-process"  # another process used the GPU
    LAUNCH_BOUND = "launch-bound"  # launch calls slower or more numerous than the kernels they feed; GPU idle
    ADDED_SYNC = "added-synchronisation"  # more synchronisation points per cycle; GPU idle
    TRANSFER = "transfer-growth"  # memcpy / memset time grew
    NEW_WORK = "new-work"  # work present in the abnormal run only, or more calls per cycle
    CPU_WORK = "cpu-work"  # CPU-side ranges slower, with no host-wide reason found
    LOAD = "load-change"  # the runs carried different load; step times compared at a common load
    NO_MATERIAL = "no-material-change"  # nothing significant and material

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Starved:
    """A GPU whose busy share of the cycle fell materially while a host-side class held: the
    GPU waited for the host, and `cause` is the host-side class it points to."""

    device: str
    busy_n_pct: float  # mean busy share of the cycle, %
    busy_a_pct: float
    p: float  # the share's test, Bonferroni-adjusted over the GPUs
    cause: VerdictCode


@dataclass(frozen=True)
class VerdictClass:
    """One class of the verdict: its evidence (indexes into the findings), the share of the
    abnormal cycle it explains (pp) and the smallest q among its evidence; `starved`: the GPUs
    that waited for the host because of this class.  `tau_by_device`: (device, pp) where the
    evidence lies on several devices, largest first: the host's time and the GPU's overlap in
    the cycle, so their sum (tau_pp) is no share of the cycle's wall time."""

    code: VerdictCode
    tau_pp: float = 0.0
    q: float = math.nan
    evidence: tuple[int, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    starved: tuple[Starved, ...] = ()
    tau_by_device: tuple[tuple[str, float], ...] = ()

    @property
    def share_pp(self) -> float:
        """The share of the abnormal cycle the class explains (pp): on several devices the
        largest device's, since the sum over host and GPU is no share of the cycle."""
        return max((pp for _, pp in self.tau_by_device), key=abs, default=self.tau_pp)


def build_verdict(c: Analysis, findings: list[Finding]) -> list[VerdictClass]:
    """The verdict's classes, the one explaining most of the cycle first."""
    causes = [(i, x) for i, x in enumerate(findings) if x.code == FindingCode.CAUSE]
    fn = {i: c.functions[x.func] for i, x in causes if x.func is not None}
    used: set[int] = set()
    out: list[VerdictClass] = []

    def take(code: VerdictCode, idx: list[int], extra: list[int] | None = None, **values: Any) -> None:
        if not idx and not extra:
            return
        used.update(idx + (extra or []))
        qs = [findings[i].q for i in idx + (extra or []) if math.isfinite(findings[i].q)]
        # A cause's τ as its finding states it (at the common load when the load differed).
        out.append(VerdictClass(code, tau_pp=sum(_cause_tau(findings[i], fn[i]) for i in idx if i in fn),
                                q=min(qs) if qs else math.nan, evidence=tuple(idx + (extra or [])), values=values))

    def free() -> list[int]:
        return [i for i, _ in causes if i in fn and i not in used]

    th = c.thresholds
    clock = _clock_drop(c)
    resources = [i for i, x in enumerate(findings) if x.code == FindingCode.RESOURCE]
    if clock is not None:
        # Host calls (launches, copies) are CPU work too: the clock slows them at the same calls.
        slower_same_calls = [i for i, _ in causes if i in fn and (_cpu_side(fn[i]) or _host_call(fn[i]))
                             and _same_calls(fn[i])]
        clock_ev = [i for i in resources if _metric(findings[i]) in ("cpu_frequency", "cpu_frequency_mhz")]
        if slower_same_calls:
            take(VerdictCode.CPU_CLOCK, slower_same_calls, clock_ev[:1], clock_n=clock[0], clock_a=clock[1])
    other, shared = _other_process(findings)
    shared_wide: list[int] = []  # a device-wide slowdown of a GPU another process used is that process's
    for i, x in enumerate(findings):
        if isinstance(x.evidence, DeviceWideEvidence) and not x.evidence.host:
            if x.device in shared:
                shared_wide.append(i)
                continue
            throttle = [j for j in resources if _metric(findings[j]).startswith("gpu_throttle")]
            out.append(VerdictClass(VerdictCode.GPU_DEVICE_WIDE, tau_pp=float(x.evidence.tau_pp),
                                    evidence=(i, *throttle[:2]), values={"device": x.device,
                                                                        "ratio": x.evidence.ratio}))
    loading = [i for i in free() if INPUT_PATTERN.search(fn[i].name)]
    take(VerdictCode.INPUT_PIPELINE, loading, _cpu_time(fn, free()) if loading else [])
    quota = [i for i in resources if _metric(findings[i]) in ("cgroup_cpu_throttled", "cgroup_cpu_throttled_time")
             and _rose(findings[i])]
    if quota:
        waiting = [i for i, _ in causes if i in fn and i not in used and fn[i].kind == Kind.HOST
                   and fn[i].name in CONTENTION_STATES + HOST_CPU_STATES]
        timed = [_metric_evidence(findings[i]) for i in quota if _metric(findings[i]) == "cgroup_cpu_throttled_time"]
        take(VerdictCode.CPU_QUOTA, waiting, quota,
             throttled_ms_per_s_n=timed[0].mean_n if timed else math.nan,
             throttled_ms_per_s_a=timed[0].mean_a if timed else math.nan)
    mem_causes, mem_evidence, mem_values = _memory_pressure(c, findings, fn, used)
    take(VerdictCode.MEMORY_PRESSURE, mem_causes, mem_evidence, **mem_values)
    for code, states, floors in ((VerdictCode.CPU_CONTENTION, CONTENTION_STATES, CPU_STALL_SIGNALS),
                                 (VerdictCode.IO_WAIT, IO_STATES, IO_STALL_SIGNALS)):
        waits = [i for i, _ in causes if i in fn and i not in used and fn[i].kind == Kind.HOST and fn[i].name in states]
        if waits:  # a stall signal backs a state that cost time; alone it did not slow the cycle
            stalls, values = _signal_evidence(findings, _signals(c, floors), floors)
            take(code, waits, stalls, **values)
    starved = _starved_gpus(c)
    launches, launch_values = _launch_bound(c, fn, free(), starved)
    if launches:
        take(VerdictCode.LAUNCH_BOUND, launches, _cpu_time(fn, free()), **launch_values)
    sync = _added_sync(c, findings, starved)
    if sync is not None:
        used.update(i for i in sync.evidence if i in fn)
        out.append(sync)
    take(VerdictCode.NEW_WORK, [i for i, _ in causes if i in fn and i not in used and more_calls(fn[i], th)])
    if other:
        mine = [i for i in free() if fn[i].kind == Kind.KERNEL and fn[i].device in shared]
        used.update(mine)
        ev = other + shared_wide + mine
        out.append(VerdictClass(VerdictCode.OTHER_PROCESS, evidence=tuple(ev), q=_min_q(findings, ev),
                                tau_pp=sum(_wide_tau(findings[i].evidence) for i in shared_wide)
                                + sum(_cause_tau(findings[i], fn[i]) for i in mine),
                                values={"devices": sorted(shared)}))
    # An NCCL kernel's time includes waiting for the other ranks: one rank's trace cannot tell
    # a slower kernel from a later peer, so it is no kernel regression.
    take(VerdictCode.COLLECTIVES, [i for i in free() if fn[i].kind == Kind.KERNEL and COLLECTIVE.match(fn[i].name)])
    kernels = [i for i, _ in causes if i in fn and i not in used and fn[i].kind == Kind.KERNEL]
    throttled = _gpu_throttle(findings, {fn[i].device for i in kernels})
    if throttled:
        take(VerdictCode.GPU_THROTTLING, kernels, [throttled[0][0]], reason=throttled[0][1])
    else:
        take(VerdictCode.GPU_KERNEL, kernels)
    take(VerdictCode.TRANSFER, [i for i, _ in causes if i in fn and i not in used and fn[i].kind in GPU_KINDS])
    take(VerdictCode.CPU_WORK, [i for i, _ in causes if i in fn and i not in used and _cpu_side(fn[i])])
    _host_wide(findings, out, clock, resources, th)
    load = [i for i, x in enumerate(findings) if x.code == FindingCode.LOAD]
    if load:
        v = findings[load[0]].evidence
        assert isinstance(v, LoadEvidence)
        out.append(VerdictClass(VerdictCode.LOAD, evidence=tuple(load),
                                values={"median_tokens_n": v.median_tokens_n, "median_tokens_a": v.median_tokens_a,
                                        "change_pct": v.change_pct, "p": v.p, "explained": not out}))
    if not out:
        neg = [i for i, x in enumerate(findings) if x.code in (FindingCode.NO_CAUSE, FindingCode.NEGLIGIBLE,
                                                                FindingCode.IDENTICAL)]
        out.append(VerdictClass(VerdictCode.NO_MATERIAL, evidence=tuple(neg)))
    out = _point_starved(out, starved)
    out = [_by_device(v, c, findings) for v in out]
    out.sort(key=lambda v: -abs(v.share_pp))
    return out


def _by_device(v: VerdictClass, c: Analysis, findings: list[Finding]) -> VerdictClass:
    """v with tau_by_device where its causes lie on several devices and their shares add up
    to its tau_pp (a class whose τ rests on other numbers too keeps its total alone)."""
    shares: dict[str, float] = {}
    for i in v.evidence:
        x = findings[i]
        if x.code == FindingCode.CAUSE and x.func is not None:
            f = c.functions[x.func]
            shares[f.device] = shares.get(f.device, 0.0) + _cause_tau(x, f)
    if len(shares) < 2 or not math.isclose(sum(shares.values()), v.tau_pp, rel_tol=1e-9, abs_tol=1e-9):
        return v
    return replace(v, tau_by_device=tuple(sorted(shares.items(), key=lambda kv: -abs(kv[1]))))


HOST_REASONS = (VerdictCode.CPU_CLOCK, VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT,
                VerdictCode.MEMORY_PRESSURE, VerdictCode.CPU_WORK)


# Host-side classes of waiting: they lengthen every call of the host they hit, and explain a
# host-wide slowdown per call as far as their own share goes.
HOST_WAITS = (VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT, VerdictCode.MEMORY_PRESSURE)


def _host_wide(findings: list[Finding], out: list[VerdictClass], clock: tuple[float, float] | None,
               resources: list[int], th: Thresholds) -> None:
    """Every CPU-side function of the host slower per call by one ratio: the common-mode check
    took them out of the causes, yet the change is CPU work all the same (the CPU clock's when
    it fell).  Appended to `out` unless a host-side class already explains the host; waiting
    classes (HOST_WAITS) explain it only as far as their own share goes, and what they leave
    is still CPU work when it is material (≥ 1 pp) and ≥ 25 % of the slowdown (merged into a
    CPU-work class already there)."""
    waits = sum(max(0.0, v.tau_pp) for v in out if v.code in HOST_WAITS)
    code = VerdictCode.CPU_CLOCK if clock is not None else VerdictCode.CPU_WORK
    # A class of the same code (a host state, a range that stayed among the causes) explains
    # nothing of the host-wide rest: it is merged with, below.
    if not waits and any(v.code in HOST_REASONS and v.code != code for v in out):
        return
    for i, x in enumerate(findings):
        wide = x.evidence
        if not (isinstance(wide, DeviceWideEvidence) and wide.host and wide.ratio > 1.0):
            continue
        tau = float(wide.tau_pp)
        values: dict[str, Any] = {"device": x.device, "ratio": wide.ratio, "host_wide_pp": tau,
                                  "absorbed_funcs": wide.absorbed_funcs}
        if waits:
            if not tau - waits >= max(th.material_tau_pp, th.host_wide_rest_share * tau):
                return
            tau -= waits
            values.update(explained_pp=waits, explained_by=tuple(v.code.value for v in out if v.code in HOST_WAITS))
        ev = [i]
        if clock is not None:
            ev += [j for j in resources if _metric(findings[j]) in ("cpu_frequency", "cpu_frequency_mhz")][:1]
            values.update(clock_n=clock[0], clock_a=clock[1])
        same = next((k for k, v in enumerate(out) if v.code == code), None)
        if same is None:
            out.append(VerdictClass(code, tau_pp=tau, evidence=tuple(ev), values=values))
        else:  # one class: the causes it named and the unexplained host-wide rest
            v = out[same]
            out[same] = replace(v, tau_pp=v.tau_pp + tau, evidence=tuple(dict.fromkeys((*ev, *v.evidence))),
                                values={**values, **v.values})
        return


def _metric_evidence(x: Finding) -> MetricEvidence:
    assert isinstance(x.evidence, MetricEvidence)
    return x.evidence


def _metric(x: Finding) -> str:
    """The metric a RESOURCE or METRIC_WHILE finding states ("" for other findings)."""
    return x.evidence.metric if isinstance(x.evidence, MetricEvidence) else ""


def _rose(x: Finding) -> bool:
    return isinstance(x.evidence, MetricEvidence) and x.evidence.mean_a > x.evidence.mean_n


def _wide_tau(ev: FindingEvidence | None) -> float:
    return float(ev.tau_pp) if isinstance(ev, DeviceWideEvidence) else 0.0


def _clock_drop(c: Analysis) -> tuple[float, float] | None:
    """(normal, abnormal) mean host CPU clock when it fell significantly by ≥ 10 %."""
    for r in c.context:
        if r.metric in ("cpu_frequency", "cpu_frequency_mhz") and r.device == "Host" and c.thresholds.significant(r.q):
            n, a = r.res.mean_n, r.res.mean_a
            if n > 0 and (n - a) >= c.thresholds.clock_drop_rel * n:
                return n, a
    return None


def _cpu_side(f: FunctionStats) -> bool:
    return f.kind == Kind.CPU or (f.kind == Kind.HOST and f.name in HOST_CPU_STATES)


def _same_calls(f: FunctionStats) -> bool:
    """Calls per cycle unchanged (FunctionStats.same_calls), or a host state (no calls)."""
    return f.sampled or f.kind == Kind.HOST or f.same_calls


# Memory-pressure signals (docs/STATISTICS.md, "Verdict"): each metric and the least rise of its
# mean, in its registry unit, that counts; the cgroup's limit events count from any rise.
MEMORY_SIGNALS = {
    "host_pressure_memory_some": 1.0, "host_pressure_memory_full": 1.0,  # pp of time stalled
    "cgroup_pressure_memory_some": 1.0, "cgroup_pressure_memory_full": 1.0,
    "host_swap_in": 4096.0, "host_swap_out": 4096.0,  # B/s: a page a second
    "process_major_faults": 1.0,  # per second
    "cgroup_mem_events_high": 0.0, "cgroup_mem_events_max": 0.0, "cgroup_mem_events_oom": 0.0,
    "cgroup_mem_events_oom_kill": 0.0, "cgroup_mem_under_oom": 0.0,
}
# Pressure stall information (pp of time stalled) that backs a grown run-queue or I/O wait.
CPU_STALL_SIGNALS = {"cgroup_pressure_cpu_some": 1.0, "host_pressure_cpu_some": 1.0, "cgroup_pressure_cpu_full": 1.0}
IO_STALL_SIGNALS = {"cgroup_pressure_io_some": 1.0, "host_pressure_io_some": 1.0, "cgroup_pressure_io_full": 1.0,
                    "host_pressure_io_full": 1.0}
MEMORY_STATES = ("oncpu", "blocked", "iowait")  # host states reclaim, swap-in and faults make grow


def _memory_pressure(c: Analysis, findings: list[Finding], fn: dict[int, FunctionStats],
                     used: set[int]) -> tuple[list[int], list[int], dict[str, Any]]:
    """(causes claimed, evidence findings, values) of host memory pressure, or ([], [], {}).

    A signal is a memory metric of MEMORY_SIGNALS whose mean rose significantly by at least its
    floor (a run-level context metric, or its μ while a function ran), or a cgroup limit event
    that appeared (never in the normal run, some in the abnormal).  With a signal, the causes it
    explains are the unclaimed host states of MEMORY_STATES and CPU-side ranges; without such
    a cause there is no class (a signal alone did not slow the cycle)."""
    best = _signals(c, MEMORY_SIGNALS)
    if not best:
        return [], [], {}
    claimed = [i for i, x in enumerate(findings) if x.code == FindingCode.CAUSE and i in fn and i not in used
               and (fn[i].kind == Kind.CPU or (fn[i].kind == Kind.HOST and fn[i].name in MEMORY_STATES))]
    if not claimed:
        return [], [], {}
    evidence, values = _signal_evidence(findings, best, MEMORY_SIGNALS)
    return claimed, evidence, values


def _signals(c: Analysis, floors: dict[str, float]) -> dict[str, tuple[float, float, float]]:
    """metric → (q, mean_n, mean_a) of the metrics of `floors` whose mean rose significantly by
    at least their floor (a run-level context metric, or its μ while a function ran; the
    lowest q of the two), or a cgroup memory event that appeared (none normal, some abnormal)."""
    best: dict[str, tuple[float, float, float]] = {}
    for metric, res, q in [(r.metric, r.res, r.q) for r in c.context] + [(m.metric, m.res, m.q) for m in c.mu]:
        floor = floors.get(metric)
        if floor is None:
            continue
        n, a = res.mean_n, res.mean_a
        rose = c.thresholds.significant(q) and a > n and a - n >= floor
        appeared = metric.startswith("cgroup_mem_") and n == 0 and a > 0
        if (rose or appeared) and (metric not in best or not q >= best[metric][0]):
            best[metric] = (q, n, a)
    return best


def _signal_evidence(findings: list[Finding], best: dict[str, tuple[float, float, float]],
                     floors: dict[str, float]) -> tuple[list[int], dict[str, Any]]:
    """(the findings that state the signals of `best`, {"signals": …} in `floors`' order), or
    ([], {}) without a signal."""
    if not best:
        return [], {}
    evidence = [i for i, x in enumerate(findings) if x.code in (FindingCode.RESOURCE, FindingCode.METRIC_WHILE)
                and _metric(x) in best]
    signals = tuple({"metric": m, "mean_n": n, "mean_a": a, "q": q} for m, (q, n, a) in
                    sorted(best.items(), key=lambda kv: list(floors).index(kv[0])))
    return evidence, {"signals": signals}


THROTTLE_REASONS = {"gpu_throttle_power": "power", "gpu_throttle_thermal": "thermal",
                    "gpu_throttle_hw_slowdown": "hardware slowdown", "gpu_throttle_sw_thermal": "thermal"}
CLOCKS = ("gpu_sm_frequency", "gpu_frequency")


def _gpu_throttle(findings: list[Finding], devices: set[str]) -> list[tuple[int, str]]:
    """(finding index, reason) of the evidence that the GPUs of `devices` were held back: a
    throttle-reason metric that rose (power, thermal …), else a GPU clock that fell."""
    rose, fell = [], []
    for i, x in enumerate(findings):
        if x.code != FindingCode.RESOURCE or x.device not in devices or not isinstance(x.evidence, MetricEvidence):
            continue
        metric, n, a = x.evidence.metric, x.evidence.mean_n, x.evidence.mean_a
        if metric in THROTTLE_REASONS and a > n:
            rose.append((i, THROTTLE_REASONS[metric]))
        elif metric in CLOCKS and a < n:
            fell.append((i, "clock"))
    return rose or fell


def _min_q(findings: list[Finding], idx: list[int]) -> float:
    return min((findings[i].q for i in idx if math.isfinite(findings[i].q)), default=math.nan)


def _other_process(findings: list[Finding]) -> tuple[list[int], set[str]]:
    """(evidence, GPUs) of another process on the target's GPUs: an "other-process" event, or
    `other_process_gpu_usage` that rose significantly."""
    idx = [i for i, x in enumerate(findings)
           if (x.code == FindingCode.EVENT and isinstance(x.evidence, EventEvidence)
               and x.evidence.event == "other-process")
           or (x.code == FindingCode.RESOURCE and _metric(x) == "other_process_gpu_usage" and _rose(x))]
    return idx, {str(findings[i].device) for i in idx if findings[i].device}


# --- The GPU waited for the host: starved GPUs, launch-bound, added synchronisation ---------

HOST_SIDE = (VerdictCode.CPU_CLOCK, VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT,
             VerdictCode.INPUT_PIPELINE, VerdictCode.LAUNCH_BOUND, VerdictCode.ADDED_SYNC, VerdictCode.CPU_WORK,
             VerdictCode.MEMORY_PRESSURE)


def _starved_gpus(c: Analysis) -> list[GpuBusy]:
    """The GPUs whose busy share of the cycle fell materially and significantly."""
    out = []
    th = c.thresholds
    for b in c.gpu_busy:
        drop = b.busy_n_pct - b.busy_a_pct
        if (th.significant(b.p) and drop >= th.starved_drop_pp and drop >= th.starved_drop_rel * b.busy_n_pct
                and not th.small_effect(b.res.cliffs_delta)):
            out.append(b)
    return out


def _launch_bound(c: Analysis, fn: dict[int, FunctionStats], free: list[int],
                  starved: list[GpuBusy]) -> tuple[list[int], dict[str, Any]]:
    """Launch-call causes (indexes into the findings) slower per call, or more numerous than
    the kernels on the starved GPUs (all launch calls together: a CUDA graph replaced by one
    launch per kernel counts); values: each launch call's (name, µs per call N and A, calls
    per cycle N and A), and the kernels' calls per cycle N and A."""
    if not starved:
        return [], {}
    devices = {b.device for b in starved}
    kernels = [f for f in c.functions if f.kind == Kind.KERNEL and f.device in devices]
    kn, ka = sum(f.calls_n for f in kernels), sum(f.calls_a for f in kernels)
    launch = [f for f in c.functions if f.kind == Kind.API and is_launch_call(f.name)]
    ln, la = sum(f.calls_n for f in launch), sum(f.calls_a for f in launch)
    more_launches = kn > 0 and ka > 0 and ln > 0 and la / ln >= c.thresholds.launch_ratio * ka / kn
    hit = []
    for i in free:
        f = fn[i]
        if f.kind != Kind.API or not is_launch_call(f.name) or f.tau_pp <= 0:
            continue
        slower = f.presence == "both" and f.per_call_n_us > 0 and f.per_call_a_us >= c.thresholds.launch_ratio * f.per_call_n_us
        if slower or (more_launches and f.calls_a > f.calls_n):
            hit.append(i)
    if not hit:
        return [], {}
    calls = [(fn[i].name, fn[i].per_call_n_us, fn[i].per_call_a_us, fn[i].calls_n, fn[i].calls_a) for i in hit]
    return hit, {"launches": calls, "kernel_calls_n": kn, "kernel_calls_a": ka, "devices": sorted(devices)}


def _added_sync(c: Analysis, findings: list[Finding], starved: list[GpuBusy]) -> VerdictClass | None:
    """More synchronisation points per cycle (new, or ≥ 25 % more calls) whose time grew
    significantly, on a run whose GPU starved; the share it explains is their τ.  The waits
    stay symptoms: the class is about the number of sync points, not the time spent in them."""
    if not starved:
        return None
    more = [j for j, f in enumerate(c.functions)
            if f.kind in (Kind.API, Kind.CPU) and is_sync_call(f.name) and f.tested and c.thresholds.significant(f.q_t)
            and f.tau_pp > 0 and (f.presence == "new" or (f.calls_n > 0
                                                          and f.calls_a >= c.thresholds.sync_more_ratio * f.calls_n))]
    if not more:
        return None
    ev = [i for i, x in enumerate(findings) if x.func in more and x.code in (FindingCode.CAUSE, FindingCode.SYMPTOM)]
    return VerdictClass(VerdictCode.ADDED_SYNC, tau_pp=sum(_tau(c, findings, j) for j in more),
                        q=min(c.functions[j].q_t for j in more), evidence=tuple(ev),
                        values={"calls": [(c.functions[j].name, c.functions[j].calls_n, c.functions[j].calls_a)
                                          for j in more]})


def _point_starved(out: list[VerdictClass], starved: list[GpuBusy]) -> list[VerdictClass]:
    """The starved GPUs, attached to the host-side class explaining most of the cycle."""
    host = [k for k, v in enumerate(out) if v.code in HOST_SIDE]
    if not starved or not host:
        return out
    k = max(host, key=lambda j: abs(out[j].tau_pp))
    out = list(out)
    out[k] = replace(out[k], starved=tuple(Starved(b.device, b.busy_n_pct, b.busy_a_pct, b.p, out[k].code)
                                           for b in starved))
    return out


def _cause_tau(x: Finding, f: FunctionStats) -> float:
    """What a cause explains (pp of the abnormal cycle): its own τ as its finding states it (at
    the common load where the load differed), and the causes nested in its range, which are
    its work (a data loader's copies and casts)."""
    if isinstance(x.evidence, CauseEvidence):
        return float(x.evidence.tau_pp) + float(x.evidence.tau_nested_pp)
    return float(f.tau_pp)


def _tau(c: Analysis, findings: list[Finding], func: int | None) -> float:
    """Function `func`'s τ (pp) as its finding states it: at the common load when the runs'
    load differed, else as measured."""
    if func is None:
        return 0.0
    for x in findings:
        if x.func == func and isinstance(x.evidence, (CauseEvidence, SymptomEvidence)):
            return float(x.evidence.tau_pp)
    return c.functions[func].tau_pp


def _cpu_time(fn: dict[int, FunctionStats], free: list[int]) -> list[int]:
    """The `oncpu` causes among `free`: the CPU time of a class's CPU-side work, claimed by it as
    evidence (a second share of the same time would double its weight in the ordering)."""
    return [i for i in free if fn[i].kind == Kind.HOST and fn[i].name in HOST_CPU_STATES]


def _host_call(f: FunctionStats) -> bool:
    """A host call that is CPU work, not a wait (a launch, an asynchronous copy …)."""
    return f.kind == Kind.API and not f.wait
