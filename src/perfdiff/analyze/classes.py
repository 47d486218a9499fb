"""Step classes (docs/STATISTICS.md, "Step classes"): the kinds of step a run's cycles fall
into, by their function signature, and the two runs compared kind with kind.

A serving loop's decode steps and prefill steps do different work; pooled, a function's time
per cycle is a mixture whose spread hides a change in one kind and whose mean moves with the
mix.  The classes are the leaves of a binary partition of the cycles by *which functions ran*
(a regression tree on presence indicators, Breiman et al. 1984, grown best split first): a
split by function f's presence is made only where it separates the cycles' durations in both
runs — the correlation ratio η² (the between-groups share of the variance of ln cycle time,
Pearson 1905) at least ETA2_MIN in each run, the two groups' mean ln cycle times apart by at
least ln RATIO_MIN the same way in both runs — and leaves MIN_CLASS_CYCLES cycles of both runs
together, and MIN_CLASS_RUN of each run, on each side.  The same conditions on the same functions cut both runs, so a class is the same
kind of step in both (matched by signature).  A run whose cycles do one kind of work, or whose
kinds barely differ in duration, stays one class: nothing is split on noise.

Compared kind with kind, each tested function's own time and the cycle time are tested by the
stratified tests of perfdiff.stats.stratified, the mix held at both runs' pooled one; the mix
itself (each class's share of the steps) is tested on each run's 0/1 series of its cycles with
the dependence-robust two-sample test (perfdiff.stats.dependence).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from perfdiff import stats
from perfdiff.analyze.records import FunctionByClass, FunctionStats, StepClass, StepClasses
from perfdiff.model.schema import Kind
from perfdiff.stats.dependence import MIN_CYCLES
from perfdiff.stats.stratified import stratified

MIN_CLASS_CYCLES = 20  # cycles of both runs together a class needs …
MIN_CLASS_RUN = 3  # … and of each run (its mean and spread there; the dependence is the whole run's)
ETA2_MIN = 0.5  # a split explains at least half the variance of ln cycle time in each run …
RATIO_MIN = 1.2  # … and its two kinds' mean cycle times differ by at least this factor
MAX_CLASSES = 4
MARK_IN, MARK_OUT = 0.95, 0.05  # a class's mark ran in ≥ 95 % of its cycles and ≤ 5 % of the others
MAX_MARKS = 2
MIX_MIN_H = 0.2  # Cohen's (1988) "small" h: a change of mix that matters
NS_PER_US = 1e3

Leaf = tuple[np.ndarray, np.ndarray, tuple[tuple[int, bool], ...]]  # (cycles N, cycles A, path)


def _candidate(f: FunctionStats, kn: int, ka: int) -> bool:
    """Work of both runs that ran in some cycles and not in others, as many of each as a class
    needs; not a wait (a symptom), a host state or a sampled function."""
    if f.presence != "both" or f.wait or f.sampled or f.kind == Kind.HOST:
        return False
    ran_n, ran_a = round(f.presence_n * kn), round(f.presence_a * ka)
    return (min(ran_n, kn - ran_n, ran_a, ka - ran_a) >= MIN_CLASS_RUN
            and min(ran_n + ran_a, kn + ka - ran_n - ran_a) >= MIN_CLASS_CYCLES)


def _split_scores(pres: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row of `pres` (candidates × cycles of one run in a leaf): (cycles where it ran,
    η² of y between ran / did not, mean y where it ran − where it did not)."""
    n = y.size
    n1 = pres.sum(axis=1).astype(np.float64)
    n0 = n - n1
    s1 = pres.astype(np.float64) @ y
    with np.errstate(divide="ignore", invalid="ignore"):
        d = s1 / n1 - (y.sum() - s1) / n0
        total = float(((y - y.mean()) ** 2).sum())
        eta2 = np.where(total > 0, n1 * n0 / n * d * d / total, 0.0)
    return n1, np.nan_to_num(eta2), np.nan_to_num(d)


