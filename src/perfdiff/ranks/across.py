"""Each rank's normal run against its abnormal run, and what changed across ranks.

Per rank pair, every function that matters (pooled mean own time ≥ 0.1 % of the pooled mean
cycle, collectives and waits aside) is tested on its own time per cycle as for a pair
(`stats.compare_samples`); one Benjamini–Hochberg family holds every (function, rank) test.
A function changed on a rank when it is significant (q ≤ α) and material (|τ| ≥ 1 pp, small
effect size at least, as for a pair); findings group the ranks where it changed in one
direction: every rank compared, or the ranks named (docs/STATISTICS.md, ranks).  A host state
(`oncpu`, `blocked` …) grows with the cycle by itself: as for a pair, it is tested only where
its share of the cycle moved too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfdiff import stats
from perfdiff.analyze.findings import host_share_moved
from perfdiff.analyze.gate import cycle_stats_of
from perfdiff.analyze.thresholds import DEFAULT, Thresholds
from perfdiff.model.schema import Kind
from perfdiff.ranks.part import RankPart, cycle_columns, excess_kind
from perfdiff.ranks.records import (CollectiveTime, RankCycle, RankFinding, RankRow, RankVerdict, RankVerdictCode,
                                    ScopeCode, Straggler, StragglerCode)

__all__ = ["MATERIAL_CYCLE_PCT", "NS_PER_US", "RankTest", "findings_across", "job_cycle", "job_cycle_per_iteration",
           "rank_rows", "rank_tests", "rank_verdict", "with_q"]

NS_PER_US = 1e3
VERDICT_FINDINGS = 5  # findings the verdict names; the report lists them all
MATERIAL_CYCLE_PCT = DEFAULT.material_cycle_pct  # a job cycle that changed by less is no change to explain
# The decisions' thresholds are the comparison's (perfdiff.analyze.Thresholds), handed down by
# the rank pipeline.


@dataclass(frozen=True)
class RankTest:
    """One (function, rank) test: Δ mean own time (µs per cycle), τ (pp), p, Cliff's δ; q is
    filled in once every test of every rank is known."""

    rank: int
    function: str
    kind: str
    delta_us: float
    tau_pp: float
    p: float
    cliffs_delta: float
    q: float = math.nan

    def changed(self, th: Thresholds) -> bool:
        """Significant at `th`'s α and material by its rule for a function's change."""
        return math.isfinite(self.q) and self.q <= th.alpha and th.material(self.tau_pp, self.cliffs_delta)


def _own(p: RankPart, iters: np.ndarray) -> tuple[dict[tuple[str, str], np.ndarray], np.ndarray]:
    cols = cycle_columns(p, iters)
    own = p.own_ns[:, cols] / NS_PER_US  # one copy of every function's row, not one a function
    rows = dict(zip(zip(p.names, p.kinds, strict=True), own, strict=True))
    return rows, p.dur_ns[cols].astype(np.float64) / NS_PER_US


def rank_tests(pn: RankPart, pa: RankPart, iters_n: np.ndarray, iters_a: np.ndarray, th: Thresholds) -> list[RankTest]:
    """The tests of one rank pair over each run's common iterations (q not yet set)."""
    on, dn = _own(pn, iters_n)
    oa, da = _own(pa, iters_a)
    pooled_cycle = (dn.sum() + da.sum()) / (len(dn) + len(da))
    mean_da = float(da.mean())
    keys, rows_n, rows_a = [], [], []
    for key in sorted(set(on) | set(oa)):
        if excess_kind(*key) is None:
            continue
        tn, ta = on.get(key, np.zeros(len(dn))), oa.get(key, np.zeros(len(da)))
        if (tn.sum() + ta.sum()) / (len(dn) + len(da)) < th.test_min_share * pooled_cycle:
            continue
        if key[1] == Kind.HOST and not _share_moved(tn / dn, ta / da, th, 1.0 if da.mean() >= dn.mean() else -1.0):
            continue
        keys.append(key)
        rows_n.append(tn)
        rows_a.append(ta)
    if not keys:
        return []
    # Every function of the rank has the same cycles: one U test of all its rows at once.
    ta, tn = np.array(rows_a), np.array(rows_n)
    p, cliffs = stats.u_test_rows(ta, tn, alpha=th.alpha)
    delta = ta.mean(axis=1) - tn.mean(axis=1)
    return [RankTest(pn.input.rank, key[0], key[1], float(delta[i]), 100.0 * float(delta[i]) / mean_da, float(p[i]),
                     float(cliffs[i])) for i, key in enumerate(keys)]


