"""Key Findings as records: causes first, then the symptoms and resources that explain them.

Each finding has a stable code, the function or device it names, its q, and the numbers it
rests on (`evidence`, one record per code: perfdiff.analyze.evidence); perfdiff.render words
it.  "Significant" means q ≤ α (docs/STATISTICS.md).

How: `select` works out, in named steps, what the rules share (a `Selection`: the direction
of the change, the causes, which functions the device-wide changes, kernel swaps and nesting
claim); then every rule of `RULES`, in the table's order, which is the findings' order,
states its findings from it.  docs/STATISTICS.md, "Findings", lists the rules.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from perfdiff import stats
from perfdiff.analyze.evidence import (MAX_LISTED, CauseEvidence, Direction, CommonModeEvidence, CycleTimeEvidence,
                                       CyclesNeededEvidence, DeviceWideEvidence, EventEvidence, Finding, FindingCode,
                                       KernelSwapEvidence, LoadEvidence, MetricEvidence, MixEvidence,
                                       NegligibleEvidence, NoCauseEvidence, OppositeEvidence, SymptomEvidence)
from perfdiff.analyze.launchers import replaced_findings, replaced_functions
from perfdiff.analyze.classes import mix_moved
from perfdiff.analyze.records import Analysis, CommonMode, FunctionByClass, FunctionLoad, FunctionStats
from perfdiff.analyze.thresholds import DEFAULT, Thresholds
from perfdiff.analyze.totals import TOTALS_RULES, select_totals
from perfdiff.model.cuda_names import is_sync_call
from perfdiff.model.cycles import Regime
from perfdiff.model.schema import GPU_KINDS, CycleSource, Kind

MAX_CAUSES = 5
MAX_SYMPTOMS = 3
MAX_RESOURCES = 5
MAX_DEVIATING = 3  # functions named as deviating from a device-wide or common-mode change
EVENT_KINDS = ("gpu-lost", "xid", "ecc", "other-process", "target-exited")
HOST_DEVICE = "Host"


# --- What the rules share -------------------------------------------------------------------

Swap = tuple[tuple[int, ...], tuple[int, ...], float]  # (gained, lost, net τ in pp), function indexes


@dataclass(frozen=True)
class DeviceWide:
    """A device-wide change per call that took causes in: the check, the causes it absorbed
    and the causes left on its device (function indexes, largest |τ| first)."""

    mode: CommonMode
    absorbed: tuple[int, ...]
    deviating: tuple[int, ...]


@dataclass(frozen=True)
class Selection:
    """What the finding rules share, worked out once by `select`.  Function indexes into
    Analysis.functions throughout.

    `direction`: +1 where the change to explain is a slowdown (at a common load: the load-
    adjusted change's sign; kind with kind: the standardised change's), −1 a speed-up.  `at_load`:
    the functions compared at a common load (None where the load did not differ); `by_class`:
    the functions compared kind with kind (None where the cycles form one class, or at a common
    load).  `causes`: significant, material changes in the
    direction, largest |τ| first, less the ones nested in another cause (`children`), said in a
    kernel swap (`swapped`) or absorbed by a device-wide change (`device_wide`)."""

    c: Analysis
    th: Thresholds
    direction: float
    at_load: Mapping[int, FunctionLoad] | None
    by_class: Mapping[int, FunctionByClass] | None
    tested: tuple[int, ...]
    explained: tuple[int, ...]  # significant as measured, not at the common load (or with the mix changed, by class)
    causes: tuple[int, ...]
    children: Mapping[int, tuple[int, ...]]
    negligible: tuple[int, ...]  # significant in the direction, not material; largest |τ| first
    proportional: tuple[int, ...]  # host states (and idle threads' waits) that kept their share
    waits: tuple[int, ...]  # symptoms: significant waits, largest |τ| first
    swaps: tuple[Swap, ...]
    swapped: frozenset[int]
    device_wide: tuple[DeviceWide, ...]

    def fn(self, i: int) -> FunctionStats:
        return self.c.functions[i]

    def q_of(self, i: int) -> float:
        """Function i's q as the findings state it: at the common load where the load differed,
        kind with kind where the cycles form step classes."""
        if self.at_load is not None:
            return self.at_load[i].q
        return self.by_class[i].q if self.by_class is not None else self.c.functions[i].q_t

    def tau_of(self, i: int) -> float:
        """Function i's τ (pp) as the findings state it (as q_of)."""
        if self.at_load is not None:
            return self.at_load[i].tau_pp
        return self.by_class[i].tau_pp if self.by_class is not None else self.c.functions[i].tau_pp

    @property
    def like_for_like(self) -> bool:
        """The functions are compared at a common load or kind with kind, not as measured."""
        return self.at_load is not None or self.by_class is not None

    @property
    def mix_changed(self) -> bool:
        """The functions are compared kind with kind and a kind's share of the steps moved."""
        return self.by_class is not None and self.c.step_classes is not None and self.c.step_classes.mix_changed

    @property
    def modes(self) -> tuple[CommonMode, ...]:
        """The device-wide checks the findings use: none under different load or a changed mix of
        steps (per-call times and shares move with them, so they compare nothing like for like)."""
        return self.c.common_modes if self.at_load is None and not self.mix_changed else ()


