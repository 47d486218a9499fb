"""Key Findings as records: causes first, then the symptoms and resources that explain them.

Each finding has a stable code, the function or device it names, its q, and the numbers it
rests on; perfdiff.render words it.  "Significant" means q ≤ α (docs/STATISTICS.md).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from perfdiff import stats
from perfdiff.analyze.records import Analysis, CommonMode, FunctionLoad, FunctionStats
from perfdiff.analyze.thresholds import DEFAULT, Thresholds
from perfdiff.model.cuda_names import is_sync_call
from perfdiff.model.schema import GPU_KINDS, CycleSource, Kind

MAX_CAUSES = 5
MAX_SYMPTOMS = 3
MAX_RESOURCES = 5
MAX_LISTED = 4  # functions named in a proportional / opposite / common-mode finding
EVENT_KINDS = ("gpu-lost", "xid", "ecc", "other-process", "target-exited")


class FindingCode(str, Enum):
    """What a finding says; stable across releases."""

    CYCLE_TIME = "cycle-time"  # the median cycle time moved (always first)
    CAUSE = "cause"  # a function's own time moved with the cycle time, significantly
    NO_CAUSE = "no-cause"  # no function's own time did
    PROPORTIONAL = "proportional"  # host states and idle threads' waits that grew with the cycle, keeping their share
    COMMON_MODE = "common-mode"  # every kernel on a device scaled together
    SYMPTOM = "symptom"  # a wait changed significantly
    RESOURCE = "resource"  # a context metric changed significantly
    METRIC_WHILE = "metric-while"  # a metric changed while a cause ran
    EVENT = "event"  # a timed event in the abnormal run only
    OPPOSITE = "opposite"  # functions that moved against the cycle-time change
    CYCLES_NEEDED = "cycles-needed"  # too few cycles for any q to reach α
    IDENTICAL = "identical"  # the two inputs hold the same bytes: nothing to find
    NEGLIGIBLE = "negligible"  # significant changes too small to be a cause
    DEVICE_WIDE = "device-wide"  # every busy function of a device changed per call by one ratio
    LOAD = "load"  # the runs carried different load: the cycle time compared at a common load
    KERNEL_SWAP = "kernel-swap"  # kernels with more calls replaced others on a device, net change small

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One finding.  `func` indexes Analysis.functions, `related` lists more function indexes,
    `ref` indexes Analysis.context (RESOURCE) or Analysis.mu (METRIC_WHILE); `values` holds the
    numbers the finding rests on, units in their names."""

    code: FindingCode
    function: str | None = None
    device: str | None = None
    q: float = float("nan")
    func: int | None = None
    related: tuple[int, ...] = ()
    ref: int | None = None
    values: dict[str, Any] = field(default_factory=dict)


