"""The collectives' own time in each run: what their NCCL kernels take beyond waiting for the
other ranks compared.

A rank's NCCL kernel lasts its wait for the last rank to arrive plus the collective's own
time: the transfer, and any wait for ranks that are not in the comparison.  The straggler
analysis reads the first part (perfdiff.ranks.straggler.cycle_waits); this module tests the
second, which the per-rank tests leave aside (collectives are symptoms there, not causes).  It
grows on every rank alike when the network, NVLink or NCCL's settings make the transfer slower,
or when a rank left out of the comparison arrives late; a straggler among the ranks compared
leaves it unchanged (docs/STATISTICS.md, ranks).

Per cycle and rank: the rank's NCCL kernel time less its wait; per iteration the median over
ranks; the two runs' series are tested as the job's cycle time is (Mann–Whitney, Cliff's δ).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfdiff import stats
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.ranks.across import NS_PER_US
from perfdiff.ranks.part import RankPart, cycle_columns
from perfdiff.ranks.records import CollectiveTime
from perfdiff.ranks.straggler import cycle_waits

__all__ = ["collective_time"]


def _per_iteration(parts: list[RankPart], iters: np.ndarray, matched: dict[str, pd.DataFrame] | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration of `iters`, the median over `parts` of a rank's collective time less its
    wait for the others (µs), and of its number of collectives."""
    waits = cycle_waits(parts, iters, matched)
    own, count = [], []
    for p in parts:
        cols = cycle_columns(p, iters)
        per_cycle = np.bincount(p.coll_cycle, weights=p.coll_dur_ns.astype(np.float64), minlength=len(p.dur_ns))
        r = p.input.rank
        wait = (waits[r].reindex(iters, fill_value=0.0).to_numpy() if r in waits.columns
                else np.zeros(len(iters)))
        own.append(per_cycle[cols] / NS_PER_US - wait)
        count.append(np.bincount(p.coll_cycle, minlength=len(p.dur_ns))[cols])
    return np.median(np.stack(own), axis=0), np.median(np.stack(count), axis=0)


def _unmeasured(reason: str) -> CollectiveTime:
    return CollectiveTime(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, reason=reason)


def collective_time(parts_n: list[RankPart], parts_a: list[RankPart], iters_n: np.ndarray, iters_a: np.ndarray,
                    cycle_a_us: np.ndarray, th: Thresholds, unmatched: bool = False,
                    matched: tuple[dict[str, pd.DataFrame] | None, dict[str, pd.DataFrame] | None] = (None, None)
                    ) -> CollectiveTime:
    """The collectives' own time in each run and its change (see the module docstring);
    `cycle_a_us`: the abnormal job cycle per iteration (µs), the denominator of τ;
    `unmatched`: the ranks' cycles are not iterations (then NaN); `matched`: each run's
    straggler.match_collectives over its iterations, when already computed."""
    lack = [side for side, parts in (("normal", parts_n), ("abnormal", parts_a))
            if not any(len(p.coll_cycle) for p in parts)]
    if unmatched:
        return _unmeasured("the cycles are not iterations")
    if lack:
        return _unmeasured(f"{'neither run has' if len(lack) == 2 else f'the {lack[0]} run has'} NCCL kernels")
    n, count_n = _per_iteration(parts_n, iters_n, matched[0])
    a, count_a = _per_iteration(parts_a, iters_a, matched[1])
    res = stats.compare_samples(a, n, floor=th.t_floor_us, alpha=th.alpha)
    delta = float(a.mean() - n.mean())
    tau = 100.0 * delta / float(np.mean(cycle_a_us))
    d, p = float(res.cliffs_delta), float(res.p_mwu)
    changed = p <= th.alpha and th.material(tau, d)
    why = "; ".join(r for r in res.reasons if r.startswith("p_mwu")) if not math.isfinite(p) else ""
    return CollectiveTime(float(n.mean()), float(a.mean()), delta, tau, p, d, changed=changed, reason=why,
                          count_n=float(np.median(count_n)), count_a=float(np.median(count_a)))