def select(c: Analysis) -> Selection:
    """The Selection of an analysis, in named steps: the direction; the significant changes in
    it, material or not; the load's; causes and host states that kept their share; nesting;
    kernel swaps; device-wide changes; waits and idle threads."""
    th = c.thresholds
    measured = _measured_direction(c)
    at_load = _at_common_load(c)
    by_class = _by_class(c)
    direction = change_direction(c)
    tested = tuple(i for i, f in enumerate(c.functions) if f.tested)
    # The steps below read the direction, the load and the tests: the Selection before its claims.
    base = Selection(c, th, direction, at_load, by_class, tested, (), (), {}, (), (), (), (), frozenset(), ())
    moved = [i for i in tested if not c.functions[i].wait and th.significant(base.q_of(i))
             and base.tau_of(i) * direction > 0]
    # Significant is not enough: a cause must also be material (docs/STATISTICS.md).
    material_moved = [i for i in moved if _is_material(base, i)]
    negligible = sorted((i for i in moved if not _is_material(base, i)), key=lambda i: -abs(c.functions[i].tau_pp))
    explained = _explained_by_load(base, measured, set(moved))
    # A host state summed over threads (oncpu, blocked …) grows with the cycle by itself; it is
    # a cause only when its share of the cycle moved too.
    causes = [i for i in material_moved if c.functions[i].kind != Kind.HOST or _share_moved(c.functions[i], th,
                                                                                          direction)]
    proportional = [i for i in material_moved if i not in causes]
    causes.sort(key=lambda i: -abs(base.tau_of(i)))
    children, causes = _nest(c, causes, th)
    replaced = set(replaced_functions(c))  # said in the replacement alone
    causes = [i for i in causes if i not in replaced]
    swaps = _kernel_swaps(base, causes, [i for i in tested if th.significant(base.q_of(i)) and i not in replaced])
    swapped = frozenset([*(i for gained, lost, _ in swaps for i in gained + lost), *replaced])  # said in the swap alone
    causes = [i for i in causes if i not in swapped]
    device_wide, causes = _absorb_device_wide(base, causes)
    waits, idle = _waits(base)
    return Selection(c, th, direction, at_load, by_class, tested, explained, tuple(causes), children, tuple(negligible),
                     tuple(proportional + idle), tuple(waits), tuple(swaps), swapped, tuple(device_wide))


def change_direction(c: Analysis) -> float:
    """The direction of the change the findings explain: +1 a slowdown, −1 a speed-up; as
    measured, at a common load where the runs' load differed (the adjusted change's sign), or
    kind with kind where the cycles form step classes (the standardised change's sign)."""
    if _at_common_load(c) is not None and c.load is not None:
        return 1.0 if c.load.change_us >= 0 else -1.0
    if _by_class(c) is not None and c.step_classes is not None:
        return 1.0 if c.step_classes.change_us >= 0 else -1.0
    return _measured_direction(c)