def build_findings(c: Analysis, *, identical: bool = False) -> list[Finding]:
    """The ordered Key Findings of a comparison; for `identical` inputs, that one fact."""
    if identical:
        return [Finding(FindingCode.IDENTICAL)]
    th = c.thresholds
    idx = {id(f): i for i, f in enumerate(c.functions)}
    d_med = c.abnormal.median_us - c.normal.median_us
    # The direction of the change is the mean cycle's (throughput, what users feel): a quarter
    # of the cycles stalling leaves the median where it was and still costs throughput.
    d_mean = c.abnormal.mean_us - c.normal.mean_us
    # Fixed windows last alike by construction (a last, partial one aside): what grew per window
    # of wall clock is what the abnormal run spent more time on.
    windows = c.plan is not None and c.plan.source == CycleSource.WINDOW
    direction = -1.0 if not windows and _faster(c, d_med, d_mean) else 1.0
    out = [Finding(FindingCode.CYCLE_TIME, q=c.cycle_test.p_mwu, values={
        "median_n_us": c.normal.median_us, "median_a_us": c.abnormal.median_us,
        "change_pct": 100.0 * d_med / c.normal.median_us if c.normal.median_us else float("nan"),
        "p_mwu": c.cycle_test.p_mwu, "n_n": c.normal.n_cycles, "n_a": c.abnormal.n_cycles,
        "paired": c.matched, "mean_n_us": c.normal.mean_us, "mean_a_us": c.abnormal.mean_us,
        "p_welch": c.cycle_test.p_welch,
        "throughput_change_pct": (100.0 * (c.normal.mean_us / c.abnormal.mean_us - 1.0)
                                  if c.abnormal.mean_us else float("nan")),
        "p95_n_us": c.quantiles_n.get("P95", float("nan")), "p95_a_us": c.quantiles_a.get("P95", float("nan")),
        "p99_n_us": c.quantiles_n.get("P99", float("nan")), "p99_a_us": c.quantiles_a.get("P99", float("nan")),
        "ks_d": c.cycle_ks, "ks_p": c.cycle_ks_p,
        **_tail_cis(c)})]

    tested = [f for f in c.functions if f.tested]
    # Under different load, own times are compared at a common load (analyze/load.py): what
    # load alone explains is no cause.
    at_load = _at_common_load(c)
    if at_load is not None:
        assert c.load is not None
        raw_moved = [f for f in tested if not f.wait and th.significant(f.q_t) and f.tau_pp * direction > 0]
        direction = 1.0 if c.load.change_us >= 0 else -1.0

    def q_of(f: FunctionStats) -> float:
        return at_load[idx[id(f)]].q if at_load is not None else f.q_t

    def tau_of(f: FunctionStats) -> float:
        return at_load[idx[id(f)]].tau_pp if at_load is not None else f.tau_pp

    def is_material(f: FunctionStats) -> bool:
        return abs(tau_of(f)) >= th.material_tau_pp if at_load is not None else material(f, th)

    moved = [f for f in tested if not f.wait and th.significant(q_of(f)) and tau_of(f) * direction > 0]
    # A host state summed over threads (oncpu, blocked …) grows with the cycle by itself; it is
    # a cause only when its share of the cycle moved too.
    # Significant is not enough: a cause must also be material (docs/STATISTICS.md).
    negligible = [f for f in moved if not is_material(f)]
    moved = [f for f in moved if is_material(f)]
    if at_load is not None:
        assert c.load is not None
        explained = [f for f in raw_moved if f not in moved and f not in negligible]
        explained.sort(key=lambda f: -abs(f.tau_pp))
        out.append(Finding(FindingCode.LOAD, q=c.load.p, related=tuple(idx[id(f)] for f in explained[:MAX_LISTED]),
                           values={"x0_tokens": c.load.x0_tokens, "n_strata": c.load.n_strata,
                                   "cycle_n_us": c.load.cycle_n_us,
                                   "cycle_a_us": c.load.cycle_a_us, "change_us": c.load.change_us,
                                   "change_lo_us": c.load.change_lo_us, "change_hi_us": c.load.change_hi_us,
                                   "change_pct": c.load.change_pct, "p": c.load.p,
                                   "median_tokens_n": c.load.median_tokens_n,
                                   "median_tokens_a": c.load.median_tokens_a, "explained": len(explained)}))
    causes = [f for f in moved if f.kind != Kind.HOST or _share_moved(f, th, direction)]
    proportional = [f for f in moved if f not in causes]
    causes.sort(key=lambda f: -abs(tau_of(f)))
    # Work that runs (almost) all inside another cause's range is part of that cause: it is
    # listed under its parent, not as a cause of its own.
    nested_in = _nested_causes(c, [idx[id(f)] for f in causes], th)
    children: dict[int, list[int]] = {}
    for child, parent in nested_in.items():
        children.setdefault(parent, []).append(child)
    causes = [f for f in causes if idx[id(f)] not in nested_in]
    swaps = _kernel_swaps(causes, [f for f in tested if th.significant(q_of(f))], tau_of, th)
    swapped = {id(f) for gained, lost, _ in swaps for f in gained + lost}  # said in the swap alone
    causes = [f for f in causes if id(f) not in swapped]
    # A device-wide change per call (every kernel ×1.35: a clock cut) is one finding, before
    # the causes it explains; only the functions that deviate from it stay causes.
    # Per-call times and shares move with the load: under different load the device-wide
    # checks compare nothing like for like.
    modes = c.common_modes if at_load is None else ()
    for cm in modes:
        if not (cm.triggered and cm.basis == "per-call"):
            continue
        absorbed = [f for f in causes if _follows(f, cm, th)]
        if not absorbed:
            continue
        causes = [f for f in causes if not _follows(f, cm, th)]
        deviating = [f for f in causes if f.device == cm.device]
        out.append(Finding(FindingCode.DEVICE_WIDE, device=cm.device,
                           related=tuple(idx[id(f)] for f in deviating[:3]),
                           values={"ratio": cm.ratio, "k": cm.k, "iqr_log": cm.iqr_log, "absorbed": len(absorbed),
                                   "tau_pp": sum(f.tau_pp for f in absorbed),
                                   # the largest functions it took in (indices into the analysis'
                                   # functions), so a verdict can still name them
                                   "absorbed_funcs": tuple(idx[id(f)] for f in absorbed[:MAX_LISTED]),
                                   "host": cm.device == "Host"}))
    device_wide = any(x.code == FindingCode.DEVICE_WIDE for x in out)
    for f in causes[:MAX_CAUSES]:
        i = idx[id(f)]
        values = {"tau_pp": f.tau_pp, "t_n_us": f.t_n_us, "t_a_us": f.t_a_us, "incl_n_us": f.incl_n_us,
                  "incl_a_us": f.incl_a_us, "nested": len(children.get(i, ())),
                  # the nested causes' own change: part of this cause's work (pp of the abnormal cycle)
                  "tau_nested_pp": float(sum(tau_of(c.functions[j]) for j in children.get(i, ())))}
        if at_load is not None:
            fl = at_load[i]
            values.update({"tau_pp": fl.tau_pp, "t_n_us": fl.t_n_us, "t_a_us": fl.t_a_us, "load_adjusted": True,
                           "x0_tokens": c.load.x0_tokens if c.load else float("nan")})
        out.append(Finding(FindingCode.CAUSE, function=f.name, device=f.device, q=q_of(f), func=i,
                           related=tuple(children.get(i, ())[:MAX_LISTED]), values=values))
    if not causes and not device_wide and not swaps:
        out.append(Finding(FindingCode.NO_CAUSE, values={"n_tests": c.n_tests_t, "negligible": len(negligible)}))
    if negligible:
        negligible.sort(key=lambda f: -abs(f.tau_pp))
        out.append(Finding(FindingCode.NEGLIGIBLE, related=tuple(idx[id(f)] for f in negligible[:MAX_LISTED]),
                           values={"count": len(negligible), "tau_min_pp": th.material_tau_pp,
                                   "delta_min": th.material_delta}))
    waits = sorted((f for f in tested if f.wait and th.significant(q_of(f))), key=lambda f: -abs(tau_of(f)))
    # A thread that waits through every cycle (a helper's poll, a condition wait) grows with
    # the cycle by itself: like a host state, not a symptom of anything.  A GPU sync is not
    # idle: in a GPU-bound loop the main thread's sync fills the cycle too, and it is the symptom.
    idle = [f for f in waits if f.beta_n >= th.idle_share_pct and f.beta_a >= th.idle_share_pct
            and not is_sync_call(f.name) and not _share_moved(f, th, direction)]
    waits = [f for f in waits if f not in idle]
    proportional += idle
    if proportional:  # all of them: the tables flag each; the wording names the first few
        out.append(Finding(FindingCode.PROPORTIONAL, related=tuple(idx[id(f)] for f in proportional)))

    for cm in modes:
        if not cm.triggered or cm.basis != "share":
            continue
        on_device = [f for f in tested if f.device == cm.device and f.kind in GPU_KINDS]
        movers = sorted((f for f in on_device if th.significant(f.q_t) and f.tau_pp * direction > 0),
                        key=lambda f: -abs(f.tau_pp))
        same_time = [f for f in on_device if not th.significant(f.q_t)]
        out.append(Finding(FindingCode.COMMON_MODE, device=cm.device, related=tuple(idx[id(f)] for f in movers[:3]),
                           values={"ratio": cm.ratio, "k": cm.k, "iqr_log": cm.iqr_log,
                                   "same_time": len(same_time)}))

    for f in waits[:MAX_SYMPTOMS]:
        out.append(Finding(FindingCode.SYMPTOM, function=f.name, device=f.device, q=q_of(f), func=idx[id(f)],
                           values={"tau_pp": f.tau_pp, "t_n_us": f.t_n_us, "t_a_us": f.t_a_us}))

    res = sorted((i for i, r in enumerate(c.context) if th.significant(r.q)),
                 key=lambda i: -abs(c.context[i].z_log) if math.isfinite(c.context[i].z_log) else 0.0)
    for i in res[:MAX_RESOURCES]:
        r = c.context[i]
        out.append(Finding(FindingCode.RESOURCE, device=r.device, q=r.q, ref=i,
                           values={"metric": r.metric, "mean_n": r.res.mean_n, "mean_a": r.res.mean_a}))
    top_causes = {(f.name, f.device) for f in causes[:MAX_CAUSES]}
    mus = [j for j, m in enumerate(c.mu)
           if th.significant(m.q) and (c.functions[m.func].name, c.functions[m.func].device) in top_causes]
    for j in mus[:MAX_RESOURCES]:
        m = c.mu[j]
        f = c.functions[m.func]
        out.append(Finding(FindingCode.METRIC_WHILE, function=f.name, device=f.device, q=m.q, func=m.func, ref=j,
                           values={"metric": m.metric, "mean_n": m.res.mean_n, "mean_a": m.res.mean_a}))

    out.extend(_event_findings(c))

    for grew, fell, net in swaps:
        out.append(Finding(FindingCode.KERNEL_SWAP, device=grew[0].device,
                           related=tuple(idx[id(f)] for f in grew + fell),
                           values={"grew": len(grew), "net_pp": net,
                                   "tau_pp": [tau_of(f) for f in grew + fell]}))
    opposite = sorted((f for f in tested if not f.wait and th.significant(q_of(f)) and tau_of(f) * direction < 0
                       and id(f) not in swapped), key=lambda f: -abs(tau_of(f)))
    if opposite:
        out.append(Finding(FindingCode.OPPOSITE, related=tuple(idx[id(f)] for f in opposite[:3]),
                           values={"tau_pp": [tau_of(f) for f in opposite[:3]]} if at_load is not None else {}))
    if c.cycles_needed is not None:
        out.append(Finding(FindingCode.CYCLES_NEEDED, values={
            "n_n": c.normal.n_cycles, "n_a": c.abnormal.n_cycles, "min_p": c.min_p, "n_tests": c.n_tests_t,
            "cycles_needed": c.cycles_needed}))
    return out


