"""Metric helpers: Z of log μ, the μ tests' jobs, aliases and constant metrics
(docs/STATISTICS.md, μ and context metrics)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfdiff import stats
from perfdiff.analyze.records import FunctionStats
from perfdiff.attribute import SeriesInfo

@dataclass(frozen=True)
class MuJob:
    """One μ test: tested function `func` (an aligned index) and a metric of its device, the
    per-cycle μ of each run where it ran (`a`, `n`, the metric's unit) and the test's floor."""

    func: int
    metric: str
    device: str
    a: np.ndarray
    n: np.ndarray
    floor: float


def z_log(a: np.ndarray, n: np.ndarray, res: float) -> float:
    """Z(log μ) with ε = max(resolution, 1 % of the median positive μ) (docs/STATISTICS.md)."""
    eps = stats.log_epsilon(a, n)
    eps = eps if math.isfinite(eps) and eps > 0 else 1e-12  # all values 0: any tiny ε keeps ln finite
    return stats.z_log(a, n, eps=eps)


def mu_jobs(mu_n: np.ndarray, mu_a: np.ndarray, idx_n: np.ndarray, idx_a: np.ndarray, s_n: SeriesInfo,
             functions: list[FunctionStats], tested_idx: list[int], res_floor: float) -> list[MuJob]:
    """One μ test per tested function on the series' device."""
    jobs = []
    for f in tested_idx:
        if functions[f].device != s_n.device:
            continue
        vn = mu_n[idx_n[f]] if idx_n[f] >= 0 else np.zeros(0)
        va = mu_a[idx_a[f]] if idx_a[f] >= 0 else np.zeros(0)
        vn, va = vn[np.isfinite(vn)], va[np.isfinite(va)]
        if len(vn) == 0 and len(va) == 0:
            continue
        jobs.append(MuJob(func=f, metric=s_n.metric, device=s_n.device, a=va, n=vn, floor=res_floor))
    return jobs


def aliases_and_constants(ser_n: dict, ser_a: dict) -> tuple[dict[str, list[str]], set[str], dict[str, set[str]]]:
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


