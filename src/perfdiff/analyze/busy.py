"""Each GPU's busy share of the cycle in both runs, and the test of its change
(docs/STATISTICS.md, GPU busy share): the verdict reads a fall as the GPU waiting for the host."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfdiff import stats
from perfdiff.analyze.records import GpuBusy
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.model.schema import GPU_KINDS

def gpu_busy_shares(keys_n: Any, own_n: np.ndarray, dur_n: np.ndarray, keys_a: Any, own_a: np.ndarray,
                    dur_a: np.ndarray, *, matched: bool, thresholds: Thresholds) -> list[GpuBusy]:
    """Per GPU found in both runs, its busy share of each cycle (%): the own time of its
    kernels, memcpys and memsets in the cycle over the cycle's duration, at most 100 % (work
    on concurrent streams can sum past it); compared like a function's share (paired over
    matched cycles), its p Bonferroni-adjusted over the GPUs.  `keys_*`: the matrices' rows
    (name, device, kind); `own_*`: own ns (functions × cycles); `dur_*`: cycle ns; the test's
    floor and α: `thresholds`'."""
    def shares(keys: Any, own: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
        gpu = keys["kind"].astype(str).isin(GPU_KINDS).to_numpy()
        dev = keys["device"].astype(str).to_numpy()
        # A weight vector times the matrix: one pass over it, no copy of the device's rows.
        return {d: np.minimum(100.0 * ((gpu & (dev == d)).astype(np.float64) @ own) / dur, 100.0)
                for d in sorted(set(dev[gpu]))}
    sn, sa = shares(keys_n, own_n, dur_n), shares(keys_a, own_a, dur_a)
    devices = [d for d in sn if d in sa]
    test = stats.compare_paired if matched else stats.compare_samples
    out = []
    for d in devices:
        res = test(sa[d], sn[d], floor=thresholds.busy_floor_pp, alpha=thresholds.alpha)
        p = min(1.0, res.p_mwu * len(devices)) if math.isfinite(res.p_mwu) else math.nan
        out.append(GpuBusy(device=d, busy_n_pct=float(sn[d].mean()), busy_a_pct=float(sa[d].mean()), res=res, p=p))
    return out