def more_calls(f: FunctionStats, th: Thresholds = DEFAULT) -> bool:
    """New in the abnormal run, or at least th.more_calls_ratio (25 %) more calls per cycle."""
    if f.presence == "new":
        return True
    return not f.sampled and f.calls_n > 0 and f.calls_a >= th.more_calls_ratio * f.calls_n


def _fewer_calls(f: FunctionStats, th: Thresholds) -> bool:
    return f.presence == "vanished" or (not f.sampled and f.calls_a > 0
                                        and f.calls_n >= th.more_calls_ratio * f.calls_a)


Swap = tuple[list[FunctionStats], list[FunctionStats], float]  # (gained, lost, net τ in pp)


def _kernel_swaps(causes: list[FunctionStats], significant_fs: list[FunctionStats],
                  tau_of: Callable[[FunctionStats], float], th: Thresholds) -> list[Swap]:
    """Per device, the kernel causes whose calls moved with their time (more calls and longer,
    or fewer and shorter), and the significant kernels whose calls and time moved the other
    way: a library that chose other kernels for the same work (cuDNN's algorithm, a GEMM
    tile), not added or removed work: the other side takes back at least th.swap_offset of the
    causes' τ, and the net is not material.  (gained, lost, net τ in pp) each."""
    out = []
    cause_ids = {id(f) for f in causes}
    for device in dict.fromkeys(f.device for f in causes if f.kind == Kind.KERNEL):
        on = [f for f in significant_fs if f.kind == Kind.KERNEL and f.device == device]
        gained = [f for f in on if more_calls(f, th) and tau_of(f) > 0]
        lost = [f for f in on if _fewer_calls(f, th) and tau_of(f) < 0]
        # The causes' side counts its causes only (what the verdict would name); the other, all.
        causes_gained = any(id(f) in cause_ids for f in gained)
        if causes_gained:
            gained = [f for f in gained if id(f) in cause_ids]
        elif any(id(f) in cause_ids for f in lost):
            lost = [f for f in lost if id(f) in cause_ids]
        else:
            continue
        up, down = sum(tau_of(f) for f in gained), -sum(tau_of(f) for f in lost)
        ours, theirs = (up, down) if causes_gained else (down, up)
        if gained and lost and theirs >= th.swap_offset * ours and abs(up - down) < th.material_tau_pp:
            out.append((sorted(gained, key=lambda f: -abs(tau_of(f))), sorted(lost, key=lambda f: -abs(tau_of(f))),
                        up - down))
    return out


def _at_common_load(c: Analysis) -> dict[int, FunctionLoad] | None:
    """The tested functions' comparisons at a common load, by function index, when the runs
    carried materially different load and that comparison could be made; else None."""
    if c.load is None or not (c.load.differs and c.load.adjusted):
        return None
    return {fl.func: fl for fl in c.load.functions}


def _tail_cis(c: Analysis) -> dict[str, float]:
    """95 % distribution-free CIs of both runs' P95 and P99 cycle times (µs)."""
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


def _event_findings(c: Analysis) -> list[Finding]:
    """Timed events of the abnormal run that the normal run did not have (by kind and device)."""
    seen_n = {(e.get("event"), e.get("device"), e.get("pid")) for e in c.events_n}
    out: list[Finding] = []
    for e in c.events_a:
        kind = str(e.get("event"))
        if kind not in EVENT_KINDS or (kind, e.get("device"), e.get("pid")) in seen_n:
            continue
        out.append(Finding(FindingCode.EVENT, device=str(e.get("device")), values=dict(e)))
    return out[:MAX_RESOURCES]


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