def _measured_direction(c: Analysis) -> float:
    """The direction of the change as measured.  It is the mean cycle's (throughput, what users
    feel): a quarter of the cycles stalling leaves the median where it was and still costs
    throughput.  Fixed windows last alike by construction (a last, partial one aside): what grew
    per window of wall clock is what the abnormal run spent more time on."""
    d_med = c.abnormal.median_us - c.normal.median_us
    d_mean = c.abnormal.mean_us - c.normal.mean_us
    windows = c.plan is not None and c.plan.source == CycleSource.WINDOW
    return -1.0 if not windows and _faster(c, d_med, d_mean) else 1.0


def _is_material(s: Selection, i: int) -> bool:
    """At a common load or kind with kind: |τ| there ≥ material_tau_pp; as measured: `material`."""
    return abs(s.tau_of(i)) >= s.th.material_tau_pp if s.like_for_like else material(s.fn(i), s.th)


def _explained_by_load(s: Selection, measured: float, moved: set[int]) -> tuple[int, ...]:
    """Under different load, own times are compared at a common load (analyze/load.py), and
    under a changed mix of steps kind with kind (analyze/classes.py): the functions significant
    as measured in the measured direction that are no change so compared (what load or mix
    alone explains is no cause), largest measured |τ| first."""
    if s.at_load is None and not s.mix_changed:
        return ()
    c = s.c
    raw = [i for i in s.tested if not c.functions[i].wait and s.th.significant(c.functions[i].q_t)
           and c.functions[i].tau_pp * measured > 0]
    return tuple(sorted((i for i in raw if i not in moved), key=lambda i: -abs(c.functions[i].tau_pp)))


def _nest(c: Analysis, causes: list[int], th: Thresholds) -> tuple[dict[int, tuple[int, ...]], list[int]]:
    """Work that runs (almost) all inside another cause's range is part of that cause: it is
    listed under its parent, not as a cause of its own.  ({parent: children}, the causes left)."""
    nested_in = _nested_causes(c, causes, th)
    children: dict[int, list[int]] = {}
    for child, parent in nested_in.items():
        children.setdefault(parent, []).append(child)
    return {k: tuple(v) for k, v in children.items()}, [i for i in causes if i not in nested_in]


def _absorb_device_wide(s: Selection, causes: list[int]) -> tuple[list[DeviceWide], list[int]]:
    """A device-wide change per call (every kernel ×1.35: a clock cut) is one finding, before
    the causes it explains; only the functions that deviate from it stay causes."""
    out = []
    for cm in s.modes:
        if not (cm.triggered and cm.basis == "per-call"):
            continue
        absorbed = [i for i in causes if _follows(s.fn(i), cm, s.th)]
        if not absorbed:
            continue
        causes = [i for i in causes if not _follows(s.fn(i), cm, s.th)]
        out.append(DeviceWide(cm, tuple(absorbed), tuple(i for i in causes if s.fn(i).device == cm.device)))
    return out, causes


def _waits(s: Selection) -> tuple[list[int], list[int]]:
    """(symptoms, idle threads' waits): the significant waits, largest |τ| first.  A thread that
    waits through every cycle (a helper's poll, a condition wait) grows with the cycle by
    itself: like a host state, not a symptom of anything.  A GPU sync is not idle: in a
    GPU-bound loop the main thread's sync fills the cycle too, and it is the symptom."""
    th = s.th
    waits = sorted((i for i in s.tested if s.fn(i).wait and th.significant(s.q_of(i))), key=lambda i: -abs(s.tau_of(i)))
    idle = [i for i in waits if s.fn(i).beta_n >= th.idle_share_pct and s.fn(i).beta_a >= th.idle_share_pct
            and not is_sync_call(s.fn(i).name) and not _share_moved(s.fn(i), th, s.direction)]
    return [i for i in waits if i not in idle], idle


# --- The rules: each states its findings from the Selection -------------------------------------


