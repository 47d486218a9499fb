"""Straggler analysis of one run: who reaches the collectives last, and why.

A collective (an NCCL kernel) ends on every rank at about the same instant: when the last
rank has arrived and the data moved.  So a rank's kernel lasts its wait for the last rank plus
the transfer, and the rank with the shortest kernel is the one that arrived last.  Per matched
collective (same iteration, same place among its cycle's collectives, on every rank):

    wait_r = dur_r − min over ranks of dur        (the start skew, read from the common end)

which needs no clock shared between hosts.  Per cycle the waits are summed; the culprit is the
rank that waits least.  It is named when the others wait materially longer than it (by at
least 2 % of the median cycle) and it is the last rank in more cycles than chance (binomial
test against 1/ranks, Bonferroni over the ranks); else the analysis says why it cannot name
one (docs/STATISTICS.md, stragglers).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from perfdiff.ranks.part import EXCESS_KINDS, RankPart, cycle_columns
from perfdiff.ranks.records import RankWait, Straggler, StragglerCode

__all__ = ["SKEW_FLOOR_US", "common_iterations", "straggler"]

SKEW_FLOOR_US = 50.0  # a culprit makes the others wait at least this much longer per cycle …
SKEW_MIN_SHARE = 0.02  # … and at least this share of the median cycle: else the ranks wait alike


def common_iterations(parts: list[RankPart]) -> np.ndarray:
    """The iterations every rank of a run has (sorted)."""
    common = parts[0].iteration
    for p in parts[1:]:
        common = np.intersect1d(common, p.iteration)
    return np.sort(common)


def straggler(parts: list[RankPart], side: str, alpha: float) -> Straggler:
    """The straggler analysis of one run's ranks (`parts`, any order)."""
    ranks = [p.input.rank for p in parts]
    iters = common_iterations(parts)
    frames = []
    for p in parts:
        it = p.iteration[p.coll_cycle]
        frames.append(pd.DataFrame({"rank": p.input.rank, "iter": it, "ord": p.coll_ord, "dur": p.coll_dur_ns}))
    coll = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(parts) < 2 or coll.empty:
        return _none(side, len(iters), "a single rank" if len(parts) < 2 else "no NCCL kernels")
    coll = coll[coll["iter"].isin(iters)]
    wide = coll.pivot_table(index=["iter", "ord"], columns="rank", values="dur", aggfunc="first").dropna()
    if wide.empty:
        return _none(side, len(iters), "no collective matched on every rank")
    wide = wide[ranks]
    d = wide.to_numpy(dtype=np.float64) / 1e3  # µs
    wait = d - d.min(axis=1, keepdims=True)
    per_cycle = pd.DataFrame(wait, index=wide.index.get_level_values("iter")).groupby(level=0).sum()
    wc = per_cycle.to_numpy()  # (cycles, ranks) µs of waiting
    med = np.median(wc, axis=0)
    skew = float(np.median(wc.max(axis=1) - wc.min(axis=1)))
    last = np.argmin(wc, axis=1)
    share = np.bincount(last, minlength=len(ranks)) / len(last)
    waits = tuple(RankWait(r, float(med[i]), float(share[i])) for i, r in enumerate(ranks))
    c = int(np.argmin(med))
    # The culprit is the best of len(ranks) candidates: Bonferroni over them.
    p_raw = binomtest(int((last == c).sum()), len(last), 1.0 / len(ranks), alternative="greater").pvalue
    p_last = float(min(1.0, len(ranks) * p_raw))
    per_cycle_coll = int(np.median(wide.groupby(level="iter").size()))
    cycle_us = float(np.median(np.concatenate([p.dur_ns[cycle_columns(p, iters)] for p in parts]))) / 1e3
    gap = float(np.median(np.delete(med, c))) - float(med[c])
    base = dict(side=side, cycles=len(wc), collectives=per_cycle_coll, skew_us=skew, p_last=p_last, waits=waits)
    if gap < max(SKEW_FLOOR_US, SKEW_MIN_SHARE * cycle_us):
        return Straggler(code=StragglerCode.NO_SKEW, culprit=None, **base)
    if p_last > alpha:
        return Straggler(code=StragglerCode.UNSTABLE, culprit=None, **base)
    excess, kind, why = _excess(parts, c, per_cycle.index.to_numpy())
    return Straggler(code=StragglerCode.CULPRIT, culprit=ranks[c], excess=kind, excess_us=excess, excess_reason=why,
                     **base)


def _none(side: str, cycles: int, why: str) -> Straggler:
    return Straggler(side=side, code=StragglerCode.NO_COLLECTIVES, culprit=None, cycles=cycles, collectives=0,
                     skew_us=math.nan, p_last=math.nan, waits=(), excess_reason=why)


def _excess(parts: list[RankPart], c: int, iters: np.ndarray):
    """Per ExcessKind, the median over cycles of the culprit's own time minus the other
    ranks' median (µs); the kind with the largest positive excess, or None and why."""
    per_rank = np.stack([p.excess_ns[:, cycle_columns(p, iters)] for p in parts]) / 1e3  # (ranks, kinds, cycles)
    others = np.delete(per_rank, c, axis=0)
    diff = np.median(per_rank[c] - np.median(others, axis=0), axis=1)
    excess = tuple((k, float(diff[i])) for i, k in enumerate(EXCESS_KINDS))
    best = int(np.argmax(diff))
    if not diff[best] > 0:
        return excess, None, "the culprit spends no more time than the others in any kind"
    return excess, EXCESS_KINDS[best], ""
