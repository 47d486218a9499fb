"""Compare two runs: per-(function, metric, device) statistics and checks, as records.

Input: two RunData, their Cycles and their per-(function, cycle) matrices.  Output: an
`Analysis` (perfdiff.analyze.records), no display strings.  Definitions are in
docs/STATISTICS.md.  Independent tests are handed to a perfdiff.parallel.Parallel, which
runs them here or in forked workers with the same results.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfdiff import stats
from perfdiff.analyze.align import align
from perfdiff.analyze.busy import gpu_busy_shares
from perfdiff.analyze.categories import category_table
from perfdiff.analyze.devices import device_totals
from perfdiff.analyze.classes import step_classes
from perfdiff.analyze.checks import common_modes, comparability, cycle_ratio_notice
from perfdiff.analyze.load import compare_load, cycle_load, is_step_metric, load_notice
from perfdiff.analyze.metrics import MuJob, aliases_and_constants, mu_jobs, z_log
from perfdiff.analyze.evidence import MetricOneSideDetail
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.analyze.launchers import replacements
from perfdiff.analyze.order import TRACE_PANELS, detail_key
from perfdiff.analyze.records import (Analysis, ContextStats, CycleBase, CycleLoad, DetailRow, FunctionStats, MuStats,
                                      Notice, NoticeCode, PerCallTest, Replacement, RunSummary, StepClasses, Trace)
from perfdiff.launches import LaunchChains, launch_chains
from perfdiff.attribute import (CallDurations, CycleMatrix, DeviceRows, SeriesInfo, attribute_activity, call_durations,
                                device_rows, mu_matrix, sample_series)
from perfdiff.bundle import RunData
from perfdiff.model.cycles import CyclePlan, Regime
from perfdiff.model.schema import GPU_KINDS, CycleSource
from perfdiff.model.waits import is_wait
from perfdiff.nesting import Nesting
from perfdiff.parallel import Parallel
from perfdiff.registry import metric_unit
from perfdiff.model.cycles import Cycles

NS_PER_US = 1e3


def summarize_run(run: RunData, cycles: Cycles) -> RunSummary:
    dur = cycles.dur_ns.astype(np.float64) / NS_PER_US
    return RunSummary(
        name=run.name, path=run.path, n_cycles=cycles.n, cycle_source=cycles.source.value,
        cycle_detail=cycles.detail, dropped_cycles=cycles.dropped,
        mean_us=float(dur.mean()), median_us=float(np.median(dur)),
        p95_us=float(np.quantile(dur, 0.95)),
        traced_s=float((cycles.end_ns[-1] - cycles.start_ns[0]) / 1e9),
        status=str(run.manifest.get("status", "unknown")), dur_us=dur, notes=tuple(run.notes),
        window_reason=cycles.window_reason, passed_over=cycles.passed_over)


def _row(m: np.ndarray, i: int, K: int) -> np.ndarray:
    """Row i of matrix m as float64 (a view when it is float64 already), zeros when i is -1
    (function absent in that run)."""
    return np.asarray(m[i], dtype=np.float64) if i >= 0 else np.zeros(K)


def _row_sums(m: np.ndarray, i: int, inv_dur: np.ndarray) -> tuple[float, float, int]:
    """Row i of own-time matrix m (ns per cycle): (Σ ns, Σ ns / cycle duration, cycles with
    time), zeros when i is -1 (function absent in that run)."""
    if i < 0:
        return 0.0, 0.0, 0
    row = np.asarray(m[i], dtype=np.float64)
    return float(row.sum()), float(row @ inv_dur), int(np.count_nonzero(row > 0))


def _total(v: np.ndarray, i: int) -> float:
    """Entry i of a per-function total, 0 when i is -1 (function absent in that run)."""
    return float(v[i]) if i >= 0 else 0.0


@dataclass(frozen=True)
class _Pair:
    """Both runs aligned for the tests: their per-(function, cycle) matrices, the aligned
    functions' (name, device, kind) keys and their row in each run (−1: absent there), the
    cycle durations (ns), whether cycle i of both runs does the same work, the thresholds."""

    mn: CycleMatrix
    ma: CycleMatrix
    keys: list[tuple[str, str, str]]
    idx_n: np.ndarray
    idx_a: np.ndarray
    dur_n: np.ndarray
    dur_a: np.ndarray
    matched: bool
    match_rho: float  # Spearman ρ of the two runs' cycle durations, cycle by cycle
    renames: tuple[tuple[str, str], ...]  # (normal name, abnormal name) matched as one function
    th: Thresholds

    @property
    def kn(self) -> int:
        return len(self.dur_n)

    @property
    def ka(self) -> int:
        return len(self.dur_a)


def _function_tests(p: _Pair, f: int) -> tuple[stats.TwoSample, stats.TwoSample]:
    """(own time per cycle, share of the cycle) tests of aligned function `f` (Parallel's
    fn(shared, item)): paired over matched cycles, else independent."""
    tn = _row(p.mn.own_ns, p.idx_n[f], p.kn) / NS_PER_US
    ta = _row(p.ma.own_ns, p.idx_a[f], p.ka) / NS_PER_US
    test = stats.compare_paired if p.matched else stats.compare_samples
    th = p.th
    # A run's cycles are a series in time order: the tests hold under its dependence.
    return (test(ta, tn, floor=th.t_floor_us, alpha=th.alpha, time_ordered=True),
            test(100.0 * ta * NS_PER_US / p.dur_a, 100.0 * tn * NS_PER_US / p.dur_n, floor=th.beta_floor_pp,
                 alpha=th.alpha, time_ordered=True))


def _mu_test(alpha: float, job: MuJob) -> tuple[stats.TwoSample, float]:
    """One μ test (Parallel.map's fn(shared, item): the shared value is α)."""
    return (stats.compare_samples(job.a, job.n, floor=job.floor, alpha=alpha, time_ordered=True),
            z_log(job.a, job.n, job.floor))


def compare_runs(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles, *,
                 alpha: float = 0.05, matrices: tuple[CycleMatrix, CycleMatrix] | None = None,
                 parallel: Parallel | None = None, plan: CyclePlan | None = None,
                 nesting: tuple[Nesting, Nesting] | None = None,
                 loads: tuple[CycleLoad, CycleLoad] | None = None, thresholds: Thresholds | None = None,
                 calls: tuple[CallDurations, CallDurations] | None = None,
                 chains: tuple[LaunchChains, LaunchChains] | None = None) -> Analysis:
    """Compare `abnormal` against `normal` over their cycles.

    `matrices`: both runs' `attribute_activity` over these cycles when already computed.
    `parallel`: where independent tests run (default: this process, serially).  `plan`: the
    cycle plan both runs were cut by, for the report.  `nesting`: which CPU ranges run inside
    which, in each run (perfdiff.nesting), so findings can put nested work under its parent.
    `loads`: both runs' `cycle_load` over these cycles when already computed.  `thresholds`:
    the decision thresholds (default: perfdiff's, with `alpha`); carried on the Analysis.
    `calls`: both runs' `call_durations` over these cycles, for a plan of Regime.TOTALS,
    when taken before the runs' rows were trimmed (keep_rows_for_mu); `chains`: both runs'
    `launch_chains`, taken then too (else here)."""
    th = thresholds or Thresholds(alpha=alpha)
    par = parallel or Parallel.serial()
    sn, sa = summarize_run(normal, cn), summarize_run(abnormal, ca)
    p = _align_pair(normal, abnormal, cn, ca, matrices, plan, th)
    functions, to_test = _function_rows(p)
    # The function tests run in the pool while the metrics and the cycle statistics are computed here.
    pending = par.start_map(_function_tests, to_test, shared=p, large=p.kn + p.ka >= par.pool_min_cycles)
    try:
        tested_idx = [i for i, fs in enumerate(functions) if fs.tested]
        metrics = _metric_stats(normal, abnormal, p, functions, tested_idx, par)
        cycle_test = (stats.compare_paired(sa.dur_us, sn.dur_us, floor=th.t_floor_us, time_ordered=True) if p.matched
                      else stats.compare_samples(sa.dur_us, sn.dur_us, floor=th.t_floor_us, time_ordered=True))
        cycle_ks = stats.ks_statistic(sa.dur_us, sn.dur_us)
        comparable = comparability(normal, abnormal, cn, ca)
        busy = gpu_busy_shares(p.mn.keys, p.mn.own_ns, p.dur_n, p.ma.keys, p.ma.own_ns, p.dur_a, matched=p.matched,
                               thresholds=th)
        for f, (t_res, b_res) in zip(to_test, pending.result(), strict=True):
            functions[f] = replace(functions[f], t=t_res, beta=b_res)
    finally:
        pending.close()
    functions, mu_rows, ctx_rows = _assign_q(functions, tested_idx, metrics.mu, metrics.context, th.alpha)
    classes = _step_classes(p, plan, functions, tested_idx)
    modes, beta_vs_common = common_modes(functions, th)
    for i, v in beta_vs_common.items():
        functions[i] = replace(functions[i], beta_vs_common=v)
    ln, la = loads or (cycle_load(normal, cn), cycle_load(abnormal, ca))
    load = compare_load(ln, la, sn.dur_us, sa.dur_us, thresholds=th, own=(p.mn, p.ma, p.idx_n, p.idx_a),
                        tested=tested_idx)
    comparable += [x for x in (load_notice(load),) if x is not None]
    warnings = metrics.warnings + [x for x in (cycle_ratio_notice(cn, ca, one_plan=plan is not None and plan.confirmed,
                                                                  th=th),) if x is not None]
    min_p, needed = _cycles_needed(functions, len(tested_idx), p, th.alpha)
    details = _detail_rows(functions, mu_rows, th.alpha)
    traces = (_suspect_traces(functions, details, p, th.alpha)
              + _context_traces(ctx_rows, metrics.series_n, metrics.series_a, cn, ca, th.alpha))
    analysis = Analysis(
        normal=sn, abnormal=sa, alpha=th.alpha, thresholds=th,
        cycle_test=cycle_test, cycle_ks=cycle_ks,
        quantiles_n=stats.quantile_table(sn.dur_us), quantiles_a=stats.quantile_table(sa.dur_us),
        functions=tuple(functions), mu=tuple(mu_rows), context=tuple(ctx_rows),
        details=tuple(details), common_modes=tuple(modes), constants=metrics.constants, aliases=metrics.aliases,
        comparability=tuple(comparable), warnings=tuple(warnings), renames=p.renames, gpu_busy=tuple(busy),
        untested=tuple(i for i, fs in enumerate(functions) if not fs.tested), scope=metrics.scope,
        n_tests_t=len(tested_idx), min_p=min_p, cycles_needed=needed, events_n=_events(normal, cn),
        events_a=_events(abnormal, ca), plan=plan, matched=p.matched, match_rho=p.match_rho,
        cycle_ks_p=stats.ks_pvalue(cycle_ks, p.kn, p.ka),
        inside=_inside(nesting[1], p.ma, p.idx_a) if nesting else {}, traces=traces, load=load, step_classes=classes,
        categories=category_table(functions), devices=device_totals(functions),
        tau_base=CycleBase.NORMAL if p.dur_n.mean() > p.dur_a.mean() else CycleBase.ABNORMAL,
        per_call=_per_call_tests(normal, abnormal, cn, ca, functions, calls) if plan is not None
        and plan.regime is Regime.TOTALS else ())
    if analysis.hardware_differs:  # other hardware's libraries name their kernels otherwise: no swap
        return analysis
    return replace(analysis, replacements=_replacements(normal, abnormal, functions, chains))


def _step_classes(p: _Pair, plan: CyclePlan | None, functions: list[FunctionStats],
                  tested: list[int]) -> StepClasses | None:
    """The kinds of step the cycles fall into, compared kind with kind (perfdiff.analyze.classes);
    None over matched cycles (pairs compare like with like already), fixed windows (no steps)
    and pairs compared by totals."""
    if p.matched or (plan is not None and (plan.source == CycleSource.WINDOW or plan.regime is Regime.TOTALS)):
        return None
    return step_classes(p.mn.own_ns, p.ma.own_ns, p.idx_n, p.idx_a, p.dur_n, p.dur_a, functions, tested, p.th.alpha)


def _replacements(normal: RunData, abnormal: RunData, functions: list[FunctionStats],
                  chains: tuple[LaunchChains, LaunchChains] | None) -> tuple[Replacement, ...]:
    """The GPU functions swapped under one launching op; the launches are looked up (unless
    given) only where some GPU function vanished and another is new."""
    gone = {(f.name, f.device, f.kind) for f in functions if f.kind in GPU_KINDS and f.presence == "vanished"}
    new = {(f.name, f.device, f.kind) for f in functions if f.kind in GPU_KINDS and f.presence == "new"}
    if not gone or not new:
        return ()
    cn, ca = chains or (launch_chains(normal, gone), launch_chains(abnormal, new))
    return replacements(functions, cn, ca)


MIN_CALLS = 5  # calls each run needs for a function's per-call test


def _per_call_tests(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles, functions: list[FunctionStats],
                    calls: tuple[CallDurations, CallDurations] | None) -> tuple[PerCallTest, ...]:
    """Per-call Mann–Whitney tests of the functions in both runs with at least MIN_CALLS calls
    in each, q by Benjamini–Hochberg over them (Regime.TOTALS: no cycles to test over).
    `calls`: both runs' call_durations, taken before their rows were trimmed (else here)."""
    dn, da = calls or (call_durations(normal, cn), call_durations(abnormal, ca))
    rows = []
    for f in functions:
        if f.presence != "both":
            continue
        x, y = dn.get((f.name, f.device, f.kind)), da.get((f.name, f.device, f.kind))
        if x is None or y is None or len(x) < MIN_CALLS or len(y) < MIN_CALLS:
            continue
        p, _ = stats.mann_whitney_p(y, x)
        rows.append((f, x, y, p))
    q = stats.bh_qvalues([r[3] for r in rows]) if rows else []
    return tuple(PerCallTest(f.name, f.device, f.kind, len(x), len(y), float(np.median(x)), float(np.median(y)),
                             float(p), float(qi)) for (f, x, y, p), qi in zip(rows, q, strict=True))


def _align_pair(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles,
                matrices: tuple[CycleMatrix, CycleMatrix] | None, plan: CyclePlan | None, th: Thresholds) -> _Pair:
    """Both runs' matrices (attributed here unless given), their functions aligned, and
    whether their cycles are matched (cycle i of both does the same work: paired tests)."""
    mn, ma = matrices or (attribute_activity(normal, cn), attribute_activity(abnormal, ca))
    # Windows and idle-gap spans are no iterations: a step's calls in them scale with its speed.
    keys, idx_n, idx_a, renames = align(mn, ma, per_iteration=cn.source not in (CycleSource.WINDOW,
                                                                                CycleSource.IDLE_GAPS))
    dur_n, dur_a = cn.dur_ns.astype(np.float64), ca.dur_ns.astype(np.float64)
    matched, rho = stats.cycles_match(dur_n, dur_a)
    if plan is not None and plan.source == CycleSource.WINDOW:
        matched = False  # windows cut the timeline, not the work
    return _Pair(mn=mn, ma=ma, keys=keys, idx_n=idx_n, idx_a=idx_a, dur_n=dur_n, dur_a=dur_a,
                        matched=matched, th=th, renames=tuple(renames), match_rho=rho)


def _function_rows(p: _Pair) -> tuple[list[FunctionStats], list[int]]:
    """Every aligned function's means per cycle (tests to come), and the functions to test:
    those whose pooled mean own time reaches `test_min_share` of the pooled mean cycle, the
    ones present in most cycles first (a test's cost grows with them: workers finish together)."""
    # Per function and run: (Σ own ns, Σ own/cycle duration, cycles it ran in), one pass over
    # its row each (a million cycles a side: no per-cycle vector is built here).
    sums_n = [_row_sums(p.mn.own_ns, i, 1.0 / p.dur_n) for i in p.idx_n]
    sums_a = [_row_sums(p.ma.own_ns, i, 1.0 / p.dur_a) for i in p.idx_a]
    pooled_cycle_us = (p.dur_n.sum() + p.dur_a.sum()) / (p.kn + p.ka) / NS_PER_US
    floor_us = p.th.test_min_share * pooled_cycle_us
    to_test = [f for f in range(len(p.keys)) if (sums_n[f][0] + sums_a[f][0]) / NS_PER_US / (p.kn + p.ka) >= floor_us]
    to_test.sort(key=lambda f: -(sums_n[f][2] + sums_a[f][2]))
    # τ is a share of the longer mean cycle (docs/STATISTICS.md): a change is at most its cycle.
    tested, base_us = set(to_test), max(p.dur_a.mean(), p.dur_n.mean()) / NS_PER_US
    rows = [_function_row(k, sums_n[f], sums_a[f], p.mn, p.ma, p.idx_n[f], p.idx_a[f], p.kn, p.ka, base_us,
                          f in tested) for f, k in enumerate(p.keys)]
    return rows, to_test


@dataclass(frozen=True)
class _Metrics:
    """The metrics' results before q: μ tests, context tests, scopes, aliases, constants, the
    metrics one run lacks (as warnings), and both runs' series (the step load left out)."""

    mu: list[MuStats]
    context: list[ContextStats]
    scope: dict[str, str]
    aliases: dict[str, list[str]]
    constants: tuple[str, ...]
    warnings: list[Notice]
    series_n: dict[tuple[str, str], SeriesInfo]
    series_a: dict[tuple[str, str], SeriesInfo]


def _metric_stats(normal: RunData, abnormal: RunData, p: _Pair, functions: list[FunctionStats],
                  tested_idx: list[int], par: Parallel) -> _Metrics:
    """Each metric sampled in both runs: its scope (func when sampled at least twice a cycle,
    else ctx), then μ per tested function while it ran (func) or the run-level series (ctx);
    identical series merge (aliases), constant ones leave."""
    ser_n, ser_a = sample_series(normal), sample_series(abnormal)
    one_side = [(key, "normal" if key in ser_n else "abnormal") for key in sorted(set(ser_n) ^ set(ser_a))]
    # The engine steps' load is a covariate (analyze/load.py), not a resource metric.
    ser_n = {k: v for k, v in ser_n.items() if not is_step_metric(k[0])}
    ser_a = {k: v for k, v in ser_a.items() if not is_step_metric(k[0])}
    aliases, alias_of, constants = aliases_and_constants(ser_n, ser_a)
    min_cycle_ns = min(float(np.median(p.dur_n)), float(np.median(p.dur_a)))
    scope: dict[str, str] = {}
    ctx_rows: list[ContextStats] = []
    dev_rows: dict[str, tuple[DeviceRows | None, DeviceRows | None]] = {}
    jobs: list[MuJob] = []
    mu_cache: dict = {}
    for key in sorted(set(ser_n) & set(ser_a)):
        metric, device = key
        label = f"{metric}@{device}"
        if label in alias_of or metric in constants.get(device, set()):
            continue
        s_n, s_a = ser_n[key], ser_a[key]
        sc = "func" if max(s_n.median_interval_ns, s_a.median_interval_ns) <= 0.5 * min_cycle_ns else "ctx"
        scope[label] = sc
        res_floor = stats.resolution(s_n.value, s_a.value)
        res_floor = 0.0 if not math.isfinite(res_floor) else res_floor
        if sc == "func":
            if device not in dev_rows:
                dev_rows[device] = (device_rows(normal, p.mn, device, p.kn), device_rows(abnormal, p.ma, device, p.ka))
            rn, ra = dev_rows[device]
            mu_n = mu_matrix(rn, s_n, len(p.mn.keys), p.kn, mu_cache)
            mu_a = mu_matrix(ra, s_a, len(p.ma.keys), p.ka, mu_cache)
            jobs.extend(mu_jobs(mu_n, mu_a, p.idx_n, p.idx_a, s_n, functions, tested_idx, res_floor))
        else:
            ctx_rows.append(_context_row(s_n, s_a, res_floor, p.th.alpha, tuple(aliases.get(label, []))))
    mu_res = par.map(_mu_test, jobs, shared=p.th.alpha, large=sum(len(j.a) * len(j.n) for j in jobs) >= par.mu_min_pairs)
    mu_rows = [MuStats(func=j.func, metric=j.metric, device=j.device, unit=metric_unit(j.metric), res=r, z_log=z)
               for j, (r, z) in zip(jobs, mu_res, strict=True)]
    warnings = [Notice(NoticeCode.METRIC_ONE_SIDE, detail=MetricOneSideDetail(metric=key[0], device=key[1], side=side))
                for key, side in one_side]
    return _Metrics(mu=mu_rows, context=ctx_rows, scope=scope, aliases=aliases,
                    constants=tuple(sorted(f"{m}@{d}" for d, ms in constants.items() for m in ms)),
                    warnings=warnings, series_n=ser_n, series_a=ser_a)


def _context_row(s_n: SeriesInfo, s_a: SeriesInfo, res_floor: float, alpha: float,
                 aliases: tuple[str, ...]) -> ContextStats:
    """A ctx-scope metric compared on its samples."""
    return ContextStats(metric=s_n.metric, device=s_n.device, unit=metric_unit(s_n.metric),
                        res=stats.compare_samples(s_a.value, s_n.value, floor=res_floor, alpha=alpha,
                                                  time_ordered=True),
                        z_log=z_log(s_a.value, s_n.value, res_floor),
                        median_interval_ms_n=s_n.median_interval_ns / 1e6,
                        median_interval_ms_a=s_a.median_interval_ns / 1e6, aliases=aliases)


def _cycles_needed(functions: list[FunctionStats], m_tests: int, p: _Pair, alpha: float) -> tuple[float, int | None]:
    """(the smallest p a test can reach, the cycles a run would need for any q to reach α, or
    None when a q reached it or nothing was tested).  Over matched cycles the signed-rank
    test's smallest p is 2^(1−K)."""
    min_p = 2.0 ** (1 - p.kn) if p.matched else stats.min_attainable_p(p.kn, p.ka)
    if not m_tests or min_p * m_tests <= alpha or any(f.q_t <= alpha for f in functions if f.tested):
        return min_p, None
    return min_p, (math.ceil(1 + math.log2(m_tests / alpha)) if p.matched else stats.cycles_needed(m_tests, alpha))


def _function_row(key: tuple[str, str, str], sums_n: tuple[float, float, int], sums_a: tuple[float, float, int],
                  mn: CycleMatrix, ma: CycleMatrix, i_n: int, i_a: int, Kn: int, Ka: int, base_us: float,
                  tested: bool) -> FunctionStats:
    """One function's means per cycle (its tests are added when they finish)."""
    name, device, kind = key
    (own_n, share_n, ran_n), (own_a, share_a, ran_a) = sums_n, sums_a
    tn_mean, ta_mean = own_n / Kn / NS_PER_US, own_a / Ka / NS_PER_US  # µs per cycle
    bn_mean, ba_mean = 100.0 * share_n / Kn, 100.0 * share_a / Ka  # % of the cycle
    cn_sum, ca_sum = _total(mn.calls_total, i_n), _total(ma.calls_total, i_a)
    return FunctionStats(
        name=name, device=device, kind=kind, wait=is_wait(name, kind),
        presence="both" if i_n >= 0 and i_a >= 0 else ("new" if i_n < 0 else "vanished"),
        tested=bool(tested), t_n_us=tn_mean, t_a_us=ta_mean,
        tau_pp=100.0 * (ta_mean - tn_mean) / base_us,
        t=None, q_t=float("nan"), beta_n=bn_mean, beta_a=ba_mean,
        d_beta=ba_mean - bn_mean, beta=None, q_beta=float("nan"),
        presence_n=ran_n / Kn, presence_a=ran_a / Ka,
        calls_n=float(cn_sum / Kn), calls_a=float(ca_sum / Ka),
        per_call_n_us=own_n / NS_PER_US / cn_sum if cn_sum else float("nan"),
        per_call_a_us=own_a / NS_PER_US / ca_sum if ca_sum else float("nan"),
        incl_n_us=_total(mn.incl_total_ns, i_n) / Kn / NS_PER_US,
        incl_a_us=_total(ma.incl_total_ns, i_a) / Ka / NS_PER_US,
        sampled=bool((i_n >= 0 and mn.keys["sampled"].iloc[i_n]) or (i_a >= 0 and ma.keys["sampled"].iloc[i_a])))


def _suspect_traces(functions: list[FunctionStats], details: list[DetailRow], p: _Pair,
                    alpha: float) -> tuple[Trace, ...]:
    """Own time per cycle (µs) of the first TRACE_PANELS significant functions of the table,
    and of the first TRACE_PANELS significant host states: the verdict may name one of those
    as a cause, and analyze.order then draws the table's first TRACE_PANELS as ordered."""
    out: list[Trace] = []
    drawn = [0, 0]  # functions, host states
    for r in details:
        f = functions[r.func]
        if not (math.isfinite(f.q_t) and f.q_t <= alpha) or min(drawn) == TRACE_PANELS:
            break
        if drawn[f.host_state] == TRACE_PANELS or any(t.name == f.name and t.device == f.device for t in out):
            continue
        drawn[f.host_state] += 1
        out.append(Trace("function", f.name, f.device, "µs",
                         np.arange(p.kn), _row(p.mn.own_ns, p.idx_n[r.func], p.kn) / NS_PER_US,
                         np.arange(p.ka), _row(p.ma.own_ns, p.idx_a[r.func], p.ka) / NS_PER_US))
    return tuple(out)


def _context_traces(ctx_rows: list[ContextStats], ser_n: dict, ser_a: dict, cn: Cycles, ca: Cycles,
                    alpha: float) -> tuple[Trace, ...]:
    """The samples over time (s since the first cycle) of the TRACE_PANELS context metrics
    that changed most (significant, by |Z(log μ)|)."""
    changed = [r for r in ctx_rows if math.isfinite(r.q) and r.q <= alpha]
    changed.sort(key=lambda r: -abs(r.z_log) if math.isfinite(r.z_log) else 0.0)
    out = []
    for r in changed[:TRACE_PANELS]:
        s_n, s_a = ser_n[(r.metric, r.device)], ser_a[(r.metric, r.device)]
        out.append(Trace("metric", r.metric, r.device, r.unit, (s_n.t0 - int(cn.start_ns[0])) / 1e9, s_n.value,
                         (s_a.t0 - int(ca.start_ns[0])) / 1e9, s_a.value))
    return tuple(out)


INSIDE_MIN_SHARE = 0.5  # shares kept in the record (the findings use 0.9)


def _inside(nest: Nesting, ma: CycleMatrix, idx_a: np.ndarray) -> dict[int, dict[int, float]]:
    """For each aligned function, the share of its own time in the abnormal run spent inside
    each enclosing function (aligned indexes; shares ≥ INSIDE_MIN_SHARE)."""
    keys_a = list(map(tuple, ma.keys[["name", "device", "kind"]].to_numpy().tolist()))
    aligned = {keys_a[i]: f for f, i in enumerate(idx_a.tolist()) if i >= 0}
    out: dict[int, dict[int, float]] = {}
    for (fk, ak) in nest.inside_ns:
        f, a = aligned.get(fk), aligned.get(ak)
        if f is None or a is None:
            continue
        share = nest.share(fk, ak)
        if share >= INSIDE_MIN_SHARE:
            out.setdefault(f, {})[a] = share
    return out


def _events(run: RunData, cycles: Cycles) -> tuple[dict[str, Any], ...]:
    """The manifest's timed events, with their time since the first cycle (s)."""
    out = []
    for e in run.manifest.get("events") or []:
        if isinstance(e, dict) and isinstance(e.get("t_ns"), (int, float)):
            out.append({**e, "t_s": (e["t_ns"] - int(cycles.start_ns[0])) / 1e9})
    return tuple(out)


def _assign_q(functions: list[FunctionStats], tested_idx: list[int], mu_rows: list[MuStats],
              ctx_rows: list[ContextStats], alpha: float,
              ) -> tuple[list[FunctionStats], list[MuStats], list[ContextStats]]:
    """Benjamini–Hochberg over every test of the report (own time, β, μ, context) as one
    family: separate families at α each would let two same-distribution runs claim something
    far more often than α (docs/STATISTICS.md, multiple testing)."""
    p = np.array([functions[i].t.p_mwu for i in tested_idx]  # type: ignore[union-attr]
                 + [functions[i].beta.p_mwu for i in tested_idx]  # type: ignore[union-attr]
                 + [r.res.p_mwu for r in mu_rows] + [r.res.p_mwu for r in ctx_rows], dtype=float)
    q = stats.bh_qvalues(p)
    m = len(tested_idx)
    functions = list(functions)
    for j, i in enumerate(tested_idx):
        fs = functions[i]
        functions[i] = replace(fs, q_t=float(q[j]), q_beta=float(q[m + j]),
                               fragile=stats.is_fragile(fs.t.p_welch, fs.t.p_mwu, alpha))  # type: ignore[union-attr]
    qs = q[2 * m:]
    mu_out = [replace(r, q=float(qv), fragile=stats.is_fragile(r.res.p_welch, r.res.p_mwu, alpha))
              for r, qv in zip(mu_rows, qs[:len(mu_rows)], strict=True)]
    ctx_out = [replace(r, q=float(qv), fragile=stats.is_fragile(r.res.p_welch, r.res.p_mwu, alpha))
               for r, qv in zip(ctx_rows, qs[len(mu_rows):], strict=True)]
    return functions, mu_out, ctx_out


def _detail_rows(functions: list[FunctionStats], mu_rows: list[MuStats], alpha: float) -> list[DetailRow]:
    """The detailed table's rows: functions whose own time changed significantly first, waits
    after them (a wait is a symptom: it never ranks above a function that could be the cause),
    then host states (analyze.order lifts those the verdict names), then the rest; each tier by
    suspicion score, then |τ|."""
    by_func: dict[int, list[int]] = {}
    for j, r in enumerate(mu_rows):
        by_func.setdefault(r.func, []).append(j)
    rows = []
    for i, f in enumerate(functions):
        if not f.tested:
            continue
        z_t = f.t.z if f.t else float("nan")
        z_b = f.beta.z if f.beta else float("nan")
        for j in by_func.get(i, [None]):  # type: ignore[list-item]
            z_lm = mu_rows[j].z_log if j is not None else float("nan")
            rows.append(DetailRow(
                func=i, mu=j,
                score=stats.suspicion_score(f.tau_pp, z_t, z_lm, func_scope=j is not None),
                legacy_score=stats.legacy_score(f.d_beta, z_b, z_lm)))
    rows.sort(key=detail_key(functions, mu_rows, alpha))  # host states below the waits (analyze.order)
    return rows