def _cycle_time(s: Selection) -> tuple[Finding, ...]:
    c = s.c
    n, a = c.normal, c.abnormal
    cis = _tail_cis(c)
    ev = CycleTimeEvidence(
        median_n_us=n.median_us, median_a_us=a.median_us,
        change_pct=100.0 * (a.median_us - n.median_us) / n.median_us if n.median_us else float("nan"),
        p_mwu=c.cycle_test.p_mwu, n_n=n.n_cycles, n_a=a.n_cycles, paired=c.matched,
        mean_n_us=n.mean_us, mean_a_us=a.mean_us, p_welch=c.cycle_test.p_welch,
        throughput_change_pct=100.0 * (n.mean_us / a.mean_us - 1.0) if a.mean_us else float("nan"),
        p95_n_us=c.quantiles_n.get("P95", float("nan")), p95_a_us=c.quantiles_a.get("P95", float("nan")),
        p99_n_us=c.quantiles_n.get("P99", float("nan")), p99_a_us=c.quantiles_a.get("P99", float("nan")),
        ks_d=c.cycle_ks, ks_p=c.cycle_ks_p, **cis)
    return (Finding(FindingCode.CYCLE_TIME, q=c.cycle_test.p_mwu, evidence=ev),)


def _load(s: Selection) -> tuple[Finding, ...]:
    ld = s.c.load
    if s.at_load is None or ld is None:
        return ()
    return (Finding(FindingCode.LOAD, q=ld.p, related=s.explained[:MAX_LISTED], evidence=LoadEvidence(
        x0_tokens=ld.x0_tokens, n_strata=ld.n_strata, cycle_n_us=ld.cycle_n_us, cycle_a_us=ld.cycle_a_us,
        change_us=ld.change_us, change_lo_us=ld.change_lo_us, change_hi_us=ld.change_hi_us,
        change_pct=ld.change_pct, p=ld.p, median_tokens_n=ld.median_tokens_n, median_tokens_a=ld.median_tokens_a,
        explained=len(s.explained))),)


def _mix_change(s: Selection) -> tuple[Finding, ...]:
    """Each step class whose share of the steps moved significantly and materially: a change of
    load, not a regression (what it alone explains is listed under the first, as for load)."""
    sc = s.c.step_classes
    if sc is None:
        return ()
    out = []
    explained = s.explained if s.at_load is None else ()
    for k, x in enumerate(sc.classes):
        if not mix_moved(x, s.th.alpha):
            continue
        present, absent = x.signature
        t = x.share_test
        out.append(Finding(FindingCode.MIX_CHANGE, q=x.q, related=() if out else explained[:MAX_LISTED],
                           evidence=MixEvidence(step_class=k, present=present, absent=absent, count_n=x.n_n,
                                                count_a=x.n_a, n_n=s.c.normal.n_cycles, n_a=s.c.abnormal.n_cycles,
                                                share_n_pct=x.share_n_pct, share_a_pct=x.share_a_pct, h=x.h,
                                                p=t.p_welch, dependence=t.dependence, n_eff_n=t.n_eff_n,
                                                n_eff_a=t.n_eff_a, explained=0 if out else len(explained))))
    return tuple(out)


def _device_wide(s: Selection) -> tuple[Finding, ...]:
    return tuple(Finding(FindingCode.DEVICE_WIDE, device=d.mode.device, related=d.deviating[:MAX_DEVIATING],
                         evidence=DeviceWideEvidence(
                             ratio=d.mode.ratio, k=d.mode.k, iqr_log=d.mode.iqr_log, absorbed=len(d.absorbed),
                             tau_pp=sum(s.fn(i).tau_pp for i in d.absorbed),
                             # the largest functions it took in, so a verdict can still name them
                             absorbed_funcs=d.absorbed[:MAX_LISTED], host=d.mode.device == HOST_DEVICE))
                 for d in s.device_wide)