def _share_moved(bn: np.ndarray, ba: np.ndarray, th: Thresholds, direction: float) -> bool:
    """Whether a host state's share of the cycle moved with the rank's cycle (`direction`: +1
    where it grew): significantly (U test p ≤ α; the pair's q ≤ α has no family here before
    the tests are chosen) and by at least Thresholds.host_share_min_rel of its normal share, as for
    a pair (perfdiff.analyze.findings.host_share_moved)."""
    p, _ = stats.u_test_rows(ba[None, :], bn[None, :], alpha=th.alpha)
    mn, d = float(bn.mean()), float(ba.mean()) - float(bn.mean())
    return bool(p[0] <= th.alpha) and host_share_moved(d, mn, direction, th, tiny=1e-12)


def with_q(tests: list[RankTest]) -> list[RankTest]:
    """The tests with their q-values, one BH family over every rank."""
    q = stats.bh_qvalues([t.p for t in tests])
    # The constructor, not dataclasses.replace: at 1,024 ranks there are 100,000 tests.
    return [RankTest(rank=t.rank, function=t.function, kind=t.kind, delta_us=t.delta_us, tau_pp=t.tau_pp, p=t.p,
                     cliffs_delta=t.cliffs_delta, q=float(v)) for t, v in zip(tests, q, strict=True)]


def rank_rows(pairs: list[tuple[RankPart, RankPart]], iters: tuple[np.ndarray, np.ndarray], tests: list[RankTest],
              stragglers: tuple[Straggler, Straggler], th: Thresholds) -> list[RankRow]:
    """The rank table: per rank its median cycles, top cause and wait in collectives."""
    waits = [{w.rank: w.wait_us for w in s.waits} for s in stragglers]
    by_rank: dict[int, list[RankTest]] = {}
    for t in tests:
        by_rank.setdefault(t.rank, []).append(t)
    rows = []
    for pn, pa in pairs:
        r = pn.input.rank
        mn = float(np.median(pn.dur_ns[cycle_columns(pn, iters[0])])) / NS_PER_US
        ma = float(np.median(pa.dur_ns[cycle_columns(pa, iters[1])])) / NS_PER_US
        sign = 1.0 if ma >= mn else -1.0
        moved = [t for t in by_rank.get(r, []) if t.changed(th) and t.tau_pp * sign > 0]
        top = max(moved, key=lambda t: abs(t.tau_pp), default=None)
        wn, wa = waits[0].get(r, math.nan), waits[1].get(pa.input.rank, math.nan)
        # A victim's cycle grows by its wait for the straggler: say so rather than show no cause,
        # or a function of its own that moved less than the wait grew.
        grew = wa - wn
        waited = (ma > mn and grew >= th.waited_share * (ma - mn)
                  and (top is None or grew > abs(top.delta_us)))
        rows.append(RankRow(r, len(iters[0]), len(iters[1]), mn, ma,
                            cause=top.function if top else None, cause_kind=top.kind if top else None,
                            cause_tau_pp=top.tau_pp if top else math.nan,
                            cause_delta_us=top.delta_us if top else math.nan,
                            wait_n_us=wn, wait_a_us=wa, waited=bool(waited)))
    return rows


def findings_across(tests: list[RankTest], world: int, th: Thresholds) -> list[RankFinding]:
    """One finding per (function, direction) that changed on at least one rank, the largest
    median τ first."""
    groups: dict[tuple[str, str, bool], list[RankTest]] = {}
    for t in tests:
        if t.changed(th):
            groups.setdefault((t.function, t.kind, t.tau_pp > 0), []).append(t)
    out = []
    for (fn, kind, _), ts in groups.items():
        ranks = tuple(sorted(t.rank for t in ts))
        code = ScopeCode.ALL_RANKS if len(ranks) == world else ScopeCode.SOME_RANKS
        out.append(RankFinding(code, fn, kind, ranks, world, float(np.median([t.delta_us for t in ts])),
                               float(np.median([t.tau_pp for t in ts])), float(max(t.q for t in ts))))
    out.sort(key=lambda f: (-abs(f.tau_pp) * len(f.ranks), f.function))
    return out


