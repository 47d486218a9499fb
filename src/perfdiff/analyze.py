"""Compare two runs: per-(function, metric, device) statistics, checks and findings.

Input: two RunData and their Cycles.  Output: a `Comparison` of plain records (no strings
formatted for display: that is render's job).  Definitions are STATS.md's.
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from perfdiff import stats
from perfdiff.attribute import (CycleMatrix, DeviceRows, SeriesInfo, attribute_activity, device_rows, mu_matrix,
                                sample_series)
from perfdiff.bundle import RunData
from perfdiff.registry import metric_unit
from perfdiff.model.schema import GPU_KINDS
from perfdiff.segment import Cycles

NS_PER_US = 1e3
T_FLOOR_US = 1e-3  # own-time Z floor: the 1 ns timer resolution, in µs
BETA_FLOOR_PP = 0.01
TEST_MIN_SHARE = 0.001
MARKED_SOURCES = ("perfdiff-markers", "profiler-step", "annotation", "regex")  # test functions whose pooled mean own time ≥ 0.1 % of the pooled mean cycle

WAIT_PATTERNS = re.compile(
    r"(Synchronize|cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize|cudaStreamWaitEvent|"
    r"hipDeviceSynchronize|hipStreamSynchronize|hipEventSynchronize|"
    r"^(poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|futex|pthread_cond_wait|pthread_cond_timedwait|"
    r"pthread_join|sem_wait|sem_timedwait|nanosleep|clock_nanosleep|usleep|sleep|wait|waitpid)$)")


def is_wait(name: str, kind: str) -> bool:
    """A wait spends its time waiting for something else: a symptom, not a cause (STATS.md)."""
    if kind not in ("api", "host", "cpu"):
        return False
    if kind == "host" and name in ("runq", "blocked", "iowait", "oncpu"):
        return False
    return bool(WAIT_PATTERNS.search(name))


@dataclass
class RunSummary:
    """One side's cycles and provenance."""

    name: str
    path: str
    n_cycles: int
    cycle_source: str
    cycle_detail: str
    dropped_cycles: int
    mean_us: float
    median_us: float
    p95_us: float
    traced_s: float
    status: str
    dur_us: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    notes: list[str] = field(default_factory=list)


@dataclass
class FunctionStats:
    """One (function, device): own time, β, calls, and their tests."""

    name: str
    device: str
    kind: str
    wait: bool
    presence: str  # both | new | vanished
    tested: bool
    t_n_us: float
    t_a_us: float
    tau_pp: float
    t: stats.TwoSample | None
    q_t: float
    beta_n: float
    beta_a: float
    d_beta: float
    beta: stats.TwoSample | None
    q_beta: float
    presence_n: float  # share of cycles where it ran
    presence_a: float
    calls_n: float  # mean calls per cycle
    calls_a: float
    per_call_n_us: float  # mean own time per call
    per_call_a_us: float
    sampled: bool = False  # a host state read as a counter per interval: rows are not calls
    incl_n_us: float = float("nan")  # inclusive time per cycle (CPU ranges: children included)
    incl_a_us: float = float("nan")
    fragile: bool = False
    beta_vs_common: float = float("nan")


@dataclass
class MuStats:
    """μ of one func-scope metric while one function ran."""

    func: int  # index into Comparison.functions
    metric: str
    device: str
    unit: str
    res: stats.TwoSample
    z_log: float
    q: float = float("nan")
    fragile: bool = False


@dataclass
class ContextStats:
    """A ctx-scope metric: the run-level signal, compared on its samples."""

    metric: str
    device: str
    unit: str
    res: stats.TwoSample
    z_log: float
    median_interval_ms_n: float
    median_interval_ms_a: float
    aliases: list[str] = field(default_factory=list)
    q: float = float("nan")
    fragile: bool = False