def _causes(s: Selection) -> tuple[Finding, ...]:
    out = []
    for i in s.causes[:MAX_CAUSES]:
        f, kids = s.fn(i), s.children.get(i, ())
        dep = {} if f.t is None else dict(dependence=f.t.dependence, n_eff_n=f.t.n_eff_n, n_eff_a=f.t.n_eff_a)
        ev = CauseEvidence(tau_pp=f.tau_pp, t_n_us=f.t_n_us, t_a_us=f.t_a_us, incl_n_us=f.incl_n_us,
                           incl_a_us=f.incl_a_us, nested=len(kids),
                           # the nested causes' own change: part of this cause's work (pp of the abnormal cycle)
                           tau_nested_pp=float(sum(s.tau_of(j) for j in kids)), **dep)
        if s.at_load is not None:
            fl = s.at_load[i]
            ev = CauseEvidence(tau_pp=fl.tau_pp, t_n_us=fl.t_n_us, t_a_us=fl.t_a_us, incl_n_us=ev.incl_n_us,
                               incl_a_us=ev.incl_a_us, nested=ev.nested, tau_nested_pp=ev.tau_nested_pp,
                               load_adjusted=True, x0_tokens=s.c.load.x0_tokens if s.c.load else float("nan"), **dep)
        elif s.by_class is not None:
            fc = s.by_class[i]
            ev = CauseEvidence(tau_pp=fc.tau_pp, t_n_us=fc.t_n_us, t_a_us=fc.t_a_us, incl_n_us=ev.incl_n_us,
                               incl_a_us=ev.incl_a_us, nested=ev.nested, tau_nested_pp=ev.tau_nested_pp,
                               dependence=fc.dependence, n_eff_n=fc.n_eff_n, n_eff_a=fc.n_eff_a, by_class=True,
                               class_t_n_us=fc.class_t_n_us, class_t_a_us=fc.class_t_a_us)
        out.append(Finding(FindingCode.CAUSE, function=f.name, device=f.device, q=s.q_of(i), func=i,
                           related=kids[:MAX_LISTED], evidence=ev))
    return tuple(out)


def _no_cause(s: Selection) -> tuple[Finding, ...]:
    if s.causes or s.device_wide or s.swaps or s.c.replacements:
        return ()
    return (Finding(FindingCode.NO_CAUSE, evidence=NoCauseEvidence(n_tests=s.c.n_tests_t,
                                                                   negligible=len(s.negligible))),)


def _negligible(s: Selection) -> tuple[Finding, ...]:
    if not s.negligible:
        return ()
    return (Finding(FindingCode.NEGLIGIBLE, related=s.negligible[:MAX_LISTED],
                    evidence=NegligibleEvidence(count=len(s.negligible))),)


def _proportional(s: Selection) -> tuple[Finding, ...]:
    # All of them: the tables flag each; the wording names the first few.
    return (Finding(FindingCode.PROPORTIONAL, related=s.proportional),) if s.proportional else ()


def _common_mode(s: Selection) -> tuple[Finding, ...]:
    out = []
    for cm in s.modes:
        if not cm.triggered or cm.basis != "share":
            continue
        on_device = [i for i in s.tested if s.fn(i).device == cm.device and s.fn(i).kind in GPU_KINDS]
        movers = sorted((i for i in on_device if s.th.significant(s.fn(i).q_t) and s.fn(i).tau_pp * s.direction > 0),
                        key=lambda i: -abs(s.fn(i).tau_pp))
        same_time = [i for i in on_device if not s.th.significant(s.fn(i).q_t)]
        out.append(Finding(FindingCode.COMMON_MODE, device=cm.device, related=tuple(movers[:MAX_DEVIATING]),
                           evidence=CommonModeEvidence(ratio=cm.ratio, k=cm.k, iqr_log=cm.iqr_log,
                                                       same_time=len(same_time))))
    return tuple(out)


def _symptoms(s: Selection) -> tuple[Finding, ...]:
    return tuple(Finding(FindingCode.SYMPTOM, function=s.fn(i).name, device=s.fn(i).device, q=s.q_of(i), func=i,
                         evidence=SymptomEvidence(tau_pp=s.fn(i).tau_pp, t_n_us=s.fn(i).t_n_us, t_a_us=s.fn(i).t_a_us,
                                                  direction=Direction.FASTER if s.direction < 0 else Direction.SLOWER))
                 for i in s.waits[:MAX_SYMPTOMS])


def _resources(s: Selection) -> tuple[Finding, ...]:
    c = s.c
    res = sorted((i for i, r in enumerate(c.context) if s.th.significant(r.q)),
                 key=lambda i: -abs(c.context[i].z_log) if math.isfinite(c.context[i].z_log) else 0.0)
    return tuple(Finding(FindingCode.RESOURCE, device=c.context[i].device, q=c.context[i].q, ref=i,
                         evidence=MetricEvidence(metric=c.context[i].metric, unit=c.context[i].unit,
                                                 mean_n=c.context[i].res.mean_n, mean_a=c.context[i].res.mean_a))
                 for i in res[:MAX_RESOURCES])


