"""The verdict: what changed, as classes with their evidence, ordered by the share of the
cycle they explain (docs/STATISTICS.md, "Verdict").

Built from the findings and the analysis only, never from prose: each class names the
findings it rests on (indexes into the findings list), the share of the abnormal cycle it
explains (τ, pp), how sure it is (the smallest q of its evidence) and the numbers it states
(`detail`, one record per code that has some).  A GPU whose busy share of the cycle fell (the
analysis's `gpu_busy`) while a host-side class holds is recorded as `Starved` on that class:
the GPU waited for the host.

How: `RULES` is the classes' rules in order of priority.  Each rule selects its classes from a
`VerdictContext` (the analysis, the findings, what the rules share, the classes so far and the
causes they claimed); a cause claimed by one rule is no later rule's.  The table's order is
the priority, stated once; docs/STATISTICS.md, "Verdict", lists the rules.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from perfdiff.analyze.evidence import (CauseEvidence, DeviceWideEvidence, EventEvidence, LoadEvidence,
                                       LaunchStructureEvidence, MetricEvidence, MixEvidence, PerCallEvidence,
                                       ReplacedEvidence, SymptomEvidence)
from perfdiff.analyze.findings import HOST_DEVICE, Finding, FindingCode, change_direction, more_calls
from perfdiff.analyze.records import Analysis, FunctionStats, GpuBusy
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.analyze.verdict_records import (CategoryShift, Clock, HardwareDetail, CpuClockDetail, CpuWorkDetail, DeviceWideDetail, HostWide,
                                              LaunchCall, LaunchDetail, LoadDetail, MixDetail, MixShift,
                                              OtherProcessDetail, QuotaDetail,
                                              Direction, LaunchStructureDetail, Signal, StallDetail, Starved, SwapOp,
                                              SwappedDetail, SyncCall, SyncDetail, ThrottleDetail, VerdictClass,
                                              VerdictCode, VerdictDetail)
from perfdiff.model.cycles import Regime
from perfdiff.model.cuda_names import MATCHED, is_launch_call, is_sync_call
from perfdiff.model.schema import COLLECTIVE_KERNEL, GPU_KINDS, Kind

NAN = math.nan
INPUT_PATTERN = re.compile(r"DataLoader|dataloader|data_loader|input_pipeline|prefetch|collate", re.I)
COLLECTIVE = re.compile(COLLECTIVE_KERNEL)
HOST_CPU_STATES = ("oncpu",)
CONTENTION_STATES = ("runq",)
IO_STATES = ("iowait", "blocked", "read", "write")
# The host CPU clock's metrics and the unit each is stated in (perfdiff.registry).
CLOCK_UNITS = {"cpu_frequency": "%", "cpu_frequency_mhz": "MHz"}
QUOTA_METRICS = ("cgroup_cpu_throttled", "cgroup_cpu_throttled_time")
MAX_THROTTLE_EVIDENCE = 2  # throttle findings a device-wide GPU class rests on beside its own


# --- What the rules share -------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictContext:
    """What the verdict's rules share.  `causes`: the CAUSE findings (indexes into `findings`)
    naming a function, `fn` that function; `claimed`: the causes a class holds already (a rule
    selects from the rest, `free`); `classes`: the classes so far, in the rules' order.
    `clock`: the host CPU clock where it fell; `other`, `shared`: the evidence and GPUs of
    another process; `shared_wide`: the device-wide findings on those GPUs (that process's);
    `starved`: the GPUs whose busy share fell."""

    c: Analysis
    findings: tuple[Finding, ...]
    fn: Mapping[int, FunctionStats]
    causes: tuple[int, ...]
    resources: tuple[int, ...]
    clock: Clock | None
    clock_evidence: tuple[int, ...]
    other: tuple[int, ...]
    shared: frozenset[str]
    shared_wide: tuple[int, ...]
    starved: tuple[GpuBusy, ...]
    claimed: frozenset[int] = frozenset()
    classes: tuple[VerdictClass, ...] = ()

    @property
    def th(self) -> Thresholds:
        return self.c.thresholds

    def free(self) -> list[int]:
        """The causes no class holds yet, in the findings' order."""
        return [i for i in self.causes if i not in self.claimed]

    def after(self, new: tuple[VerdictClass, ...], merges: bool) -> VerdictContext:
        """The context once `new` is added (merged into a class of its code where `merges`),
        its causes claimed."""
        classes = list(self.classes)
        for v in new:
            same = next((k for k, u in enumerate(classes) if u.code == v.code), None) if merges else None
            if same is None:
                classes.append(v)
            else:  # one class: the causes it named and what the new one adds
                u = classes[same]
                classes[same] = replace(u, tau_pp=u.tau_pp + v.tau_pp,
                                        evidence=tuple(dict.fromkeys((*v.evidence, *u.evidence))), detail=v.detail)
        claimed = self.claimed | {i for v in new for i in v.evidence if i in self.fn}
        return replace(self, classes=tuple(classes), claimed=frozenset(claimed))

    def cls(self, code: VerdictCode, idx: list[int], extra: list[int] | None = None,
            detail: VerdictDetail | None = None) -> tuple[VerdictClass, ...]:
        """A class resting on the causes `idx` (its τ: theirs) and the `extra` findings; none
        without either."""
        ev = idx + (extra or [])
        if not ev:
            return ()
        # A cause's τ as its finding states it (at the common load when the load differed).
        return (VerdictClass(code, tau_pp=sum(_cause_tau(self.findings[i], self.fn[i])
                                              for i in _counted(idx, self.fn)),
                             q=_min_q(self.findings, ev), evidence=tuple(ev), detail=detail),)


def context(c: Analysis, findings: list[Finding]) -> VerdictContext:
    """The VerdictContext before any rule."""
    fn = {i: c.functions[x.func] for i, x in enumerate(findings) if x.code == FindingCode.CAUSE and x.func is not None}
    resources = tuple(i for i, x in enumerate(findings) if x.code == FindingCode.RESOURCE)
    other, shared = _other_process(findings)
    shared_wide = tuple(i for i, x in enumerate(findings) if x.code == FindingCode.DEVICE_WIDE
                        and isinstance(x.evidence, DeviceWideEvidence) and not x.evidence.host and x.device in shared)
    clock = _clock_drop(c)
    clock_ev = tuple(i for i in resources if _metric(findings[i]) in CLOCK_UNITS)[:1] if clock else ()
    return VerdictContext(c, tuple(findings), fn, tuple(fn), resources, clock, clock_ev, tuple(other),
                          frozenset(shared), shared_wide, tuple(_starved_gpus(c)))


# --- The rules --------------------------------------------------------------------------------


MAX_SHIFTS = 2  # op categories a different-hardware class states


def _different_hardware(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """The runs ran on other GPU models or vendors (Analysis.hardware_differs): their kernels and
    runtime calls differ by name, so the causes whose rows the names split (GPU work or runtime
    calls of one run only, CUDA calls matched with HIP ones) are the hardware's, not new work,
    and the op-category table (the largest changes) says where the GPU time went.  Stated even
    without a cause."""
    c = x.c
    if not c.hardware_differs:
        return ()
    mine = [i for i in x.free() if _vendor_named(x.fn[i])]
    gpus_n, gpus_a = c.gpu_models or ((), ())
    moved = sorted((r for r in c.categories if r.d_us), key=lambda r: -abs(r.d_us))[:MAX_SHIFTS]
    runtime_n, runtime_a = c.runtimes
    detail = HardwareDetail(gpus_n, gpus_a, runtime_n, runtime_a,
                            tuple(CategoryShift(r.category, r.t_n_us, r.t_a_us) for r in moved))
    return (VerdictClass(VerdictCode.DIFFERENT_HARDWARE,
                         tau_pp=sum(_cause_tau(x.findings[i], x.fn[i]) for i in mine),
                         q=_min_q(x.findings, mine), evidence=tuple(mine), detail=detail),)


def _vendor_named(f: FunctionStats) -> bool:
    """GPU work, or a CUDA / HIP runtime call, whose row the other hardware's names split or
    joined: present in one run only, or a CUDA call matched with its HIP counterpart.  Work
    of the same name in both runs stays with the later rules (a kernel slower on the other GPU
    is named as such)."""
    if f.kind in GPU_KINDS:
        return f.presence != "both"
    if f.kind != Kind.API or not f.name.startswith(("cu", "hip")):
        return False
    names = f.name.split(MATCHED)
    return f.presence != "both" or names[0].startswith("cu") != names[-1].startswith("cu")


def _cpu_clock(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """CPU-side work (and host calls: launches, copies, which the clock slows too) slower at
    unchanged calls while the host CPU clock fell."""
    if x.clock is None:
        return ()
    slower = [i for i in x.free() if (_cpu_side(x.fn[i]) or _host_call(x.fn[i])) and _same_calls(x.fn[i], x.th)]
    return x.cls(VerdictCode.CPU_CLOCK, slower, list(x.clock_evidence), CpuClockDetail(x.clock)) if slower else ()


def _gpu_device_wide(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Every kernel of a GPU slower per call (a GPU another process used aside: that is the
    other process's)."""
    throttle = [j for j in x.resources if _metric(x.findings[j]).startswith("gpu_throttle")]
    out = []
    for i, f in enumerate(x.findings):
        ev = f.evidence
        if f.code == FindingCode.DEVICE_WIDE and isinstance(ev, DeviceWideEvidence) and not ev.host \
                and i not in x.shared_wide:
            out.append(VerdictClass(VerdictCode.GPU_DEVICE_WIDE, tau_pp=float(ev.tau_pp),
                                    evidence=(i, *throttle[:MAX_THROTTLE_EVIDENCE]),
                                    detail=DeviceWideDetail(str(f.device), ev.ratio)))
    return tuple(out)


def _input_pipeline(x: VerdictContext) -> tuple[VerdictClass, ...]:
    loading = [i for i in x.free() if INPUT_PATTERN.search(x.fn[i].name)]
    return x.cls(VerdictCode.INPUT_PIPELINE, loading, _cpu_time(x) if loading else [])


def _cpu_quota(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """The cgroup's CPU throttling rose: the run-queue and on-CPU states it explains."""
    quota = [i for i in x.resources if _metric(x.findings[i]) in QUOTA_METRICS and _rose(x.findings[i])]
    if not quota:
        return ()
    waiting = [i for i in x.free() if x.fn[i].kind == Kind.HOST and x.fn[i].name in CONTENTION_STATES + HOST_CPU_STATES]
    timed = [x.findings[i].evidence for i in quota if _metric(x.findings[i]) == "cgroup_cpu_throttled_time"]
    detail = (QuotaDetail(timed[0].mean_n, timed[0].mean_a) if timed and isinstance(timed[0], MetricEvidence)
              else QuotaDetail(NAN, NAN))
    return x.cls(VerdictCode.CPU_QUOTA, waiting, quota, detail)


def _memory_pressure(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Host memory pressure: a memory signal (MEMORY_SIGNALS) with the unclaimed host states of
    MEMORY_STATES and CPU-side ranges it explains.  A signal is a memory metric whose mean
    rose significantly by at least its floor (a run-level context metric, or its μ while a
    function ran), or a cgroup limit event that appeared (never in the normal run, some in the
    abnormal); without such a cause there is no class (a signal alone did not slow the cycle)."""
    best = _signals(x.c, MEMORY_SIGNALS)
    if not best:
        return ()
    claimed = [i for i in x.free() if x.fn[i].kind == Kind.CPU
               or (x.fn[i].kind == Kind.HOST and x.fn[i].name in MEMORY_STATES)]
    if not claimed:
        return ()
    evidence, detail = _signal_evidence(x.findings, best, MEMORY_SIGNALS)
    return x.cls(VerdictCode.MEMORY_PRESSURE, claimed, evidence, detail)


def _stalls(code: VerdictCode, states: tuple[str, ...],
            floors: dict[str, float]) -> Callable[[VerdictContext], tuple[VerdictClass, ...]]:
    """The rule of a host state that cost time (run-queue, I/O wait): a stall signal of
    `floors` backs it; alone a signal did not slow the cycle."""
    def rule(x: VerdictContext) -> tuple[VerdictClass, ...]:
        waits = [i for i in x.free() if x.fn[i].kind == Kind.HOST and x.fn[i].name in states]
        if not waits:
            return ()
        stalls, detail = _signal_evidence(x.findings, _signals(x.c, floors), floors)
        return x.cls(code, waits, stalls, detail)
    return rule


def _launch_bound(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Launch-call causes slower per call, or more numerous than the kernels on the starved
    GPUs (all launch calls together: a CUDA graph replaced by one launch per kernel counts)."""
    if not x.starved:
        return ()
    c, th = x.c, x.th
    devices = {b.device for b in x.starved}
    kernels = [f for f in c.functions if f.kind == Kind.KERNEL and f.device in devices]
    kn, ka = sum(f.calls_n for f in kernels), sum(f.calls_a for f in kernels)
    launch = [f for f in c.functions if f.kind == Kind.API and is_launch_call(f.name)]
    ln, la = sum(f.calls_n for f in launch), sum(f.calls_a for f in launch)
    more_launches = kn > 0 and ka > 0 and ln > 0 and la / ln >= th.launch_ratio * ka / kn
    hit = []
    for i in x.free():
        f = x.fn[i]
        if f.kind != Kind.API or not is_launch_call(f.name) or f.tau_pp <= 0:
            continue
        slower = f.presence == "both" and f.per_call_n_us > 0 and f.per_call_a_us >= th.launch_ratio * f.per_call_n_us
        if slower or (more_launches and f.calls_a > f.calls_n):
            hit.append(i)
    if not hit:
        return ()
    calls = tuple(LaunchCall(x.fn[i].name, x.fn[i].per_call_n_us, x.fn[i].per_call_a_us, x.fn[i].calls_n,
                             x.fn[i].calls_a) for i in hit)
    return x.cls(VerdictCode.LAUNCH_BOUND, hit, _cpu_time(x),
                 LaunchDetail(calls, kn, ka, tuple(sorted(devices))))


def _added_sync(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """More synchronisation points per cycle (new, or ≥ sync_more_ratio more calls) whose time
    grew significantly, on a run whose GPU starved; the share it explains is their τ.  The
    waits stay symptoms: the class is about the number of sync points, not the time spent in
    them."""
    if not x.starved:
        return ()
    c, th = x.c, x.th
    more = [j for j, f in enumerate(c.functions)
            if f.kind in (Kind.API, Kind.CPU) and is_sync_call(f.name) and f.tested and th.significant(f.q_t)
            and f.tau_pp > 0 and (f.presence == "new" or (f.calls_n > 0 and f.calls_a >= th.sync_more_ratio * f.calls_n))]
    if not more:
        return ()
    ev = [i for i, f in enumerate(x.findings) if f.func in more and f.code in (FindingCode.CAUSE, FindingCode.SYMPTOM)]
    return (VerdictClass(VerdictCode.ADDED_SYNC, tau_pp=sum(_tau(c, x.findings, j) for j in more),
                         q=min(c.functions[j].q_t for j in more), evidence=tuple(ev),
                         detail=SyncDetail(tuple(SyncCall(c.functions[j].name, c.functions[j].calls_n,
                                                          c.functions[j].calls_a) for j in more))),)


def _swapped(alone: bool) -> Callable[[VerdictContext], tuple[VerdictClass, ...]]:
    """Kernels replaced under one launching op (REPLACED findings): an implementation swapped.
    A class where the replacements' net change is material and explains at least `swap_share`
    of the cycle's change (pp of the abnormal cycle); `alone`: where no other class holds (a
    swap of like speed, or a pair compared by totals).  cuDNN's algorithm search swaps kernels
    under one op in runs of one program: stated as a finding, no class unless it matters."""
    def rule(x: VerdictContext) -> tuple[VerdictClass, ...]:
        ev = [i for i, f in enumerate(x.findings) if f.code == FindingCode.REPLACED]
        if not ev or (alone and x.classes) or any(v.code == VerdictCode.IMPLEMENTATION_SWAPPED for v in x.classes):
            return ()
        tau = sum(float(e.tau_pp) for e in (x.findings[i].evidence for i in ev) if isinstance(e, ReplacedEvidence))
        n, a = x.c.normal.median_us, x.c.abnormal.median_us
        change_pp = 100.0 * (a - n) / a if a > 0 else math.nan
        matters = abs(tau) >= x.th.material_tau_pp and abs(tau) >= x.th.swap_share * abs(change_pp)
        if not (alone or matters):
            return ()
        ops = tuple(SwapOp(r.op, r.device, tuple(x.c.functions[i].name for i in r.gone),
                           tuple(x.c.functions[i].name for i in r.new)) for r in x.c.replacements)
        return (VerdictClass(VerdictCode.IMPLEMENTATION_SWAPPED, tau_pp=tau, q=_min_q(x.findings, ev),
                             evidence=tuple(ev), detail=SwappedDetail(ops)),)
    return rule


def _launch_structure(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """A kernel's launches became fewer and longer (or more and shorter) ones of another
    (LAUNCH_STRUCTURE, a pair compared by totals): an algorithm's launch structure changed."""
    out = []
    for i, f in enumerate(x.findings):
        e = f.evidence
        if f.code != FindingCode.LAUNCH_STRUCTURE or not isinstance(e, LaunchStructureEvidence):
            continue
        gone, new = (x.c.functions[j].name for j in f.related)
        code = VerdictCode.FEWER_LONGER_LAUNCHES if e.fewer_longer else VerdictCode.MORE_SHORTER_LAUNCHES
        out.append(VerdictClass(code, evidence=(i,), detail=LaunchStructureDetail(
            gone, new, e.calls_n, e.calls_a, e.per_call_n_us, e.per_call_a_us)))
    return tuple(out)


def _totals(x: VerdictContext, code: FindingCode, keep: Callable[[Finding], bool] = lambda f: True) -> list[int]:
    """The findings of `code` that `keep` (a pair compared by totals: no causes, these instead)."""
    return [i for i, f in enumerate(x.findings) if f.code == code and keep(f)]


def _slower_per_call(x: VerdictContext, gpu: bool) -> list[int]:
    """The PER_CALL findings of functions slower per call: GPU work (`gpu`) or CPU-side work."""
    def keep(f: Finding) -> bool:
        e = f.evidence
        if not isinstance(e, PerCallEvidence) or not e.slower or f.func is None:
            return False
        fs = x.c.functions[f.func]
        return fs.kind in GPU_KINDS if gpu else _cpu_side(fs)
    return _totals(x, FindingCode.PER_CALL, keep)


def _new_work(x: VerdictContext) -> tuple[VerdictClass, ...]:
    return x.cls(VerdictCode.NEW_WORK, [i for i in x.free() if more_calls(x.fn[i], x.th)],
                 _totals(x, FindingCode.NEW))


def _other_process_class(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Another process on the target's GPUs: its evidence, the device-wide slowdowns of those
    GPUs and the unclaimed kernel causes on them."""
    if not x.other:
        return ()
    mine = [i for i in x.free() if x.fn[i].kind == Kind.KERNEL and x.fn[i].device in x.shared]
    ev = [*x.other, *x.shared_wide, *mine]
    wide = sum(float(e.tau_pp) for e in (x.findings[i].evidence for i in x.shared_wide)
               if isinstance(e, DeviceWideEvidence))
    return (VerdictClass(VerdictCode.OTHER_PROCESS, evidence=tuple(ev), q=_min_q(x.findings, ev),
                         tau_pp=wide + sum(_cause_tau(x.findings[i], x.fn[i]) for i in mine),
                         detail=OtherProcessDetail(tuple(sorted(x.shared)))),)


def _collectives(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """An NCCL kernel's time includes waiting for the other ranks: one rank's trace cannot tell
    a slower kernel from a later peer, so it is no kernel regression."""
    return x.cls(VerdictCode.COLLECTIVES, [i for i in x.free() if x.fn[i].kind == Kind.KERNEL
                                           and COLLECTIVE.match(x.fn[i].name)])


def _gpu_kernels(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Kernels slower: held back (a throttle reason rose, a clock fell) or a regression."""
    kernels = [i for i in x.free() if x.fn[i].kind == Kind.KERNEL]
    throttled = _gpu_throttle(x.findings, {x.fn[i].device for i in kernels})
    if throttled:
        return x.cls(VerdictCode.GPU_THROTTLING, kernels, [throttled[0][0]], ThrottleDetail(throttled[0][1]))
    return x.cls(VerdictCode.GPU_KERNEL, kernels, _slower_per_call(x, gpu=True))


def _throttle_held(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """A GPU throttle reason that rose by at least `throttle_held_pp` of the time on a GPU no
    class has named: said even when no kernel got slower with it (a memory-bound or idle
    loop under a power cap), so a reader sees the GPU was held back."""
    named = {c.detail.device for c in x.classes if isinstance(c.detail, ThrottleDetail)}
    if any(c.code in (VerdictCode.GPU_THROTTLING, VerdictCode.GPU_DEVICE_WIDE) and not
           (isinstance(c.detail, ThrottleDetail) and c.detail.held) for c in x.classes):
        return ()
    out = []
    for i, f in enumerate(x.findings):
        ev = f.evidence
        if (f.code != FindingCode.RESOURCE or not isinstance(ev, MetricEvidence) or ev.metric not in THROTTLE_REASONS
                or f.device in named or not ev.mean_a - ev.mean_n >= x.th.throttle_held_pp):
            continue
        clock = next(((j, g.evidence) for j, g in enumerate(x.findings) if g.code == FindingCode.RESOURCE
                      and g.device == f.device and isinstance(g.evidence, MetricEvidence)
                      and g.evidence.metric in CLOCKS and g.evidence.mean_a < g.evidence.mean_n), None)
        evidence = (i,) + ((clock[0],) if clock else ())
        out.append(VerdictClass(VerdictCode.GPU_THROTTLING, q=_min_q(x.findings, list(evidence)), evidence=evidence,
                                detail=ThrottleDetail(THROTTLE_REASONS[ev.metric], held=True, device=str(f.device),
                                                      share_n_pct=ev.mean_n, share_a_pct=ev.mean_a,
                                                      clock_n_mhz=clock[1].mean_n if clock else NAN,
                                                      clock_a_mhz=clock[1].mean_a if clock else NAN)))
        named.add(f.device)
    return tuple(out)


def _transfer(x: VerdictContext) -> tuple[VerdictClass, ...]:
    return x.cls(VerdictCode.TRANSFER, [i for i in x.free() if x.fn[i].kind in GPU_KINDS])


def _cpu_work(x: VerdictContext) -> tuple[VerdictClass, ...]:
    return x.cls(VerdictCode.CPU_WORK, [i for i in x.free() if _cpu_side(x.fn[i])], _slower_per_call(x, gpu=False))


HOST_REASONS = (VerdictCode.CPU_CLOCK, VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT,
                VerdictCode.MEMORY_PRESSURE, VerdictCode.CPU_WORK)
# Host-side classes of waiting: they lengthen every call of the host they hit, and explain a
# host-wide slowdown per call as far as their own share goes.
HOST_WAITS = (VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT, VerdictCode.MEMORY_PRESSURE)


def _host_wide(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """Every CPU-side function of the host slower per call by one ratio: the common-mode check
    took them out of the causes, yet the change is CPU work all the same (the CPU clock's when
    it fell).  A class unless a host-side class already explains the host; waiting classes
    (HOST_WAITS) explain it only as far as their own share goes, and what they leave is still
    CPU work when it is material (≥ material_tau_pp) and ≥ host_wide_rest_share of the
    slowdown.  The rule merges: a class of its code already there takes it in."""
    waits = sum(max(0.0, v.tau_pp) for v in x.classes if v.code in HOST_WAITS)
    code = VerdictCode.CPU_CLOCK if x.clock is not None else VerdictCode.CPU_WORK
    # A class of the same code (a host state, a range that stayed among the causes) explains
    # nothing of the host-wide rest: it is merged with.
    if not waits and any(v.code in HOST_REASONS and v.code != code for v in x.classes):
        return ()
    i, ev = next(((i, f.evidence) for i, f in enumerate(x.findings) if f.code == FindingCode.DEVICE_WIDE
                  and isinstance(f.evidence, DeviceWideEvidence) and f.evidence.host and f.evidence.ratio > 1.0),
                 (None, None))
    if i is None or ev is None:
        return ()
    tau = float(ev.tau_pp)
    wide = HostWide(str(x.findings[i].device), ev.ratio, tau, ev.absorbed_funcs)
    if waits:
        if not tau - waits >= max(x.th.material_tau_pp, x.th.host_wide_rest_share * tau):
            return ()
        tau -= waits
        wide = replace(wide, explained_pp=waits, explained_by=tuple(v.code for v in x.classes if v.code in HOST_WAITS))
    detail: VerdictDetail = (CpuClockDetail(x.clock, wide) if x.clock is not None else CpuWorkDetail(wide))
    return (VerdictClass(code, tau_pp=tau, evidence=(i, *x.clock_evidence), detail=detail),)


def _load(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """The runs carried different load: said as a class, which explains the change when no
    other class holds."""
    load = [i for i, f in enumerate(x.findings) if f.code == FindingCode.LOAD]
    ev = x.findings[load[0]].evidence if load else None
    if not isinstance(ev, LoadEvidence):
        return ()
    return (VerdictClass(VerdictCode.LOAD, evidence=tuple(load), detail=LoadDetail(
        ev.median_tokens_n, ev.median_tokens_a, ev.change_pct, ev.p, explained=not x.classes)),)


def _mix(x: VerdictContext) -> tuple[VerdictClass, ...]:
    """The mix of kinds of step changed (MIX_CHANGE findings): said as a class, a load change
    and no regression, which explains the change when no other class holds."""
    mix = [i for i, f in enumerate(x.findings) if f.code == FindingCode.MIX_CHANGE]
    if not mix:
        return ()
    fns = x.c.functions
    shifts = tuple(MixShift(tuple(fns[j].name for j in ev.present), tuple(fns[j].name for j in ev.absent),
                            ev.share_n_pct, ev.share_a_pct, ev.p)
                   for ev in (x.findings[i].evidence_as(MixEvidence) for i in mix))
    return (VerdictClass(VerdictCode.MIX, q=_min_q(x.findings, mix), evidence=tuple(mix),
                         detail=MixDetail(shifts, explained=all(v.code == VerdictCode.LOAD for v in x.classes))),)


def _no_material(x: VerdictContext) -> tuple[VerdictClass, ...]:
    if x.classes:
        return ()
    neg = [i for i, f in enumerate(x.findings) if f.code in (FindingCode.NO_CAUSE, FindingCode.NEGLIGIBLE,
                                                             FindingCode.IDENTICAL, FindingCode.PER_CALL_NONE)]
    return (VerdictClass(VerdictCode.NO_MATERIAL, evidence=tuple(neg)),)


# --- Helpers ------------------------------------------------------------------------------------


def _dependence_unchecked(v: VerdictClass, findings: list[Finding]) -> bool:
    """A cause (or a change of mix) among the class's evidence whose test could not check its
    cycles' dependence."""
    return any(isinstance(findings[i].evidence, (CauseEvidence, MixEvidence)) and findings[i].evidence.dependence_unchecked
               for i in v.evidence)


def _metric(x: Finding) -> str:
    """The metric a RESOURCE or METRIC_WHILE finding states ("" for other findings)."""
    return x.evidence.metric if isinstance(x.evidence, MetricEvidence) else ""


def _rose(x: Finding) -> bool:
    return isinstance(x.evidence, MetricEvidence) and x.evidence.mean_a > x.evidence.mean_n


def _counted(idx: list[int], fn: Mapping[int, FunctionStats]) -> list[int]:
    """The causes of `idx` whose τ a class adds up: its functions; its host states (per thread,
    overlapping the functions' own time: `oncpu` is the CPU-side work's CPU time) only where it
    has no function, so that a class is never its work counted twice."""
    causes = [i for i in idx if i in fn]
    work = [i for i in causes if not fn[i].host_state]
    return work or causes


def _by_device(v: VerdictClass, c: Analysis, findings: list[Finding]) -> VerdictClass:
    """v with tau_by_device where its causes lie on several devices and their shares add up
    to its tau_pp (a class whose τ rests on other numbers too keeps its total alone)."""
    shares: dict[str, float] = {}
    fn = {i: c.functions[x.func] for i in v.evidence for x in (findings[i],)
          if x.code == FindingCode.CAUSE and x.func is not None}
    for i in _counted(list(v.evidence), fn):
        x = findings[i]
        if x.code == FindingCode.CAUSE and x.func is not None:
            f = c.functions[x.func]
            shares[f.device] = shares.get(f.device, 0.0) + _cause_tau(x, f)
    if len(shares) < 2 or not math.isclose(sum(shares.values()), v.tau_pp, rel_tol=1e-9, abs_tol=1e-9):
        return v
    return replace(v, tau_by_device=tuple(sorted(shares.items(), key=lambda kv: -abs(kv[1]))))


def _clock_drop(c: Analysis) -> Clock | None:
    """The host CPU clock (mean, normal and abnormal) when it fell significantly by at least
    clock_drop_rel of itself."""
    th = c.thresholds
    for r in c.context:
        if r.metric in CLOCK_UNITS and r.device == HOST_DEVICE and th.significant(r.q):
            n, a = r.res.mean_n, r.res.mean_a
            if n > 0 and (n - a) >= th.clock_drop_rel * n:
                return Clock(n, a, CLOCK_UNITS[r.metric])
    return None


def _cpu_side(f: FunctionStats) -> bool:
    return f.kind == Kind.CPU or (f.kind == Kind.HOST and f.name in HOST_CPU_STATES)


def _same_calls(f: FunctionStats, th: Thresholds) -> bool:
    """Calls per cycle unchanged (Thresholds.same_calls), or a host state (no calls)."""
    return f.sampled or f.kind == Kind.HOST or th.same_calls(f.calls_n, f.calls_a)


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


def _signal_evidence(findings: tuple[Finding, ...], best: dict[str, tuple[float, float, float]],
                     floors: dict[str, float]) -> tuple[list[int], StallDetail]:
    """(the findings that state the signals of `best`, the signals in `floors`' order); ([], no
    signals) without a signal."""
    if not best:
        return [], StallDetail()
    evidence = [i for i, x in enumerate(findings) if x.code in (FindingCode.RESOURCE, FindingCode.METRIC_WHILE)
                and _metric(x) in best]
    signals = tuple(Signal(m, n, a, q) for m, (q, n, a) in sorted(best.items(), key=lambda kv: list(floors).index(kv[0])))
    return evidence, StallDetail(signals)


THROTTLE_REASONS = {"gpu_throttle_power": "power", "gpu_throttle_thermal": "thermal",
                    "gpu_throttle_hw_slowdown": "hardware slowdown", "gpu_throttle_sw_thermal": "thermal"}
CLOCKS = ("gpu_sm_frequency", "gpu_frequency")


def _gpu_throttle(findings: tuple[Finding, ...], devices: set[str]) -> list[tuple[int, str]]:
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


def _min_q(findings: tuple[Finding, ...], idx: list[int]) -> float:
    return min((findings[i].q for i in idx if math.isfinite(findings[i].q)), default=math.nan)


def _other_process(findings: list[Finding]) -> tuple[list[int], set[str]]:
    """(evidence, GPUs) of another process on the target's GPUs: an "other-process" event, or
    `other_process_gpu_usage` that rose significantly."""
    idx = [i for i, x in enumerate(findings)
           if (x.code == FindingCode.EVENT and isinstance(x.evidence, EventEvidence)
               and x.evidence.event == "other-process")
           or (x.code == FindingCode.RESOURCE and _metric(x) == "other_process_gpu_usage" and _rose(x))]
    return idx, {str(findings[i].device) for i in idx if findings[i].device}


# --- The GPU waited for the host: starved GPUs ----------------------------------------------

HOST_SIDE = (VerdictCode.CPU_CLOCK, VerdictCode.CPU_QUOTA, VerdictCode.CPU_CONTENTION, VerdictCode.IO_WAIT,
             VerdictCode.INPUT_PIPELINE, VerdictCode.LAUNCH_BOUND, VerdictCode.ADDED_SYNC, VerdictCode.CPU_WORK,
             VerdictCode.MEMORY_PRESSURE)


def _starved_gpus(c: Analysis) -> list[GpuBusy]:
    """The GPUs whose busy share of the cycle fell materially (by starved_drop_pp and
    starved_drop_rel of itself, with at least a small effect) and significantly."""
    out = []
    th = c.thresholds
    for b in c.gpu_busy:
        drop = b.busy_n_pct - b.busy_a_pct
        if (th.significant(b.p) and drop >= th.starved_drop_pp and drop >= th.starved_drop_rel * b.busy_n_pct
                and not th.small_effect(b.res.cliffs_delta)):
            out.append(b)
    return out


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


def _tau(c: Analysis, findings: tuple[Finding, ...], func: int | None) -> float:
    """Function `func`'s τ (pp) as its finding states it: at the common load when the runs'
    load differed, else as measured."""
    if func is None:
        return 0.0
    for x in findings:
        if x.func == func and isinstance(x.evidence, (CauseEvidence, SymptomEvidence)):
            return float(x.evidence.tau_pp)
    return c.functions[func].tau_pp


def _cpu_time(x: VerdictContext) -> list[int]:
    """The `oncpu` causes not yet claimed: the CPU time of a class's CPU-side work, claimed by it
    as evidence (a second share of the same time would double its weight in the ordering)."""
    return [i for i in x.free() if x.fn[i].kind == Kind.HOST and x.fn[i].name in HOST_CPU_STATES]


def _host_call(f: FunctionStats) -> bool:
    """A host call that is CPU work, not a wait (a launch, an asynchronous copy …)."""
    return f.kind == Kind.API and not f.wait


# --- The table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictRule:
    """One rule: its name, the codes of the classes it may state, and how it selects them from
    the context.  `merges`: a class it states joins a class of its code already there."""

    name: str
    codes: tuple[VerdictCode, ...]
    select: Callable[[VerdictContext], tuple[VerdictClass, ...]]
    merges: bool = False


# The priority of the classes, stated once: a cause goes to the first rule that claims it.
# docs/STATISTICS.md, "Verdict", lists the rules and their thresholds.
RULES: tuple[VerdictRule, ...] = (
    VerdictRule("different-hardware", (VerdictCode.DIFFERENT_HARDWARE,), _different_hardware),
    VerdictRule("cpu-clock", (VerdictCode.CPU_CLOCK,), _cpu_clock),
    VerdictRule("gpu-device-wide", (VerdictCode.GPU_DEVICE_WIDE,), _gpu_device_wide),
    VerdictRule("input-pipeline", (VerdictCode.INPUT_PIPELINE,), _input_pipeline),
    VerdictRule("cpu-quota", (VerdictCode.CPU_QUOTA,), _cpu_quota),
    VerdictRule("memory-pressure", (VerdictCode.MEMORY_PRESSURE,), _memory_pressure),
    VerdictRule("cpu-contention", (VerdictCode.CPU_CONTENTION,),
                _stalls(VerdictCode.CPU_CONTENTION, CONTENTION_STATES, CPU_STALL_SIGNALS)),
    VerdictRule("io-wait", (VerdictCode.IO_WAIT,), _stalls(VerdictCode.IO_WAIT, IO_STATES, IO_STALL_SIGNALS)),
    VerdictRule("launch-bound", (VerdictCode.LAUNCH_BOUND,), _launch_bound),
    VerdictRule("added-sync", (VerdictCode.ADDED_SYNC,), _added_sync),
    VerdictRule("implementation-swapped", (VerdictCode.IMPLEMENTATION_SWAPPED,), _swapped(alone=False)),
    VerdictRule("launch-structure", (VerdictCode.FEWER_LONGER_LAUNCHES, VerdictCode.MORE_SHORTER_LAUNCHES),
                _launch_structure),
    VerdictRule("new-work", (VerdictCode.NEW_WORK,), _new_work),
    VerdictRule("other-process", (VerdictCode.OTHER_PROCESS,), _other_process_class),
    VerdictRule("collectives", (VerdictCode.COLLECTIVES,), _collectives),
    VerdictRule("gpu-kernels", (VerdictCode.GPU_THROTTLING, VerdictCode.GPU_KERNEL), _gpu_kernels),
    VerdictRule("transfer", (VerdictCode.TRANSFER,), _transfer),
    VerdictRule("cpu-work", (VerdictCode.CPU_WORK,), _cpu_work),
    VerdictRule("host-wide", (VerdictCode.CPU_CLOCK, VerdictCode.CPU_WORK), _host_wide, merges=True),
    VerdictRule("gpu-throttle-held", (VerdictCode.GPU_THROTTLING,), _throttle_held),
    VerdictRule("load", (VerdictCode.LOAD,), _load),
    VerdictRule("mix", (VerdictCode.MIX,), _mix),
    VerdictRule("swapped-alone", (VerdictCode.IMPLEMENTATION_SWAPPED,), _swapped(alone=True)),
    VerdictRule("no-material", (VerdictCode.NO_MATERIAL,), _no_material),
)


def build_verdict(c: Analysis, findings: list[Finding]) -> list[VerdictClass]:
    """The verdict's classes (RULES, in order of priority), the one explaining most of the
    cycle first."""
    x = context(c, findings)
    for rule in RULES:
        x = x.after(rule.select(x), rule.merges)
    out = _point_starved(list(x.classes), list(x.starved))
    # Every class explains the one change: a speed-up's classes are what made the cycle faster.
    identical = any(f.code == FindingCode.IDENTICAL for f in findings)
    # Compared by totals each class states its own way (kernels slower per call, new work): none is
    # the one change's direction.
    totals = c.plan is not None and c.plan.regime is Regime.TOTALS
    direction = Direction.FASTER if not identical and not totals and change_direction(c) < 0 else Direction.SLOWER
    out = [replace(_by_device(v, c, findings), direction=direction) for v in out]
    out = [replace(v, dependence_unchecked=True) if _dependence_unchecked(v, findings) else v for v in out]
    # Other hardware comes first whatever its share: it qualifies every other class.
    out.sort(key=lambda v: (v.code != VerdictCode.DIFFERENT_HARDWARE, -abs(v.share_pp)))
    return out