@dataclass
class DetailRow:
    """A row of the detailed table: a function, optionally paired with a func-scope metric."""

    func: int
    mu: int | None  # index into Comparison.mu, or None
    score: float
    legacy_score: float


@dataclass
class CommonMode:
    device: str
    ratio: float
    k: int
    iqr_log: float
    triggered: bool


@dataclass
class Comparison:
    """Everything the report shows, unformatted."""

    normal: RunSummary
    abnormal: RunSummary
    alpha: float
    cycle_test: stats.TwoSample
    cycle_ks: float
    quantiles_n: dict[str, float]
    quantiles_a: dict[str, float]
    functions: list[FunctionStats]
    mu: list[MuStats]
    context: list[ContextStats]
    details: list[DetailRow]
    common_modes: list[CommonMode]
    constants: list[str]
    aliases: dict[str, list[str]]
    comparability: list[str]
    warnings: list[str]
    untested: list[int]
    scope: dict[str, str]  # "metric@device" -> func | ctx
    n_tests_t: int
    min_p: float
    cycles_needed: int | None
    renames: list[tuple[str, str]] = field(default_factory=list)  # (normal name, abnormal name) matched
    events_n: list[dict[str, Any]] = field(default_factory=list)  # timed events the collectors recorded
    events_a: list[dict[str, Any]] = field(default_factory=list)


def summarize_run(run: RunData, cycles: Cycles) -> RunSummary:
    dur = cycles.dur_ns.astype(np.float64) / NS_PER_US
    return RunSummary(
        name=run.name, path=run.path, n_cycles=cycles.n, cycle_source=cycles.source,
        cycle_detail=cycles.detail, dropped_cycles=cycles.dropped,
        mean_us=float(dur.mean()), median_us=float(np.median(dur)),
        p95_us=float(np.quantile(dur, 0.95)),
        traced_s=float((cycles.end_ns[-1] - cycles.start_ns[0]) / 1e9),
        status=str(run.manifest.get("status", "unknown")), dur_us=dur, notes=list(run.notes))


RENAME_MIN_RATIO = 0.85
RENAME_MAX_CANDIDATES = 300