def _metric_while(s: Selection) -> tuple[Finding, ...]:
    c = s.c
    top_causes = {(s.fn(i).name, s.fn(i).device) for i in s.causes[:MAX_CAUSES]}
    mus = [j for j, m in enumerate(c.mu)
           if s.th.significant(m.q) and (s.fn(m.func).name, s.fn(m.func).device) in top_causes]
    out = []
    for j in mus[:MAX_RESOURCES]:
        m = c.mu[j]
        f = s.fn(m.func)
        out.append(Finding(FindingCode.METRIC_WHILE, function=f.name, device=f.device, q=m.q, func=m.func, ref=j,
                           evidence=MetricEvidence(metric=m.metric, unit=m.unit, mean_n=m.res.mean_n,
                                                   mean_a=m.res.mean_a)))
    return tuple(out)


def _events(s: Selection) -> tuple[Finding, ...]:
    """Timed events of the abnormal run that the normal run did not have (by kind and device)."""
    c = s.c
    seen_n = {(e.get("event"), e.get("device"), e.get("pid")) for e in c.events_n}
    out: list[Finding] = []
    for e in c.events_a:
        kind = str(e.get("event"))
        if kind not in EVENT_KINDS or (kind, e.get("device"), e.get("pid")) in seen_n:
            continue
        out.append(Finding(FindingCode.EVENT, device=str(e.get("device")), evidence=_event_evidence(kind, e)))
    return tuple(out[:MAX_RESOURCES])


def _event_evidence(kind: str, e: Mapping[str, object]) -> EventEvidence:
    pid, used, xid = e.get("pid"), e.get("used_gpu_memory_bytes"), e.get("xid")
    return EventEvidence(event=kind, device=str(e.get("device", "?")), t_s=float(e["t_s"]),  # type: ignore[arg-type]
                         pid=pid if isinstance(pid, int) else None, name=str(e.get("name") or ""),
                         used_gpu_memory_bytes=float(used) if isinstance(used, (int, float)) else float("nan"),
                         xid=None if xid is None else str(xid))


def _kernel_swap(s: Selection) -> tuple[Finding, ...]:
    return tuple(Finding(FindingCode.KERNEL_SWAP, device=s.fn(grew[0]).device, related=grew + fell,
                         evidence=KernelSwapEvidence(grew=len(grew), net_pp=net,
                                                     tau_pp=tuple(s.tau_of(i) for i in grew + fell)))
                 for grew, fell, net in s.swaps)


def _opposite(s: Selection) -> tuple[Finding, ...]:
    opposite = sorted((i for i in s.tested if not s.fn(i).wait and s.th.significant(s.q_of(i))
                       and s.tau_of(i) * s.direction < 0 and i not in s.swapped), key=lambda i: -abs(s.tau_of(i)))
    if not opposite:
        return ()
    shown = tuple(opposite[:MAX_DEVIATING])
    return (Finding(FindingCode.OPPOSITE, related=shown, evidence=OppositeEvidence(
        tau_pp=tuple(s.tau_of(i) for i in shown) if s.like_for_like else ())),)


def _cycles_needed(s: Selection) -> tuple[Finding, ...]:
    c = s.c
    if c.cycles_needed is None:
        return ()
    return (Finding(FindingCode.CYCLES_NEEDED, evidence=CyclesNeededEvidence(
        n_n=c.normal.n_cycles, n_a=c.abnormal.n_cycles, min_p=c.min_p, n_tests=c.n_tests_t,
        cycles_needed=c.cycles_needed)),)


@dataclass(frozen=True)
class FindingRule:
    """One rule: the code it states and how it selects its findings from the Selection (none,
    one, or one per device, cause, metric …)."""

    code: FindingCode
    select: Callable[[Selection], tuple[Finding, ...]]


