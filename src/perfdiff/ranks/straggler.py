"""Straggler analysis of one run: who reaches the collectives last, and why.

A collective (an NCCL kernel) ends on every rank at about the same instant: when the last
rank has arrived and the data moved.  So a rank's kernel lasts its wait for the last rank plus
the transfer, and the rank with the shortest kernel is the one that arrived last.  Only a
communicator's members join its collectives, so collectives are matched per communicator
(process group, where the traces name it; else one group of every rank): same iteration, same
place among the cycle's collectives on that communicator, on each of its members:

    wait_r = dur_r − min over the members of dur   (the start skew, read from the common end)

which needs no clock shared between hosts.  Per cycle a rank's waits are summed over its
communicators; the culprit is the rank that waits least.  It is named when the others wait materially longer than it (by at
least 2 % of the median cycle) and it is the last rank in more cycles than chance (binomial
test against 1/ranks, Bonferroni over the ranks); else the analysis says why it cannot name
one (docs/STATISTICS.md, stragglers).  Each communicator is also read on its own: the member
that arrives last there, unless it only relays a wait it suffered in another communicator.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfdiff.ranks.groups import UNKNOWN
from perfdiff.ranks.part import EXCESS_KINDS, RankPart, cycle_columns
from perfdiff.ranks.records import GroupCode, GroupStraggler, RankWait, Straggler, StragglerCode
from perfdiff.stats.binomial import binomial_greater_p

__all__ = ["SKEW_FLOOR_US", "common_iterations", "cycle_waits", "match_collectives", "straggler"]

SKEW_FLOOR_US = 50.0  # a culprit makes the others wait at least this much longer per cycle …
SKEW_MIN_SHARE = 0.02  # … and at least this share of the median cycle: else the ranks wait alike


def common_iterations(parts: list[RankPart]) -> np.ndarray:
    """The iterations every rank of a run has (sorted)."""
    common = parts[0].iteration
    for p in parts[1:]:
        common = np.intersect1d(common, p.iteration)
    return np.sort(common)


def match_collectives(parts: list[RankPart], iters: np.ndarray) -> dict[str, pd.DataFrame]:
    """Per communicator label, its collectives matched across its members: durations (ns),
    index (iteration, place among the cycle's collectives on it), one column per member that
    has it, rows where every such member has it.  The straggler analysis and the collectives'
    own time read the same table: computed once per run, passed to both."""
    # One table of every rank's collectives, built from the ranks' arrays (a loop over ranks,
    # not over collectives); the communicators are numbered across the ranks by label.
    labels = sorted({str(x) for p in parts for x in p.group_labels} | {UNKNOWN})
    code_of = {x: i for i, x in enumerate(labels)}
    unknown = code_of[UNKNOWN]
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "iter", "group", "ord", "start", "dur")}
    for p in parts:
        n = len(p.coll_cycle)
        local = np.array([code_of[str(x)] for x in p.group_labels] or [unknown], dtype=np.int64)
        cols["rank"].append(np.full(n, p.input.rank, dtype=np.int64))
        cols["iter"].append(p.iteration[p.coll_cycle])
        cols["group"].append(local[p.coll_group] if p.coll_group is not None else np.full(n, local[0]))
        cols["ord"].append(p.coll_ord)
        cols["start"].append(p.coll_start_ns if p.coll_start_ns is not None else p.coll_ord)
        cols["dur"].append(p.coll_dur_ns)
    if not parts or not sum(len(x) for x in cols["rank"]):
        return {}
    coll = pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})
    named = pd.unique(coll.loc[coll["group"] != unknown, "rank"])
    if 0 < len(named) < coll["rank"].nunique():
        # A rank whose trace names none of its communicators would be alone in its group and
        # drop out of the analysis: the run is read as one group of every rank instead, each
        # collective placed among all of its rank's collectives in the cycle.
        coll["group"] = unknown
        coll = coll.sort_values(["rank", "iter", "start"], kind="stable")
        coll["ord"] = coll.groupby(["rank", "iter"]).cumcount()
    coll = coll[coll["iter"].isin(iters)]
    order = {p.input.rank: i for i, p in enumerate(parts)}
    out = {}
    for code, g in coll.groupby("group", sort=True):
        members = sorted(pd.unique(g["rank"]), key=order.get)
        if len(members) < 2:
            continue
        wide = g.pivot_table(index=["iter", "ord"], columns="rank", values="dur", aggfunc="first")[members].dropna()
        if not wide.empty:
            out[labels[int(code)]] = wide
    return out


def straggler(parts: list[RankPart], side: str, alpha: float, unmatched: bool = False,
              matched: dict[str, pd.DataFrame] | None = None) -> Straggler:
    """The straggler analysis of one run's ranks (`parts`, any order); `unmatched`: the
    ranks' cycles are not iterations (time windows, idle gaps), so none; `matched`: the run's
    match_collectives over its common iterations, when already computed."""
    iters = common_iterations(parts)
    if unmatched:
        return Straggler(side=side, code=StragglerCode.NOT_ITERATIONS, culprit=None, cycles=len(iters), collectives=0,
                         skew_us=math.nan, p_last=math.nan, waits=())
    if len(parts) < 2:
        return _none(side, len(iters), "a single rank")
    if not any(len(p.coll_cycle) for p in parts):
        return _none(side, len(iters), "no NCCL kernels")
    if matched is None:
        matched = match_collectives(parts, iters)
    if not matched:
        return _none(side, len(iters), "no collective matched on every rank")
    per_group = _group_waits(matched)
    total = _total_waits(per_group, [p.input.rank for p in parts])
    used, cycles_idx = list(total.columns), total.index.to_numpy()
    wc = total.to_numpy()  # (cycles, ranks) µs of waiting, summed over the rank's communicators
    med = np.median(wc, axis=0)
    skew = float(np.median(wc.max(axis=1) - wc.min(axis=1)))
    share, alone = _last_to_arrive(wc)
    waits = tuple(RankWait(r, float(med[i]), float(share[i])) for i, r in enumerate(used))
    c = int(np.argmin(med))
    # The culprit is the best of len(used) candidates: Bonferroni over them.
    p_raw = binomial_greater_p(int(alone[:, c].sum()), len(wc), 1.0 / len(used))
    p_last = float(min(1.0, len(used) * p_raw))
    counts = pd.concat([w.groupby(level="iter").size() for w in matched.values()]).groupby(level=0).sum()
    per_cycle_coll = int(np.median(counts.to_numpy()))
    cycle_us = float(np.median(np.concatenate([p.dur_ns[cycle_columns(p, iters)] for p in parts]))) / 1e3
    floor = max(SKEW_FLOOR_US, SKEW_MIN_SHARE * cycle_us)
    grouped = any(label != UNKNOWN for label in matched)
    groups = tuple(_group(label, w, total, matched[label], floor, alpha, len(matched))
                   for label, w in per_group.items()) if grouped else ()
    gap = float(np.median(np.delete(med, c))) - float(med[c])
    code = StragglerCode.NO_SKEW if gap < floor else StragglerCode.UNSTABLE if p_last > alpha else StragglerCode.CULPRIT
    if grouped:
        # The members of a communicator that waits for no one wait least too: the culprit is
        # the rank that holds back its own communicators (named in most, the widest spread first).
        named = [g for g in groups if g.code == GroupCode.CULPRIT]
        if named:
            best = max({g.last for g in named}, key=lambda r: (sum(g.last == r for g in named),
                                                               max(g.skew_us for g in named if g.last == r)))
            c, p_last = used.index(best), min(g.p_last for g in named if g.last == best)
            code = StragglerCode.CULPRIT
        else:
            code = (StragglerCode.UNSTABLE if any(g.code == GroupCode.UNSTABLE for g in groups)
                    else StragglerCode.NO_SKEW)
    base = dict(side=side, cycles=len(wc), collectives=per_cycle_coll, skew_us=skew, p_last=p_last, waits=waits,
                groups=groups, grouped=grouped)
    if code != StragglerCode.CULPRIT:
        return Straggler(code=code, culprit=None, **base)
    excess, kind, why = _excess([next(p for p in parts if p.input.rank == r) for r in used], c, cycles_idx)
    return Straggler(code=StragglerCode.CULPRIT, culprit=used[c], excess=kind, excess_us=excess, excess_reason=why,
                     **base)


def cycle_waits(parts: list[RankPart], iters: np.ndarray, matched: dict[str, pd.DataFrame] | None = None
                ) -> pd.DataFrame:
    """Each rank's wait per cycle (µs) for the last of the other ranks in `parts`, summed over
    its communicators: rows are the iterations of `iters` with a matched collective, columns
    the ranks with one (empty with fewer than two ranks or nothing matched); `matched`: the
    run's match_collectives over `iters`, when already computed."""
    if len(parts) < 2:
        return pd.DataFrame()
    if matched is None:
        matched = match_collectives(parts, iters)
    if not matched:
        return pd.DataFrame()
    return _total_waits(_group_waits(matched), [p.input.rank for p in parts])


def _group_waits(matched: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Per communicator, each member's wait per cycle (µs) among that communicator's members."""
    per_group = {}
    for label, wide in matched.items():
        d = wide.to_numpy(dtype=np.float64) / 1e3
        w = pd.DataFrame(d - d.min(axis=1, keepdims=True), index=wide.index.get_level_values("iter"),
                         columns=wide.columns)
        per_group[label] = w.groupby(level=0).sum()
    return per_group


def _total_waits(per_group: dict[str, pd.DataFrame], order: list[int]) -> pd.DataFrame:
    """(iterations, ranks in `order` that have a matched collective) µs, summed over communicators."""
    used = [r for r in order if any(r in w.columns for w in per_group.values())]
    cycles_idx = np.unique(np.concatenate([w.index.to_numpy() for w in per_group.values()]))
    return sum(w.reindex(index=cycles_idx, columns=used, fill_value=0.0) for w in per_group.values())


def _last_to_arrive(wc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From each rank's wait per cycle (µs; cycles × ranks): each rank's share of the cycles in
    which it arrived last (waited least), ranks tied for the least wait sharing the cycle; and
    whether each was last alone (cycles × ranks), which the binomial test counts, so that ties
    (identical traces, waits of 0) favour no rank."""
    least = wc == np.nanmin(wc, axis=1, keepdims=True)
    k = least.sum(axis=1)
    return (least / np.maximum(k, 1)[:, None]).mean(axis=0), least & (k == 1)[:, None]


def _group(label: str, w: pd.DataFrame, total: pd.DataFrame, wide: pd.DataFrame, floor: float, alpha: float,
           n_groups: int) -> GroupStraggler:
    """One communicator among its members: who arrives last, and whether it only relays a
    wait it suffered in another communicator (its wait elsewhere is material)."""
    members = [int(r) for r in w.columns]
    wc = w.to_numpy()
    med = np.median(wc, axis=0)
    c = int(np.argmin(med))
    alone = _last_to_arrive(wc)[1]
    # Bonferroni over the members and over the communicators tested.
    p_raw = binomial_greater_p(int(alone[:, c].sum()), len(wc), 1.0 / len(members))
    p_last = float(min(1.0, len(members) * n_groups * p_raw))
    elsewhere = float(np.median(total.loc[w.index, members[c]].to_numpy() - wc[:, c]))
    gap = float(np.median(np.delete(med, c))) - float(med[c])
    code = (GroupCode.NO_SKEW if gap < floor else GroupCode.UNSTABLE if p_last > alpha
            else GroupCode.RELAY if elsewhere >= floor else GroupCode.CULPRIT)
    return GroupStraggler(group=label, ranks=tuple(members), code=code,
                          last=members[c] if code in (GroupCode.CULPRIT, GroupCode.RELAY) else None,
                          collectives=int(np.median(wide.groupby(level="iter").size())),
                          skew_us=float(np.median(wc.max(axis=1) - wc.min(axis=1))), p_last=p_last,
                          wait_elsewhere_us=elsewhere)


def _none(side: str, cycles: int, why: str) -> Straggler:
    return Straggler(side=side, code=StragglerCode.NO_COLLECTIVES, culprit=None, cycles=cycles, collectives=0,
                     skew_us=math.nan, p_last=math.nan, waits=(), excess_reason=why)


def _excess(parts: list[RankPart], c: int, iters: np.ndarray):
    """Per ExcessKind, the median over cycles of the culprit's own time minus the other
    ranks' median (µs); the kind with the largest excess when it is material (at least
    SKEW_FLOOR_US), else None and why."""
    per_rank = np.stack([p.excess_ns[:, cycle_columns(p, iters)] for p in parts]) / 1e3  # (ranks, kinds, cycles)
    others = np.delete(per_rank, c, axis=0)
    diff = np.median(per_rank[c] - np.median(others, axis=0), axis=1)
    excess = tuple((k, float(diff[i])) for i, k in enumerate(EXCESS_KINDS))
    best = int(np.argmax(diff))
    if not diff[best] >= SKEW_FLOOR_US:
        # A rank that only passes on a wait (for a rank not compared, or behind a barrier) is
        # late with no work of its own to show for it: naming its largest crumb would mislead.
        return excess, None, (f"the culprit spends less than {SKEW_FLOOR_US:g} µs per cycle more than the others in "
                              "every kind")
    return excess, EXCESS_KINDS[best], ""