def _align(mn: CycleMatrix, ma: CycleMatrix) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Union of the two runs' function keys; index arrays into each (-1 = absent).

    A CPU-side range present in one run only is matched with its near-identical counterpart
    in the other (the same step under another class name, e.g. a DataLoader iterator that
    became multi-process), so its change shows as one row rather than vanished + new.
    Returns the matched (normal name, abnormal name) pairs too.
    """
    kn = list(map(tuple, mn.keys[["name", "device", "kind"]].to_numpy().tolist()))
    ka = list(map(tuple, ma.keys[["name", "device", "kind"]].to_numpy().tolist()))
    pos_n = {k: i for i, k in enumerate(kn)}
    pos_a = {k: i for i, k in enumerate(ka)}
    renames = _match_renamed([k for k in kn if k not in pos_a], [k for k in ka if k not in pos_n])
    for old, new in renames:  # the abnormal side's row is read under the normal side's key
        pos_a[old] = pos_a.pop(new)
    union = sorted(set(pos_n) | set(pos_a))
    idx_n = np.array([pos_n.get(k, -1) for k in union], dtype=np.int64)
    idx_a = np.array([pos_a.get(k, -1) for k in union], dtype=np.int64)
    names = {old: new[0] for old, new in renames}
    union = [(f"{k[0]} ⇄ {names[k]}", k[1], k[2]) if k in names else k for k in union]
    return union, idx_n, idx_a, [(old[0], new[0]) for old, new in renames]


def _match_renamed(vanished: list[tuple], new: list[tuple]) -> list[tuple[tuple, tuple]]:
    """Mutual best matches (difflib ratio ≥ 0.85) between vanished and new CPU ranges."""
    import difflib

    v = [k for k in vanished if k[2] == "cpu"][:RENAME_MAX_CANDIDATES]
    w = [k for k in new if k[2] == "cpu"][:RENAME_MAX_CANDIDATES]
    if not v or not w:
        return []
    score = np.zeros((len(v), len(w)))
    for i, a in enumerate(v):
        sm = difflib.SequenceMatcher(None, a[0], autojunk=False)
        for j, b in enumerate(w):
            if a[1] == b[1]:
                sm.set_seq2(b[0])
                score[i, j] = sm.ratio()
    out = []
    for i in range(len(v)):
        j = int(np.argmax(score[i]))
        if score[i, j] >= RENAME_MIN_RATIO and int(np.argmax(score[:, j])) == i:
            out.append((v[i], w[j]))
    return out


def _sampled(m: CycleMatrix, i: int) -> bool:
    return bool(i >= 0 and m.keys["sampled"].iloc[i])


def _total(v: np.ndarray, i: int) -> float:
    """Entry i of a per-function total, 0 when i is -1 (function absent in that run)."""
    return float(v[i]) if i >= 0 else 0.0


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


# The per-function tests' inputs, set before a fork pool starts so that its workers inherit
# them (with a million cycles a side, the matrices are hundreds of MB: never pickled).
_FUNCTION_TEST_DATA: tuple | None = None


def _function_tests(f: int, alpha: float) -> tuple[stats.TwoSample, stats.TwoSample]:
    """(time per cycle, share of the cycle) tests of aligned function `f` (STATS.md)."""
    assert _FUNCTION_TEST_DATA is not None
    mn, ma, idx_n, idx_a, Dn, Da = _FUNCTION_TEST_DATA
    tn = _row(mn.own_ns, idx_n[f], len(Dn)) / NS_PER_US
    ta = _row(ma.own_ns, idx_a[f], len(Da)) / NS_PER_US
    return (stats.compare_samples(ta, tn, floor=T_FLOOR_US, alpha=alpha),
            stats.compare_samples(100.0 * ta * NS_PER_US / Da, 100.0 * tn * NS_PER_US / Dn,
                                  floor=BETA_FLOOR_PP, alpha=alpha))


class _FunctionTests:
    """The per-function tests, started at once and waited for with `result`: in a pool of
    forked processes when the runs are long (the rest of the comparison goes on meanwhile, so
    both cores stay busy), else serially inside `result`.  `close` stops a pool not waited for."""

    def __init__(self, tested: list[int], data: tuple, alpha: float):
        global _FUNCTION_TEST_DATA
        self.tested, self.data, self.alpha = tested, data, alpha
        self.pool: Any = None
        self.futures: list[Any] = []
        Kn, Ka = len(data[4]), len(data[5])
        workers = min(os.cpu_count() or 1, 8, len(tested))
        if workers > 1 and Kn + Ka >= PARALLEL_MIN_CYCLES:
            self.pool = _fork_pool(workers)
        if self.pool is not None:
            # The workers are forked at the first submit and inherit the data (never pickled).
            _FUNCTION_TEST_DATA = data
            try:
                self.futures = [self.pool.submit(_function_tests, f, alpha) for f in tested]
            except (OSError, RuntimeError):  # no fork now (EAGAIN, ENOMEM): in `result`, serially
                self.close()
                self.futures = []

    def result(self) -> dict[int, tuple]:
        """{f: (t test, β test)} of the tested functions."""
        global _FUNCTION_TEST_DATA
        from concurrent.futures.process import BrokenProcessPool

        _FUNCTION_TEST_DATA = self.data
        try:
            if self.pool is not None:
                try:
                    return {f: fu.result() for f, fu in zip(self.tested, self.futures, strict=True)}
                except BrokenProcessPool:  # a worker was killed (out of memory?): here instead
                    pass
            return {f: _function_tests(f, self.alpha) for f in self.tested}
        finally:
            self.close()

    def close(self) -> None:
        global _FUNCTION_TEST_DATA
        _FUNCTION_TEST_DATA = None
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


def compare_runs(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles, *,
                 alpha: float = 0.05, matrices: tuple[CycleMatrix, CycleMatrix] | None = None,
                 tests_started: Callable[[], None] | None = None) -> Comparison:
    """Compare `abnormal` against `normal` over their cycles (STATS.md).

    `matrices`: both runs' `attribute_activity` over these cycles when already computed
    (perfdiff.pair computes them beside the loading).  `tests_started`: called once the
    function tests' process pool is forked (or known to run serially): where the caller may
    start threads of its own that overlap the rest (a fork while they run is avoided)."""
    sn, sa = summarize_run(normal, cn), summarize_run(abnormal, ca)
    Dn, Da = cn.dur_ns.astype(np.float64), ca.dur_ns.astype(np.float64)
    mn, ma = matrices or (attribute_activity(normal, cn), attribute_activity(abnormal, ca))
    keys, idx_n, idx_a, renames = _align(mn, ma)
    Kn, Ka = cn.n, ca.n
    pooled_cycle_us = (Dn.sum() + Da.sum()) / (Kn + Ka) / NS_PER_US
    mean_da_us = Da.mean() / NS_PER_US

    # Per function and run: (Σ own ns, Σ own/cycle duration, cycles it ran in), one pass over
    # its row each (a million cycles a side: no per-cycle vector is built here).
    inv_n, inv_a = 1.0 / Dn, 1.0 / Da
    sums_n = [_row_sums(mn.own_ns, i, inv_n) for i in idx_n]
    sums_a = [_row_sums(ma.own_ns, i, inv_a) for i in idx_a]
    # Which functions are tested: those holding at least TEST_MIN_SHARE of the pooled cycle.
    own_sum = [(sums_n[f][0] + sums_a[f][0]) / NS_PER_US for f in range(len(keys))]
    to_test = [f for f in range(len(keys)) if own_sum[f] / (Kn + Ka) >= TEST_MIN_SHARE * pooled_cycle_us]
    # Largest first (a test's cost grows with the cycles it is present in): a pool's workers
    # then finish together.
    to_test.sort(key=lambda f: -(sums_n[f][2] + sums_a[f][2]))
    # The function tests run in a pool while the rest is computed; their results join at the q values.
    pending = _FunctionTests(to_test, (mn, ma, idx_n, idx_a, Dn, Da), alpha)
    try:
        if tests_started is not None:
            tests_started()
        tested_set = set(to_test)

        functions: list[FunctionStats] = []
        for f, (name, device, kind) in enumerate(keys):
            (own_n, share_n, ran_n), (own_a, share_a, ran_a) = sums_n[f], sums_a[f]
            tn_mean, ta_mean = own_n / Kn / NS_PER_US, own_a / Ka / NS_PER_US  # µs per cycle
            bn_mean, ba_mean = 100.0 * share_n / Kn, 100.0 * share_a / Ka  # % of the cycle
            cn_sum, ca_sum = _total(mn.calls_total, idx_n[f]), _total(ma.calls_total, idx_a[f])
            tested = f in tested_set
            presence = "both" if idx_n[f] >= 0 and idx_a[f] >= 0 else ("new" if idx_n[f] < 0 else "vanished")
            functions.append(FunctionStats(
                name=name, device=device, kind=kind, wait=is_wait(name, kind), presence=presence,
                tested=bool(tested),
                t_n_us=tn_mean, t_a_us=ta_mean,
                tau_pp=100.0 * (ta_mean - tn_mean) / mean_da_us,
                t=None, q_t=float("nan"),
                beta_n=bn_mean, beta_a=ba_mean,
                d_beta=ba_mean - bn_mean, beta=None, q_beta=float("nan"),
                presence_n=ran_n / Kn, presence_a=ran_a / Ka,
                calls_n=float(cn_sum / Kn), calls_a=float(ca_sum / Ka),
                per_call_n_us=own_n / NS_PER_US / cn_sum if cn_sum else float("nan"),
                per_call_a_us=own_a / NS_PER_US / ca_sum if ca_sum else float("nan"),
                incl_n_us=_total(mn.incl_total_ns, idx_n[f]) / Kn / NS_PER_US,
                incl_a_us=_total(ma.incl_total_ns, idx_a[f]) / Ka / NS_PER_US,
                sampled=bool(_sampled(mn, idx_n[f]) or _sampled(ma, idx_a[f])),
            ))
        tested_idx = [i for i, fs in enumerate(functions) if fs.tested]
        untested = [i for i, fs in enumerate(functions) if not fs.tested]

        common = _common_modes(functions, alpha)
        warnings: list[str] = []
        # --- metrics: scope, aliases, constants
        ser_n, ser_a = sample_series(normal), sample_series(abnormal)
        aliases, alias_of, constants = _aliases_and_constants(ser_n, ser_a)
        min_cycle_ns = min(float(np.median(Dn)), float(np.median(Da)))
        scope: dict[str, str] = {}
        mu_rows: list[MuStats] = []
        ctx_rows: list[ContextStats] = []
        dev_rows: dict[str, tuple[DeviceRows | None, DeviceRows | None]] = {}
        mu_jobs: list[tuple] = []
        mu_cache: dict = {}
        for key in sorted(set(ser_n) & set(ser_a)):
            metric, device = key
            label = f"{metric}@{device}"
            if label in alias_of or metric in constants.get(device, set()):
                continue
            s_n, s_a = ser_n[key], ser_a[key]
            interval = max(s_n.median_interval_ns, s_a.median_interval_ns)
            sc = "func" if interval <= 0.5 * min_cycle_ns else "ctx"
            scope[label] = sc
            res_floor = stats.resolution(s_n.value, s_a.value)
            res_floor = 0.0 if not math.isfinite(res_floor) else res_floor
            if sc == "func":
                if device not in dev_rows:
                    dev_rows[device] = (device_rows(normal, mn, device, Kn), device_rows(abnormal, ma, device, Ka))
                rn, ra = dev_rows[device]
                mu_n = mu_matrix(rn, s_n, len(mn.keys), Kn, mu_cache)
                mu_a = mu_matrix(ra, s_a, len(ma.keys), Ka, mu_cache)
                mu_jobs.extend(_mu_jobs(mu_n, mu_a, idx_n, idx_a, s_n, functions, tested_idx, res_floor))
            else:
                res = stats.compare_samples(s_a.value, s_n.value, floor=res_floor, alpha=alpha)
                ctx_rows.append(ContextStats(
                    metric=metric, device=device, unit=metric_unit(metric), res=res,
                    z_log=_z_log(s_a.value, s_n.value, res_floor),
                    median_interval_ms_n=s_n.median_interval_ns / 1e6,
                    median_interval_ms_a=s_a.median_interval_ns / 1e6,
                    aliases=aliases.get(label, [])))
        mu_rows = _run_mu_tests(mu_jobs, alpha)
        for key in sorted(set(ser_n) ^ set(ser_a)):
            side = "normal" if key in ser_n else "abnormal"
            warnings.append(f"metric {key[0]} on {key[1]} was sampled in the {side} run only; not compared")
        # Everything left that does not need the function tests, while the pool finishes them.
        cycle_test = stats.compare_samples(sa.dur_us, sn.dur_us, floor=T_FLOOR_US)
        cycle_ks = stats.ks_statistic(sa.dur_us, sn.dur_us)
        quantiles = stats.quantile_table(sn.dur_us), stats.quantile_table(sa.dur_us)
        comparable = comparability(normal, abnormal, cn, ca)
        for f, (t_res, b_res) in pending.result().items():
            functions[f].t, functions[f].beta = t_res, b_res
        _assign_q(functions, tested_idx, mu_rows, ctx_rows, alpha)

        details = _detail_rows(functions, mu_rows)
        ratio = float(np.median(Da)) / float(np.median(Dn))
        if not 0.5 <= ratio <= 2.0:
            head = f"median cycle times differ by ×{ratio:.2f} ({sn.median_us / 1e3:.3g} ms vs {sa.median_us / 1e3:.3g} ms)"
            if cn.source == ca.source and cn.source in MARKED_SOURCES:
                warnings.append(f"{head}: both runs' cycles come from the same kind of markers ({cn.source}), so "
                                "this is probably a real change; if the markers changed meaning, the per-cycle "
                                "numbers do not compare")
            else:
                warnings.append(f"{head}: the two runs were probably segmented differently; check the cycle "
                                "sources or choose cycles with --cycle / --window")
        m_tests = len(tested_idx)
        min_p = stats.min_attainable_p(Kn, Ka)
        needed = None
        reached = any(f.q_t <= alpha for f in functions if f.tested)
        if m_tests and min_p * m_tests > alpha and not reached:
            needed = stats.cycles_needed(m_tests, alpha)
        return Comparison(
            normal=sn, abnormal=sa, alpha=alpha,
            cycle_test=cycle_test, cycle_ks=cycle_ks, quantiles_n=quantiles[0], quantiles_a=quantiles[1],
            functions=functions, mu=mu_rows, context=ctx_rows, details=details, common_modes=common,
            constants=sorted(f"{m}@{d}" for d, ms in constants.items() for m in ms), aliases=aliases,
            comparability=comparable, warnings=warnings, renames=renames,
            untested=untested, scope=scope, n_tests_t=m_tests, min_p=min_p, cycles_needed=needed,
            events_n=_events(normal, cn), events_a=_events(abnormal, ca))
    finally:
        pending.close()


def _events(run: RunData, cycles: Cycles) -> list[dict[str, Any]]:
    """The manifest's timed events, with their time since the first cycle (s)."""
    out = []
    for e in run.manifest.get("events") or []:
        if isinstance(e, dict) and isinstance(e.get("t_ns"), (int, float)):
            out.append({**e, "t_s": (e["t_ns"] - int(cycles.start_ns[0])) / 1e9})
    return out