def _best_split(pres_n: np.ndarray, pres_a: np.ndarray, yn: np.ndarray, ya: np.ndarray,
                leaf: Leaf) -> tuple[float, int] | None:
    """(score, candidate) of the leaf's best admissible split, or None: score = the smaller η²
    of the two runs; ties to the earlier candidate (larger own time)."""
    cn, ca, _ = leaf
    n1n, eta_n, dn = _split_scores(pres_n[:, cn], yn[cn])
    n1a, eta_a, da = _split_scores(pres_a[:, ca], ya[ca])
    big = math.log(RATIO_MIN)
    ok = ((np.minimum(n1n, cn.sum() - n1n) >= MIN_CLASS_RUN) & (np.minimum(n1a, ca.sum() - n1a) >= MIN_CLASS_RUN)
          & (np.minimum(n1n + n1a, cn.sum() + ca.sum() - n1n - n1a) >= MIN_CLASS_CYCLES)
          & (np.abs(dn) >= big) & (np.abs(da) >= big) & (np.sign(dn) == np.sign(da)))
    score = np.where(ok, np.minimum(eta_n, eta_a), -1.0)
    best = int(np.argmax(score)) if score.size else -1
    return (float(score[best]), best) if best >= 0 and score[best] >= ETA2_MIN else None


def _partition(pres_n: np.ndarray, pres_a: np.ndarray, yn: np.ndarray, ya: np.ndarray,
               cand: list[int]) -> list[Leaf]:
    """The leaves of the presence tree, best split first, at most MAX_CLASSES."""
    leaves: list[Leaf] = [(np.ones(yn.size, bool), np.ones(ya.size, bool), ())]
    while len(leaves) < MAX_CLASSES:
        splits = []
        for i, leaf in enumerate(leaves):
            best = _best_split(pres_n, pres_a, yn, ya, leaf)
            if best is not None:
                splits.append((best[0], -i, best[1]))
        if not splits:
            break
        _, i, j = max(splits)
        i = -i
        cn, ca, path = leaves.pop(i)
        leaves[i:i] = [(cn & pres_n[j], ca & pres_a[j], (*path, (cand[j], True))),
                       (cn & ~pres_n[j], ca & ~pres_a[j], (*path, (cand[j], False)))]
    return leaves


def _marks(pres_n: np.ndarray, pres_a: np.ndarray, leaf: Leaf, cand: list[int]) -> tuple[int, ...]:
    """The candidates that ran in ≥ MARK_IN of the leaf's cycles and ≤ MARK_OUT of the others."""
    cn, ca, _ = leaf
    inside = (pres_n[:, cn].sum(axis=1) + pres_a[:, ca].sum(axis=1)) / (cn.sum() + ca.sum())
    out_n = max(int((~cn).sum() + (~ca).sum()), 1)
    outside = (pres_n[:, ~cn].sum(axis=1) + pres_a[:, ~ca].sum(axis=1)) / out_n
    return tuple(cand[j] for j in np.flatnonzero((inside >= MARK_IN) & (outside <= MARK_OUT))[:MAX_MARKS])


def _row(own: np.ndarray, i: int, k: int) -> np.ndarray:
    return np.asarray(own[i], dtype=np.float64) / NS_PER_US if i >= 0 else np.zeros(k)