def rank_verdict(findings: list[RankFinding], stragglers: tuple[Straggler, Straggler], *,
                 compared: tuple[int, ...], collectives: CollectiveTime | None = None,
                 cycle: RankCycle | None = None, left_out: tuple[int, ...] = (),
                 uncut: tuple[int, ...] = (), th: Thresholds = DEFAULT) -> list[RankVerdict]:
    """What changed across the `compared` ranks: a new straggler in the abnormal run first (or
    the normal run's gone), then
    a change of the collectives' own time on every rank, then the findings (all ranks, or the
    ranks named).  With none of these: the job's cycle changed unexplained when it changed
    significantly and materially, else no change.  `left_out`: the abnormal run's ranks not
    compared; `uncut`: those of them whose rank or pair could not be cut by the plan."""
    cut_out = set(uncut)
    others = {"others": tuple(left_out), "uncut": tuple(r for r in left_out if r in cut_out)}
    out = []
    sn, sa = stragglers
    world = len(compared)
    if sa.code == StragglerCode.CULPRIT and not (sn.code == StragglerCode.CULPRIT and sn.culprit == sa.culprit
                                                 and not sa.skew_us > 2.0 * sn.skew_us):
        out.append(RankVerdict(RankVerdictCode.STRAGGLER, (int(sa.culprit),), len(sa.waits), excess=sa.excess,
                               size_us=_victims_wait_us(sa), **others))
    if sn.code == StragglerCode.CULPRIT and sa.code != StragglerCode.CULPRIT:
        out.append(RankVerdict(RankVerdictCode.STRAGGLER_GONE, (int(sn.culprit),), len(sn.waits), excess=sn.excess,
                               size_us=_victims_wait_us(sn)))
    if collectives is not None and collectives.changed:
        out.append(RankVerdict(RankVerdictCode.COLLECTIVES, tuple(compared), world, size_us=collectives.delta_us,
                               tau_pp=collectives.tau_pp, **others))
    for f in findings[:VERDICT_FINDINGS]:
        code = RankVerdictCode.ALL_RANKS if f.code == ScopeCode.ALL_RANKS else RankVerdictCode.SOME_RANKS
        out.append(RankVerdict(code, f.ranks, f.world, function=f.function, size_us=f.delta_us, tau_pp=f.tau_pp))
    if not out and cycle is not None and cycle.p <= th.alpha and abs(cycle.change_pct) >= th.material_cycle_pct:
        out.append(RankVerdict(RankVerdictCode.UNEXPLAINED, tuple(compared), world,
                               size_us=cycle.median_a_us - cycle.median_n_us, **others))
    if not out:
        out.append(RankVerdict(RankVerdictCode.NO_CHANGE, tuple(compared), world))
    return out


def _victims_wait_us(s: Straggler) -> float:
    """The median over the other ranks of their wait per cycle for the culprit (µs)."""
    others = [w.wait_us for w in s.waits if w.rank != s.culprit]
    return float(np.median(others)) if others else math.nan


def job_cycle_per_iteration(parts: list[RankPart], iters: np.ndarray) -> np.ndarray:
    """Per iteration of `iters`, the median over `parts` of their cycle time (µs)."""
    return np.median(np.stack([p.dur_ns[cycle_columns(p, iters)] for p in parts]), axis=0) / NS_PER_US


def job_cycle(pairs: list[tuple[RankPart, RankPart]], iters: tuple[np.ndarray, np.ndarray]) -> RankCycle:
    """The job's cycle time in each run (the median over ranks per iteration, see RankCycle)
    and the test of its change."""
    n = job_cycle_per_iteration([pn for pn, _ in pairs], iters[0])
    a = job_cycle_per_iteration([pa for _, pa in pairs], iters[1])
    mn, ma = float(np.median(n)), float(np.median(a))
    res = stats.compare_samples(a, n, floor=DEFAULT.t_floor_us)
    return RankCycle(mn, ma, 100.0 * (ma / mn - 1.0) if mn > 0 else math.nan, float(res.p_mwu), len(n), len(a),
                     stats=cycle_stats_of(n, a, DEFAULT.t_floor_us))