def _assign_q(functions: list[FunctionStats], tested_idx: list[int], mu_rows: list[MuStats],
              ctx_rows: list[ContextStats], alpha: float) -> None:
    """Benjamini–Hochberg over every test the report makes (own time, β, μ, context) at once.

    STATS.md defines one family per column group; controlling them separately lets a report
    of two same-distribution runs claim something in ≈ 12 % of cases (four families at 5 %
    each).  One family for the whole report keeps that under α (issue 2, null behaviour).
    """
    p = np.array([functions[i].t.p_mwu for i in tested_idx]
                 + [functions[i].beta.p_mwu for i in tested_idx]
                 + [r.res.p_mwu for r in mu_rows] + [r.res.p_mwu for r in ctx_rows], dtype=float)
    q = stats.bh_qvalues(p)
    m = len(tested_idx)
    for j, i in enumerate(tested_idx):
        fs = functions[i]
        fs.q_t, fs.q_beta = float(q[j]), float(q[m + j])
        fs.fragile = stats.is_fragile(fs.t.p_welch, fs.t.p_mwu, alpha)
    for r, qv in zip(list(mu_rows) + list(ctx_rows), q[2 * m:], strict=True):
        r.q = float(qv)
        r.fragile = stats.is_fragile(r.res.p_welch, r.res.p_mwu, alpha)


