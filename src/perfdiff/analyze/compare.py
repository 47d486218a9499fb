"""Compare two runs: per-(function, metric, device) statistics and checks, as records.

Input: two RunData, their Cycles and their per-(function, cycle) matrices.  Output: an
`Analysis` (perfdiff.analyze.records), no display strings.  Definitions are in
docs/STATISTICS.md.  Independent tests are handed to a perfdiff.parallel.Parallel, which
runs them here or in forked workers with the same results.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from perfdiff import stats
from perfdiff.analyze.align import align
from perfdiff.analyze.busy import gpu_busy_shares
from perfdiff.analyze.checks import common_modes, comparability, cycle_ratio_notice
from perfdiff.analyze.load import compare_load, cycle_load, is_step_metric, load_notice
from perfdiff.analyze.metrics import aliases_and_constants, mu_jobs, z_log
from perfdiff.analyze.evidence import MetricOneSideDetail
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.analyze.records import (Analysis, ContextStats, CycleLoad, DetailRow, FunctionStats, MuStats, Notice,
                                      NoticeCode, RunSummary, Trace)
from perfdiff.attribute import CycleMatrix, DeviceRows, attribute_activity, device_rows, mu_matrix, sample_series
from perfdiff.bundle import RunData
from perfdiff.model.cycles import CyclePlan
from perfdiff.model.schema import CycleSource
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
        status=str(run.manifest.get("status", "unknown")), dur_us=dur, notes=tuple(run.notes))


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


def _function_tests(data: tuple, f: int) -> tuple[stats.TwoSample, stats.TwoSample]:
    """(own time per cycle, share of the cycle) tests of aligned function `f`: paired over
    matched cycles, else independent."""
    mn, ma, idx_n, idx_a, Dn, Da, th, matched = data
    tn = _row(mn.own_ns, idx_n[f], len(Dn)) / NS_PER_US
    ta = _row(ma.own_ns, idx_a[f], len(Da)) / NS_PER_US
    test = stats.compare_paired if matched else stats.compare_samples
    return (test(ta, tn, floor=th.t_floor_us, alpha=th.alpha),
            test(100.0 * ta * NS_PER_US / Da, 100.0 * tn * NS_PER_US / Dn, floor=th.beta_floor_pp, alpha=th.alpha))


def _mu_test(alpha: float, job: tuple) -> tuple[stats.TwoSample, float]:
    """One μ test (Parallel.map's fn(shared, item): the shared value is α)."""
    _, _, _, va, vn, floor = job
    return stats.compare_samples(va, vn, floor=floor, alpha=alpha), z_log(va, vn, floor)


def compare_runs(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles, *,
                 alpha: float = 0.05, matrices: tuple[CycleMatrix, CycleMatrix] | None = None,
                 parallel: Parallel | None = None, plan: CyclePlan | None = None,
                 nesting: tuple[Nesting, Nesting] | None = None,
                 loads: tuple[CycleLoad, CycleLoad] | None = None, thresholds: Thresholds | None = None) -> Analysis:
    """Compare `abnormal` against `normal` over their cycles.

    `matrices`: both runs' `attribute_activity` over these cycles when already computed.
    `parallel`: where independent tests run (default: this process, serially).  `plan`: the
    cycle plan both runs were cut by, for the report.  `nesting`: which CPU ranges run inside
    which, in each run (perfdiff.nesting), so findings can put nested work under its parent.
    `loads`: both runs' `cycle_load` over these cycles when already computed.  `thresholds`:
    the decision thresholds (default: perfdiff's, with `alpha`); carried on the Analysis."""
    th = thresholds or Thresholds(alpha=alpha)
    alpha = th.alpha
    par = parallel or Parallel.serial()
    sn, sa = summarize_run(normal, cn), summarize_run(abnormal, ca)
    Dn, Da = cn.dur_ns.astype(np.float64), ca.dur_ns.astype(np.float64)
    mn, ma = matrices or (attribute_activity(normal, cn), attribute_activity(abnormal, ca))
    # Windows and idle-gap spans are no iterations: a step's calls in them scale with its speed.
    keys, idx_n, idx_a, renames = align(mn, ma, per_iteration=cn.source not in (CycleSource.WINDOW,
                                                                                CycleSource.IDLE_GAPS))
    Kn, Ka = cn.n, ca.n
    pooled_cycle_us = (Dn.sum() + Da.sum()) / (Kn + Ka) / NS_PER_US
    mean_da_us = Da.mean() / NS_PER_US

    # Per function and run: (Σ own ns, Σ own/cycle duration, cycles it ran in), one pass over
    # its row each (a million cycles a side: no per-cycle vector is built here).
    inv_n, inv_a = 1.0 / Dn, 1.0 / Da
    sums_n = [_row_sums(mn.own_ns, i, inv_n) for i in idx_n]
    sums_a = [_row_sums(ma.own_ns, i, inv_a) for i in idx_a]
    own_sum = [(sums_n[f][0] + sums_a[f][0]) / NS_PER_US for f in range(len(keys))]
    to_test = [f for f in range(len(keys)) if own_sum[f] / (Kn + Ka) >= th.test_min_share * pooled_cycle_us]
    # Largest first (a test's cost grows with the cycles it is present in), so workers finish together.
    to_test.sort(key=lambda f: -(sums_n[f][2] + sums_a[f][2]))
    # Matched cycles (cycle i of both runs does the same work): paired tests.
    matched, rho = stats.cycles_match(Dn, Da)
    if plan is not None and plan.source == CycleSource.WINDOW:
        matched = False  # windows cut the timeline, not the work
    pending = par.start_map(_function_tests, to_test, shared=(mn, ma, idx_n, idx_a, Dn, Da, th, matched),
                            large=Kn + Ka >= par.pool_min_cycles)
    tested_set = set(to_test)
    try:
        functions = [_function_row(k, sums_n[f], sums_a[f], mn, ma, idx_n[f], idx_a[f], Kn, Ka, mean_da_us,
                                   f in tested_set) for f, k in enumerate(keys)]
        tested_idx = [i for i, fs in enumerate(functions) if fs.tested]

        # --- metrics: scope, aliases, constants; μ per function or the context series
        ser_n, ser_a = sample_series(normal), sample_series(abnormal)
        # The engine steps' load is a covariate (analyze/load.py), not a resource metric.
        one_side = [(key, "normal" if key in ser_n else "abnormal") for key in sorted(set(ser_n) ^ set(ser_a))]
        ser_n = {k: v for k, v in ser_n.items() if not is_step_metric(k[0])}
        ser_a = {k: v for k, v in ser_a.items() if not is_step_metric(k[0])}
        aliases, alias_of, constants = aliases_and_constants(ser_n, ser_a)
        min_cycle_ns = min(float(np.median(Dn)), float(np.median(Da)))
        scope: dict[str, str] = {}
        ctx_rows: list[ContextStats] = []
        dev_rows: dict[str, tuple[DeviceRows | None, DeviceRows | None]] = {}
        jobs: list[tuple] = []
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
                    dev_rows[device] = (device_rows(normal, mn, device, Kn), device_rows(abnormal, ma, device, Ka))
                rn, ra = dev_rows[device]
                mu_n = mu_matrix(rn, s_n, len(mn.keys), Kn, mu_cache)
                mu_a = mu_matrix(ra, s_a, len(ma.keys), Ka, mu_cache)
                jobs.extend(mu_jobs(mu_n, mu_a, idx_n, idx_a, s_n, functions, tested_idx, res_floor))
            else:
                res = stats.compare_samples(s_a.value, s_n.value, floor=res_floor, alpha=alpha)
                ctx_rows.append(ContextStats(
                    metric=metric, device=device, unit=metric_unit(metric), res=res,
                    z_log=z_log(s_a.value, s_n.value, res_floor),
                    median_interval_ms_n=s_n.median_interval_ns / 1e6,
                    median_interval_ms_a=s_a.median_interval_ns / 1e6,
                    aliases=tuple(aliases.get(label, []))))
        mu_res = par.map(_mu_test, jobs, shared=alpha,
                         large=sum(len(j[3]) * len(j[4]) for j in jobs) >= par.mu_min_pairs)
        mu_rows = [MuStats(func=j[0], metric=j[1], device=j[2], unit=metric_unit(j[1]), res=r, z_log=z)
                   for j, (r, z) in zip(jobs, mu_res, strict=True)]
        warnings = [Notice(NoticeCode.METRIC_ONE_SIDE, detail=MetricOneSideDetail(metric=key[0], device=key[1],
                                                                                   side=side))
                    for key, side in one_side]
        # Everything left that does not need the function tests, while the pool finishes them.
        cycle_test = (stats.compare_paired(sa.dur_us, sn.dur_us, floor=th.t_floor_us) if matched
                      else stats.compare_samples(sa.dur_us, sn.dur_us, floor=th.t_floor_us))
        cycle_ks = stats.ks_statistic(sa.dur_us, sn.dur_us)
        quantiles = stats.quantile_table(sn.dur_us), stats.quantile_table(sa.dur_us)
        comparable = comparability(normal, abnormal, cn, ca)
        busy = gpu_busy_shares(mn.keys, mn.own_ns, Dn, ma.keys, ma.own_ns, Da, matched=matched, thresholds=th)
        for f, (t_res, b_res) in zip(to_test, pending.result(), strict=True):
            functions[f] = replace(functions[f], t=t_res, beta=b_res)
    finally:
        pending.close()
    functions, mu_rows, ctx_rows = _assign_q(functions, tested_idx, mu_rows, ctx_rows, alpha)
    modes, beta_vs_common = common_modes(functions, th)
    for i, v in beta_vs_common.items():
        functions[i] = replace(functions[i], beta_vs_common=v)
    ln, la = loads or (cycle_load(normal, cn), cycle_load(abnormal, ca))
    load = compare_load(ln, la, sn.dur_us, sa.dur_us, thresholds=th,
                        own=(mn, ma, idx_n, idx_a), tested=tested_idx)
    notice = load_notice(load)
    if notice is not None:
        comparable.append(notice)
    ratio_notice = cycle_ratio_notice(cn, ca, one_plan=plan is not None and plan.confirmed, th=th)
    if ratio_notice is not None:
        warnings.append(ratio_notice)
    m_tests = len(tested_idx)
    # The smallest p a test can reach: the signed-rank test's 2^(1−K) over matched cycles.
    min_p = 2.0 ** (1 - Kn) if matched else stats.min_attainable_p(Kn, Ka)
    needed = None
    if m_tests and min_p * m_tests > alpha and not any(f.q_t <= alpha for f in functions if f.tested):
        needed = (math.ceil(1 + math.log2(m_tests / alpha)) if matched else stats.cycles_needed(m_tests, alpha))
    details = _detail_rows(functions, mu_rows, alpha)
    traces = (_suspect_traces(functions, details, mn, ma, idx_n, idx_a, Kn, Ka, alpha)
              + _context_traces(ctx_rows, ser_n, ser_a, cn, ca, alpha))
    return Analysis(
        normal=sn, abnormal=sa, alpha=alpha, thresholds=th,
        cycle_test=cycle_test, cycle_ks=cycle_ks, quantiles_n=quantiles[0], quantiles_a=quantiles[1],
        functions=tuple(functions), mu=tuple(mu_rows), context=tuple(ctx_rows),
        details=tuple(details), common_modes=tuple(modes),
        constants=tuple(sorted(f"{m}@{d}" for d, ms in constants.items() for m in ms)), aliases=aliases,
        comparability=tuple(comparable), warnings=tuple(warnings), renames=tuple(renames), gpu_busy=tuple(busy),
        untested=tuple(i for i, fs in enumerate(functions) if not fs.tested), scope=scope, n_tests_t=m_tests,
        min_p=min_p, cycles_needed=needed, events_n=_events(normal, cn), events_a=_events(abnormal, ca), plan=plan,
        matched=matched, match_rho=rho, cycle_ks_p=stats.ks_pvalue(cycle_ks, Kn, Ka), inside=_inside(nesting[1], ma, idx_a) if nesting else {},
        traces=traces,
        load=load)


def _function_row(key: tuple[str, str, str], sums_n: tuple[float, float, int], sums_a: tuple[float, float, int],
                  mn: CycleMatrix, ma: CycleMatrix, i_n: int, i_a: int, Kn: int, Ka: int, mean_da_us: float,
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
        tau_pp=100.0 * (ta_mean - tn_mean) / mean_da_us,
        t=None, q_t=float("nan"), beta_n=bn_mean, beta_a=ba_mean,
        d_beta=ba_mean - bn_mean, beta=None, q_beta=float("nan"),
        presence_n=ran_n / Kn, presence_a=ran_a / Ka,
        calls_n=float(cn_sum / Kn), calls_a=float(ca_sum / Ka),
        per_call_n_us=own_n / NS_PER_US / cn_sum if cn_sum else float("nan"),
        per_call_a_us=own_a / NS_PER_US / ca_sum if ca_sum else float("nan"),
        incl_n_us=_total(mn.incl_total_ns, i_n) / Kn / NS_PER_US,
        incl_a_us=_total(ma.incl_total_ns, i_a) / Ka / NS_PER_US,
        sampled=bool((i_n >= 0 and mn.keys["sampled"].iloc[i_n]) or (i_a >= 0 and ma.keys["sampled"].iloc[i_a])))


TRACE_PANELS = 4  # suspects and context metrics drawn, each


def _suspect_traces(functions: list[FunctionStats], details: list[DetailRow], mn: CycleMatrix, ma: CycleMatrix,
                    idx_n: np.ndarray, idx_a: np.ndarray, Kn: int, Ka: int, alpha: float) -> tuple[Trace, ...]:
    """Own time per cycle (µs) of the first TRACE_PANELS significant functions of the table."""
    out: list[Trace] = []
    for r in details:
        f = functions[r.func]
        if len(out) == TRACE_PANELS or not (math.isfinite(f.q_t) and f.q_t <= alpha):
            break
        if any(t.name == f.name and t.device == f.device for t in out):
            continue
        out.append(Trace("function", f.name, f.device, "µs", np.arange(Kn), _row(mn.own_ns, idx_n[r.func], Kn) / NS_PER_US,
                         np.arange(Ka), _row(ma.own_ns, idx_a[r.func], Ka) / NS_PER_US))
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
    then the rest; each tier by suspicion score, then |τ|."""
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
    def tier(f: FunctionStats) -> int:
        if not (math.isfinite(f.q_t) and f.q_t <= alpha):
            return 2
        return 1 if f.wait else 0

    rows.sort(key=lambda r: (tier(functions[r.func]), -_nz(r.score), -abs(functions[r.func].tau_pp),
                             functions[r.func].name, mu_rows[r.mu].metric if r.mu is not None else ""))
    return rows


def _nz(x: float) -> float:
    return 0.0 if not math.isfinite(x) else x