# The findings' order is this table's: the cycle time, what explains it (load, device-wide
# changes, causes, or why there is none), what grew with it, then symptoms, resources, events
# and what moved against it.  docs/STATISTICS.md, "Findings".
RULES: tuple[FindingRule, ...] = (
    FindingRule(FindingCode.CYCLE_TIME, _cycle_time),
    FindingRule(FindingCode.LOAD, _load),
    FindingRule(FindingCode.MIX_CHANGE, _mix_change),
    FindingRule(FindingCode.DEVICE_WIDE, _device_wide),
    FindingRule(FindingCode.REPLACED, lambda s: replaced_findings(s.c)),
    FindingRule(FindingCode.CAUSE, _causes),
    FindingRule(FindingCode.NO_CAUSE, _no_cause),
    FindingRule(FindingCode.NEGLIGIBLE, _negligible),
    FindingRule(FindingCode.PROPORTIONAL, _proportional),
    FindingRule(FindingCode.COMMON_MODE, _common_mode),
    FindingRule(FindingCode.SYMPTOM, _symptoms),
    FindingRule(FindingCode.RESOURCE, _resources),
    FindingRule(FindingCode.METRIC_WHILE, _metric_while),
    FindingRule(FindingCode.EVENT, _events),
    FindingRule(FindingCode.KERNEL_SWAP, _kernel_swap),
    FindingRule(FindingCode.OPPOSITE, _opposite),
    FindingRule(FindingCode.CYCLES_NEEDED, _cycles_needed),
)


def build_findings(c: Analysis, *, identical: bool = False) -> list[Finding]:
    """The ordered Key Findings of a comparison (RULES, in order; for a pair compared by totals
    perfdiff.analyze.totals.TOTALS_RULES); for `identical` inputs, that one fact."""
    if identical:
        return [Finding(FindingCode.IDENTICAL)]
    if c.plan is not None and c.plan.regime is Regime.TOTALS:
        t = select_totals(c)
        return [x for rule in TOTALS_RULES for x in rule.select(t)]
    s = select(c)
    return [x for rule in RULES for x in rule.select(s)]


# --- Helpers ------------------------------------------------------------------------------------


def more_calls(f: FunctionStats, th: Thresholds = DEFAULT) -> bool:
    """New in the abnormal run, or at least th.more_calls_ratio (25 %) more calls per cycle."""
    if f.presence == "new":
        return True
    return not f.sampled and f.calls_n > 0 and f.calls_a >= th.more_calls_ratio * f.calls_n


def _fewer_calls(f: FunctionStats, th: Thresholds) -> bool:
    return f.presence == "vanished" or (not f.sampled and f.calls_a > 0
                                        and f.calls_n >= th.more_calls_ratio * f.calls_a)


def _kernel_swaps(s: Selection, causes: list[int], significant_fs: list[int]) -> list[Swap]:
    """Per device, the kernel causes whose calls moved with their time (more calls and longer,
    or fewer and shorter), and the significant kernels whose calls and time moved the other
    way: a library that chose other kernels for the same work (cuDNN's algorithm, a GEMM
    tile), not added or removed work: the other side takes back at least th.swap_offset of the
    causes' τ, and the net is not material.  (gained, lost, net τ in pp) each."""
    out = []
    th, tau_of = s.th, s.tau_of
    cause_set = set(causes)
    for device in dict.fromkeys(s.fn(i).device for i in causes if s.fn(i).kind == Kind.KERNEL):
        on = [i for i in significant_fs if s.fn(i).kind == Kind.KERNEL and s.fn(i).device == device]
        gained = [i for i in on if more_calls(s.fn(i), th) and tau_of(i) > 0]
        lost = [i for i in on if _fewer_calls(s.fn(i), th) and tau_of(i) < 0]
        # The causes' side counts its causes only (what the verdict would name); the other, all.
        causes_gained = any(i in cause_set for i in gained)
        if causes_gained:
            gained = [i for i in gained if i in cause_set]
        elif any(i in cause_set for i in lost):
            lost = [i for i in lost if i in cause_set]
        else:
            continue
        up, down = sum(tau_of(i) for i in gained), -sum(tau_of(i) for i in lost)
        ours, theirs = (up, down) if causes_gained else (down, up)
        if gained and lost and theirs >= th.swap_offset * ours and abs(up - down) < th.material_tau_pp:
            out.append((tuple(sorted(gained, key=lambda i: -abs(tau_of(i)))),
                        tuple(sorted(lost, key=lambda i: -abs(tau_of(i)))), up - down))
    return out