def _z_log(a: np.ndarray, n: np.ndarray, res: float) -> float:
    """Z(log μ) with ε = max(resolution, 1 % of the median positive μ) (STATS.md)."""
    eps = stats.log_epsilon(a, n)
    eps = eps if math.isfinite(eps) and eps > 0 else 1e-12  # all values 0: any tiny ε keeps ln finite
    return stats.z_log(a, n, eps=eps)


def _mu_jobs(mu_n: np.ndarray, mu_a: np.ndarray, idx_n: np.ndarray, idx_a: np.ndarray, s_n: SeriesInfo,
             functions: list[FunctionStats], tested_idx: list[int], res_floor: float) -> list[tuple]:
    """One μ test per tested function on the series' device: (f, metric, device, a, n, floor)."""
    jobs = []
    for f in tested_idx:
        if functions[f].device != s_n.device:
            continue
        vn = mu_n[idx_n[f]] if idx_n[f] >= 0 else np.zeros(0)
        va = mu_a[idx_a[f]] if idx_a[f] >= 0 else np.zeros(0)
        vn, va = vn[np.isfinite(vn)], va[np.isfinite(va)]
        if len(vn) == 0 and len(va) == 0:
            continue
        jobs.append((f, s_n.metric, s_n.device, va, vn, res_floor))
    return jobs


