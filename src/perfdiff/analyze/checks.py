"""Checks beside the per-function tests: waits, common-mode shifts, and differences between
the runs that can explain a change by themselves (docs/STATISTICS.md, checks)."""
from __future__ import annotations

from typing import Any

import numpy as np

from perfdiff import stats
from perfdiff.analyze.evidence import CycleRatioDetail, CycleSourceDetail, RankDetail, WorldSizeDetail
from perfdiff.analyze.records import CommonMode, FunctionStats, Notice, NoticeCode
from perfdiff.analyze.thresholds import DEFAULT, Thresholds
from perfdiff.bundle import RunData
from perfdiff.model.cycles import Cycles
from perfdiff.model.schema import GPU_KINDS, Kind

def common_modes(functions: list[FunctionStats] | tuple[FunctionStats, ...], th: Thresholds = DEFAULT,
                 ) -> tuple[list[CommonMode], dict[int, float]]:
    """Per GPU device, whether all its kernels' β scaled by one ratio; and for the functions
    of a triggered device, β_A − ratio·β_N (pp) by function index."""
    out = []
    beta_vs_common: dict[int, float] = {}
    devices = sorted({f.device for f in functions if f.kind in GPU_KINDS})
    for device in devices:
        idx = [i for i, f in enumerate(functions) if f.device == device and f.kind in GPU_KINDS]
        bn = np.array([functions[i].beta_n for i in idx])
        ba = np.array([functions[i].beta_a for i in idx])
        cm = stats.common_mode_detail(bn, ba, min_beta=th.common_mode_min_beta)
        if cm is None:
            continue
        out.append(CommonMode(device=device, ratio=cm.ratio, k=cm.k, iqr_log=cm.iqr_log, triggered=cm.triggered,
                              median_log=cm.median_log))
        if cm.triggered:
            for i in idx:
                beta_vs_common[i] = functions[i].beta_a - cm.ratio * functions[i].beta_n
    return out + per_call_modes(functions, th), beta_vs_common


def per_call_modes(functions: list[FunctionStats] | tuple[FunctionStats, ...],
                   th: Thresholds = DEFAULT) -> list[CommonMode]:
    """Per device, whether every busy function got slower (or faster) per call by one ratio:
    a clock, power or thermal cut scales every kernel, and the host's CPU-side operators scale
    together when the CPU slows.  On each GPU its kernels, memcpys and memsets; on the host its
    CPU-side ranges; only functions in both runs with the same calls per cycle."""
    groups: dict[str, list[FunctionStats]] = {}
    for f in functions:
        if f.presence != "both" or f.wait or f.sampled or f.beta_n < th.per_call_min_beta:
            continue
        if not (f.kind in GPU_KINDS or f.kind == Kind.CPU):
            continue
        if not th.same_calls(f.calls_n, f.calls_a):
            continue
        if not (f.per_call_n_us > 0 and f.per_call_a_us > 0):
            continue
        groups.setdefault(f.device, []).append(f)
    out = []
    for device in sorted(groups):
        fs = groups[device]
        cm = stats.common_mode_detail([f.per_call_n_us for f in fs], [f.per_call_a_us for f in fs], min_beta=0.0)
        if cm.k >= 3:
            out.append(CommonMode(device=device, ratio=cm.ratio, k=cm.k, iqr_log=cm.iqr_log,
                                  triggered=cm.triggered, basis="per-call", median_log=cm.median_log))
    return out


def cycle_ratio_notice(cn: Cycles, ca: Cycles, one_plan: bool, th: Thresholds = DEFAULT) -> Notice | None:
    # `one_plan`: both runs were cut by one definition that each run finds on its own.
    """A warning when the median cycle times differ by more than ×2 and the cycles may not
    mean the same: the runs were not cut by one plan, or by markers the process writes (whose
    meaning may have changed).  Cut by one structural plan (`one_plan`: a kernel sequence,
    idle gaps, windows), the change is the process's own: no warning."""
    med_n, med_a = float(np.median(cn.dur_ns)), float(np.median(ca.dur_ns))
    ratio = med_a / med_n
    if 1.0 / th.cycle_ratio_max <= ratio <= th.cycle_ratio_max:
        return None
    same_marked = cn.source == ca.source and cn.source.marked
    if one_plan and not same_marked:
        return None
    return Notice(NoticeCode.CYCLE_RATIO, normal=med_n / 1e3, abnormal=med_a / 1e3,
                  detail=CycleRatioDetail(ratio=ratio, same_marked_source=same_marked, source_n=cn.source.value,
                                          source_a=ca.source.value))


def comparability(normal: RunData, abnormal: RunData, cn: Cycles, ca: Cycles) -> list[Notice]:
    """Differences between the runs that can explain a change by themselves."""
    out: list[Notice] = []

    def gpus(run: RunData) -> list[dict[str, Any]]:
        return [g for g in run.manifest.get("gpus", []) or [] if isinstance(g, dict)]

    gn, ga = [str(g.get("name", "?")) for g in gpus(normal)], [str(g.get("name", "?")) for g in gpus(abnormal)]
    if gn != ga:
        out.append(Notice(NoticeCode.GPU_MODEL, normal=tuple(gn), abnormal=tuple(ga)))
    for key, code in (("driver", NoticeCode.GPU_DRIVER), ("max_sm_clock_mhz", NoticeCode.MAX_SM_CLOCK),
                      ("power_limit_w", NoticeCode.POWER_LIMIT)):
        vn, va = [g.get(key) for g in gpus(normal)], [g.get(key) for g in gpus(abnormal)]
        if any(v is not None for v in vn + va) and vn != va:
            out.append(Notice(code, normal=tuple(vn), abnormal=tuple(va)))
    hn, ha = normal.manifest.get("host", {}) or {}, abnormal.manifest.get("host", {}) or {}
    for key, code in (("cpu_model", NoticeCode.CPU_MODEL), ("cores", NoticeCode.CPU_CORES),
                      ("kernel", NoticeCode.OS_KERNEL)):
        if hn.get(key) != ha.get(key) and (hn.get(key) is not None or ha.get(key) is not None):
            out.append(Notice(code, normal=hn.get(key), abnormal=ha.get(key)))
    dn = ((normal.manifest.get("target") or {}).get("distributed") or {})
    da = ((abnormal.manifest.get("target") or {}).get("distributed") or {})
    if dn.get("world_size") != da.get("world_size") and (dn or da):
        out.append(Notice(NoticeCode.WORLD_SIZE, normal=dn.get("world_size"), abnormal=da.get("world_size"),
                          detail=WorldSizeDetail(rank_n=dn.get("rank"), rank_a=da.get("rank"))))
    elif dn.get("rank") != da.get("rank") and (dn or da):
        out.append(Notice(NoticeCode.RANK, normal=dn.get("rank"), abnormal=da.get("rank"),
                          detail=RankDetail(world_size=dn.get("world_size"))))
    if cn.source != ca.source:
        out.append(Notice(NoticeCode.CYCLE_SOURCE, normal=cn.source.value, abnormal=ca.source.value,
                          detail=CycleSourceDetail(detail_n=cn.detail, detail_a=ca.detail)))
    sn = (normal.manifest.get("source") or {}).get("kind")
    sa = (abnormal.manifest.get("source") or {}).get("kind")
    if sn != sa:
        out.append(Notice(NoticeCode.INPUT_SOURCE, normal=sn, abnormal=sa))
    return out