def _at_common_load(c: Analysis) -> dict[int, FunctionLoad] | None:
    """The tested functions' comparisons at a common load, by function index, when the runs
    carried materially different load and that comparison could be made; else None."""
    if c.load is None or not (c.load.differs and c.load.adjusted):
        return None
    return {fl.func: fl for fl in c.load.functions}


def _by_class(c: Analysis) -> dict[int, FunctionByClass] | None:
    """The tested functions compared kind with kind, by function index, where the cycles form
    step classes and the runs are not compared at a common load; else None."""
    if c.step_classes is None or _at_common_load(c) is not None:
        return None
    return {fc.func: fc for fc in c.step_classes.functions}


def _tail_cis(c: Analysis) -> dict[str, float]:
    """95 % distribution-free CIs of both runs' P95 and P99 cycle times (µs), by evidence field."""
    out = {}
    for q, name in ((0.95, "p95"), (0.99, "p99")):
        for side, run in (("n", c.normal), ("a", c.abnormal)):
            lo, hi = stats.quantile_ci(run.dur_us, q)
            out[f"{name}_{side}_lo_us"], out[f"{name}_{side}_hi_us"] = lo, hi
    return out


def _follows(f: FunctionStats, cm: CommonMode, th: Thresholds) -> bool:
    """f is on cm's device and its per-call ratio lies within the band around cm's median."""
    band = max(th.device_wide_band, cm.iqr_log)
    return (f.device == cm.device and f.per_call_n_us > 0 and f.per_call_a_us > 0
            and abs(math.log(f.per_call_a_us / f.per_call_n_us) - cm.median_log) <= band)


def material(f: FunctionStats, th: Thresholds = DEFAULT) -> bool:
    """A change large enough to be a cause: |τ| ≥ 1 pp and |δ(t)| ≥ 0.147 (δ unknown: τ alone)."""
    return th.material(f.tau_pp, f.t.cliffs_delta if f.t is not None else float("nan"))


def _nested_causes(c: Analysis, causes: list[int], th: Thresholds) -> dict[int, int]:
    """{child: parent} among the causes (ordered by |τ|): a CPU-side cause whose own time in
    the abnormal run lies ≥ 90 % inside another cause's range goes under the outermost such
    parent that is itself not nested."""
    cause_set = set(causes)
    parent_of: dict[int, int] = {}
    for f in causes:
        if c.functions[f].kind != Kind.CPU:
            continue
        parents = [(share, a) for a, share in c.inside.get(f, {}).items()
                   if a in cause_set and a != f and share >= th.nested_min_share]
        if parents:
            parent_of[f] = max(parents)[1]
    out = {}
    for f, a in parent_of.items():
        seen = {f}
        while a in parent_of and a not in seen:  # climb to a parent that is a cause of its own
            seen.add(a)
            a = parent_of[a]
        if a not in seen:
            out[f] = a
    return out


def _faster(c: Analysis, d_med: float, d_mean: float) -> bool:
    """Whether the change to explain is a speed-up: the mean cycle got faster, a test says so
    (Welch's on the means, or the rank test with the median faster too), and the rank test
    does not say the median got slower.  Otherwise the change explained is a slowdown: a
    mean slowed by a few stalls (which Welch's test may miss) is throughput lost; a median
    slower while a different mix of cycles (fewer long prefill steps) made the mean faster is
    every step slower; and where neither test rejects, what slowed is still worth naming."""
    t, th = c.cycle_test, c.thresholds
    return (d_mean < 0 and (th.significant(t.p_welch) or (d_med < 0 and th.significant(t.p_mwu)))
            and not (d_med > 0 and th.significant(t.p_mwu)))


def _share_moved(f: FunctionStats, th: Thresholds, direction: float) -> bool:
    """A host state's share of the cycle moved significantly, by ≥ 10 % of its normal share."""
    return th.significant(f.q_beta) and host_share_moved(f.d_beta, f.beta_n, direction, th)


def host_share_moved(d_beta: float, beta_n: float, direction: float, th: Thresholds, tiny: float = 1e-9) -> bool:
    """A host state's share of the cycle moved in `direction` by at least th.host_share_min_rel of
    its normal share, at least `tiny` (the one rule for a pair and across ranks; significance is
    the caller's)."""
    return d_beta * direction > 0 and abs(d_beta) >= th.host_share_min_rel * max(beta_n, tiny)
