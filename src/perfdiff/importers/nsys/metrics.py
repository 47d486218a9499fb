"""GPU metrics sampled by nsys (``GPU_METRICS`` + ``TARGET_INFO_GPU_METRICS``) as samples, each
covering [t, next t) of its metric, and the map from nsys GPU ids to CUDA device ordinals."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.importers.common import Note
from perfdiff.importers.nsys.db import Export
from perfdiff.model.tables import Part, categorical, concat_parts, dense_codes, empty_table

__all__ = ["gpu_index_map", "gpu_metrics"]

# nsys GPU metric names the registry knows under another name (unit in both).
GPU_METRIC_NAMES = {
    "GPC Clock Frequency [MHz]": "gpu_frequency",
    "SMs Active [Throughput %]": "gpu_sm_util",
    "SM Active [Throughput %]": "gpu_sm_util",
}


def gpu_metrics(x: Export) -> pd.DataFrame:
    """The samples table of the export's GPU metrics (empty without them)."""
    if not (x.has("GPU_METRICS") and x.has("TARGET_INFO_GPU_METRICS")):
        return empty_table("samples")
    mcols = set(x.cols("GPU_METRICS"))
    icols = set(x.cols("TARGET_INFO_GPU_METRICS"))
    if not ({"timestamp", "typeId", "metricId", "value"} <= mcols and {"typeId", "metricId", "metricName"} <= icols):
        x.notes.append(Note("gpu-metrics-unknown", "GPU_METRICS present but its columns are not the known ones: "
                            "not imported"))
        return empty_table("samples")
    names = {(t, m): str(nm) for t, m, nm in x.checked(
             x.query("SELECT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS"),
             "TARGET_INFO_GPU_METRICS", {0: "typeId", 1: "metricId"}) if t is not None and m is not None}
    rows = x.query("SELECT timestamp, typeId, metricId, value FROM GPU_METRICS "
                   "ORDER BY typeId, metricId, timestamp, value")
    if not rows:
        return empty_table("samples")
    a = np.array(rows, dtype=object).reshape(len(rows), 4)
    ts, typ, mid = (x.ints(a[:, i], "GPU_METRICS", c) for i, c in enumerate(("timestamp", "typeId", "metricId")))
    if pd.api.types.infer_dtype(a[:, 3], skipna=True) not in ("integer", "floating", "mixed-integer-float", "empty"):
        x.refuse_non_number("GPU_METRICS", "value")
    val = a[:, 3].astype(np.float64)
    same_next = np.r_[(typ[1:] == typ[:-1]) & (mid[1:] == mid[:-1]), False]
    t_end = np.where(same_next, np.r_[ts[1:], 0], ts)
    key = typ * 1_000_000 + mid
    codes, uniq = dense_codes(key)
    gpu_index = gpu_index_map(x)
    metric_labels = [GPU_METRIC_NAMES.get(names.get((int(k) // 1_000_000, int(k) % 1_000_000), ""),
                                          "nsys:" + names.get((int(k) // 1_000_000, int(k) % 1_000_000),
                                                              f"metric {int(k) % 1_000_000}")) for k in uniq]
    dcodes, duniq = dense_codes(typ & 0xFF)
    device = categorical(dcodes, [f"GPU {gpu_index.get(int(g), int(g))}" for g in duniq])
    x.counts["gpu_metric_samples"] = len(ts)
    return concat_parts("samples", [Part("samples", {"metric": categorical(codes, metric_labels), "device": device,
                                                     "t_start_ns": x.wall(ts), "t_end_ns": x.wall(t_end),
                                                     "value": val})])


def gpu_index_map(x: Export) -> dict[int, int]:
    """nsys GPU id → CUDA device ordinal (the deviceId kernels carry).

    From TARGET_INFO_GPU.cuDevice, else TARGET_INFO_CUDA_DEVICE (gpuId, cudaId) of the
    imported process (older exports).
    """
    if x.has("TARGET_INFO_GPU") and {"id", "cuDevice"} <= set(x.cols("TARGET_INFO_GPU")):
        return {i: c for i, c in x.checked(x.query("SELECT id, cuDevice FROM TARGET_INFO_GPU"), "TARGET_INFO_GPU",
                                           {0: "id", 1: "cuDevice"}) if i is not None and c is not None}
    table = "TARGET_INFO_CUDA_DEVICE"
    if x.has(table) and {"gpuId", "cudaId"} <= set(x.cols(table)):
        rows = x.checked(x.query(f"SELECT gpuId, cudaId{', pid' if 'pid' in x.cols(table) else ', NULL'} FROM {table}"),
                         table, {0: "gpuId", 1: "cudaId", 2: "pid"})
        mine = [r for r in rows if r[2] is None or x.pid is None or r[2] == x.pid] or rows
        return {g: c for g, c, _ in mine if g is not None and c is not None}
    return {}