def _mu_test(job: tuple, alpha: float) -> tuple[stats.TwoSample, float]:
    _, _, _, va, vn, floor = job
    return stats.compare_samples(va, vn, floor=floor, alpha=alpha), _z_log(va, vn, floor)


PARALLEL_MIN_PAIRS = 20_000_000  # Σ n_N·n_A over the μ tests above which a process pool pays off
PARALLEL_MIN_CYCLES = 200_000  # cycles of both runs above which the function tests use a pool


def _fork_pool(workers: int) -> Any:
    """A pool of `workers` forked processes (which inherit this process's memory: the big
    inputs are never pickled), or None where there is no fork (then run serially)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    try:
        ctx = mp.get_context("fork")
    except ValueError:
        return None
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def _fork_map(fn: Any, items: list, workers: int, chunksize: int) -> list | None:
    """[fn(x) for x in items] in a pool of forked processes (see _fork_pool); None where there
    is no fork (run serially)."""
    pool = _fork_pool(workers)
    if pool is None:
        return None
    with pool:
        return list(pool.map(fn, items, chunksize=chunksize))


def _run_mu_tests(jobs: list[tuple], alpha: float) -> list[MuStats]:
    """Run the μ tests, on every core when there are many (each is independent)."""
    work = sum(len(j[3]) * len(j[4]) for j in jobs)
    workers = min(os.cpu_count() or 1, 8)
    if workers > 1 and work >= PARALLEL_MIN_PAIRS and len(jobs) >= 4 * workers:
        results = _fork_map(functools.partial(_mu_test, alpha=alpha), jobs, workers,
                            max(1, len(jobs) // (8 * workers)))
        if results is not None:
            return [MuStats(func=j[0], metric=j[1], device=j[2], unit=metric_unit(j[1]), res=r, z_log=z)
                    for j, (r, z) in zip(jobs, results, strict=True)]
    out = []
    for j in jobs:
        r, z = _mu_test(j, alpha)
        out.append(MuStats(func=j[0], metric=j[1], device=j[2], unit=metric_unit(j[1]), res=r, z_log=z))
    return out


def _aliases_and_constants(ser_n: dict, ser_a: dict) -> tuple[dict[str, list[str]], set[str], dict[str, set[str]]]:
    """Metrics with identical series in both runs merge; metrics constant in both runs leave."""
    common = sorted(set(ser_n) & set(ser_a))
    constants: dict[str, set[str]] = {}
    by_device: dict[str, list[tuple[str, str]]] = {}
    for key in common:
        vn, va = ser_n[key].value, ser_a[key].value
        if len(vn) and len(va) and np.all(vn == vn[0]) and np.all(va == vn[0]):
            constants.setdefault(key[1], set()).add(key[0])
            continue
        by_device.setdefault(key[1], []).append(key)
    aliases: dict[str, list[str]] = {}
    alias_of: set[str] = set()
    for device, keys in by_device.items():
        for i, k1 in enumerate(keys):
            l1 = f"{k1[0]}@{device}"
            if l1 in alias_of:
                continue
            for k2 in keys[i + 1:]:
                l2 = f"{k2[0]}@{device}"
                if l2 in alias_of:
                    continue
                if _same(ser_n[k1], ser_n[k2]) and _same(ser_a[k1], ser_a[k2]):
                    aliases.setdefault(l1, []).append(k2[0])
                    alias_of.add(l2)
    return aliases, alias_of, constants


def _same(x: SeriesInfo, y: SeriesInfo) -> bool:
    return (len(x.value) == len(y.value) and np.array_equal(x.t0, y.t0)
            and np.array_equal(x.value, y.value))


def _common_modes(functions: list[FunctionStats], alpha: float) -> list[CommonMode]:
    out = []
    devices = sorted({f.device for f in functions if f.kind in GPU_KINDS})
    for device in devices:
        idx = [i for i, f in enumerate(functions) if f.device == device and f.kind in GPU_KINDS]
        bn = np.array([functions[i].beta_n for i in idx])
        ba = np.array([functions[i].beta_a for i in idx])
        cm = stats.common_mode_detail(bn, ba, min_beta=0.05)
        if cm is None:
            continue
        out.append(CommonMode(device=device, ratio=cm.ratio, k=cm.k, iqr_log=cm.iqr_log, triggered=cm.triggered))
        if cm.triggered:
            for i in idx:
                f = functions[i]
                f.beta_vs_common = f.beta_a - cm.ratio * f.beta_n
    return out


def _detail_rows(functions: list[FunctionStats], mu_rows: list[MuStats]) -> list[DetailRow]:
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
    rows.sort(key=lambda r: (-_nz(r.score), -abs(functions[r.func].tau_pp), functions[r.func].name,
                             mu_rows[r.mu].metric if r.mu is not None else ""))
    return rows


def _nz(x: float) -> float:
    return 0.0 if not math.isfinite(x) else x


def comparability(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles) -> list[str]:
    """Differences between the runs that can explain a change by themselves."""
    out: list[str] = []

    def gpu_desc(run: RunData) -> list[str]:
        return [str(g.get("name", "?")) for g in run.manifest.get("gpus", []) or []]

    gn, ga = gpu_desc(normal), gpu_desc(abnormal)
    if gn != ga:
        out.append(f"GPU model differs: {', '.join(gn) or 'unknown'} vs {', '.join(ga) or 'unknown'}")
    for key, label in (("driver", "GPU driver"), ("max_sm_clock_mhz", "max SM clock (MHz)"),
                       ("power_limit_w", "power limit (W)")):
        vn = [g.get(key) for g in normal.manifest.get("gpus", []) or []]
        va = [g.get(key) for g in abnormal.manifest.get("gpus", []) or []]
        if any(v is not None for v in vn + va) and vn != va:
            out.append(f"{label} differs: {vn} vs {va}")
    hn, ha = normal.manifest.get("host", {}) or {}, abnormal.manifest.get("host", {}) or {}
    for key, label in (("cpu_model", "CPU model"), ("cores", "CPU cores"), ("kernel", "OS kernel")):
        if hn.get(key) != ha.get(key) and (hn.get(key) is not None or ha.get(key) is not None):
            out.append(f"{label} differs: {hn.get(key, 'unknown')} vs {ha.get(key, 'unknown')}")
    if cn.source != ca.source:
        out.append(f"cycle source differs: {cn.source} ({cn.detail}) vs {ca.source} ({ca.detail})")
    sn = (normal.manifest.get("source") or {}).get("kind")
    sa = (abnormal.manifest.get("source") or {}).get("kind")
    if sn != sa:
        out.append(f"the runs come from different sources: {sn} vs {sa}")
    return out