def step_classes(own_n: np.ndarray, own_a: np.ndarray, idx_n: np.ndarray, idx_a: np.ndarray, dur_n_ns: np.ndarray,
                 dur_a_ns: np.ndarray, functions: list[FunctionStats] | tuple[FunctionStats, ...],
                 tested: list[int], alpha: float) -> StepClasses | None:
    """The runs' step classes and their comparison kind with kind; None where the cycles form
    one class, or a run has fewer than MIN_CYCLES cycles.  `own_n`, `own_a`: each run's own-time matrix (ns, function × cycle), `idx_n`,
    `idx_a`: each aligned function's row in it (−1: absent), `tested`: the functions tested."""
    kn, ka = len(dur_n_ns), len(dur_a_ns)
    if min(kn, ka) < MIN_CYCLES:  # too few to estimate a run's dependence: compared pooled, flagged there
        return None
    cand = sorted((f for f in tested if _candidate(functions[f], kn, ka)),
                  key=lambda f: (-(functions[f].t_n_us + functions[f].t_a_us), functions[f].name))
    if not cand:
        return None
    pres_n = np.asarray(own_n[idx_n[cand]]) > 0
    pres_a = np.asarray(own_a[idx_a[cand]]) > 0
    yn, ya = np.log(dur_n_ns.astype(np.float64)), np.log(dur_a_ns.astype(np.float64))
    leaves = _partition(pres_n, pres_a, yn, ya, cand)
    if len(leaves) < 2:
        return None
    leaves.sort(key=lambda leaf: -(int(leaf[0].sum()) + int(leaf[1].sum())))  # the largest kind first
    labels_n, labels_a = np.zeros(kn, np.int64), np.zeros(ka, np.int64)
    for k, (cn, ca, _) in enumerate(leaves):
        labels_n[cn], labels_a[ca] = k, k
    counts = np.array([cn.sum() + ca.sum() for cn, ca, _ in leaves], dtype=np.float64)
    w = counts / counts.sum()
    dn_us, da_us = dur_n_ns / NS_PER_US, dur_a_ns / NS_PER_US
    classes = _mix(leaves, [_marks(pres_n, pres_a, leaf, cand) for leaf in leaves], dn_us, da_us, alpha)
    cycle = stratified(da_us, dn_us, labels_a, labels_n, w)
    base = max(cycle.mean_n, cycle.mean_a)
    rows = []
    for f in tested:
        r = stratified(_row(own_a, int(idx_a[f]), ka), _row(own_n, int(idx_n[f]), kn), labels_a, labels_n, w)
        rows.append((f, r))
    q = stats.bh_qvalues(np.array([r.p_rank for _, r in rows], dtype=float)) if rows else np.zeros(0)
    funcs = tuple(FunctionByClass(func=f, t_n_us=r.mean_n, t_a_us=r.mean_a, diff_us=r.diff, lo_us=r.lo, hi_us=r.hi,
                                  p=r.p_rank, p_mean=r.p_mean, q=float(qv),
                                  tau_pp=100.0 * r.diff / base if base > 0 else math.nan,
                                  class_t_n_us=r.means_n, class_t_a_us=r.means_a, dependence=r.dependence,
                                  n_eff_n=r.n_eff_n, n_eff_a=r.n_eff_a)
                  for (f, r), qv in zip(rows, q, strict=True))
    return StepClasses(classes=classes, weights=tuple(float(x) for x in w), labels_n=labels_n, labels_a=labels_a,
                       cycle_n_us=cycle.mean_n, cycle_a_us=cycle.mean_a, change_us=cycle.diff,
                       change_lo_us=cycle.lo, change_hi_us=cycle.hi, p=cycle.p_rank, functions=funcs,
                       mix_changed=any(mix_moved(x, alpha) for x in classes))


def _mix(leaves: list[Leaf], marks: list[tuple[int, ...]], dn_us: np.ndarray, da_us: np.ndarray,
         alpha: float) -> tuple[StepClass, ...]:
    """Each class with its share of each run's steps and the test of the change of its share
    (the largest class aside: with two classes one test says it all), q by BH over those."""
    out, tests = [], []
    for k, (cn, ca, path) in enumerate(leaves):
        ind_n, ind_a = cn.astype(np.float64), ca.astype(np.float64)
        res = stats.compare_samples(ind_a, ind_n, floor=1.0 / max(cn.size, ca.size), alpha=alpha, time_ordered=True)
        pn, pa = float(ind_n.mean()), float(ind_a.mean())
        out.append(StepClass(path=path, marks=marks[k], n_n=int(cn.sum()), n_a=int(ca.sum()),
                             share_n_pct=100.0 * pn, share_a_pct=100.0 * pa,
                             median_n_us=float(np.median(dn_us[cn])), median_a_us=float(np.median(da_us[ca])),
                             share_test=res, h=2.0 * math.asin(math.sqrt(pa)) - 2.0 * math.asin(math.sqrt(pn))))
        if k:
            tests.append(res.p_welch)
    q = stats.bh_qvalues(np.array(tests, dtype=float))
    return tuple(x if k == 0 else replace(x, q=float(q[k - 1])) for k, x in enumerate(out))


def mix_moved(x: StepClass, alpha: float) -> bool:
    """A class's share of the steps moved significantly (q ≤ α) and materially (|h| ≥ MIX_MIN_H)."""
    return math.isfinite(x.q) and x.q <= alpha and abs(x.h) >= MIX_MIN_H

