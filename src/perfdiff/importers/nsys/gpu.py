"""The GPU work of an nsys export: kernels, memcpys and memsets as activity rows on
``GPU <deviceId>``, named (kernel names from the string table, copies by their kinds) and
joined to their launch (`runtime.launch_lookup`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.importers.common import Note
from perfdiff.importers.nsys.db import KERNEL, MEMCPY, MEMSET, PID_MASK, Export
from perfdiff.importers.nsys.runtime import launch_lookup
from perfdiff.importers.nsys.strings import labels
from perfdiff.model.cuda_names import MEM_KINDS, memcpy_label
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, categorical, constant_categorical, dense_codes

__all__ = ["gpu_part", "kernel_name_column", "read_gpu_tables"]


def kernel_name_column(x: Export) -> str | None:
    """The kernel table's column that names kernels for the import's `group`."""
    order = ("shortName", "demangledName", "mangledName", "name") if x.group == "short" else (
        "demangledName", "shortName", "mangledName", "name")
    for col in order:
        if col in x.cols(KERNEL):
            if col != order[0]:
                x.notes.append(Note("kernel-name-column", f"kernel names from column {col} ({order[0]} is missing)"))
            return col
    return None


def read_gpu_tables(x: Export, kern: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Columns of each GPU table by kind: the kernels `kern` (read by the caller), memcpys, memsets."""
    parts = {"kernel": kern}
    for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if x.has(table):
            parts[kind] = x.read(table, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                         "bytes", "copyKind", "srcKind", "dstKind", "memKind"])
    return parts


def gpu_part(x: Export, kind: str, c: dict[str, np.ndarray], runtime: dict[str, np.ndarray] | None) -> Part:
    """Activity rows of GPU table columns `c` (of the imported process), joined to `runtime`."""
    n = len(c["start"])
    start = x.to_wall(c["start"])
    end = x.to_wall(c["end"])
    corr = c.get("correlationId", np.full(n, MISSING, np.int64))
    launch = np.full(n, MISSING, dtype=np.int64)
    tid = np.full(n, MISSING, dtype=np.int64)
    if runtime is not None and n:
        row = launch_lookup(runtime, corr)
        hit = row >= 0
        launch[hit] = x.wall(runtime["start"][row[hit]])
        if "globalTid" in runtime:
            tid[hit] = runtime["globalTid"][row[hit]] & PID_MASK
        x.counts[f"{kind}_launch_joined"] = int(hit.sum())
    if kind == "kernel":
        function = _kernel_names(x, c)
    elif kind == "memcpy":
        function = _memcpy_names(x, c)
    else:
        function = _memset_names(x, c)
    dev_codes, dev_uniq = dense_codes(np.where(c["deviceId"] >= 0, c["deviceId"], 0)) if "deviceId" in c else (
        np.zeros(n, np.int64), np.zeros(1, np.int64))
    device = categorical(dev_codes, [f"GPU {int(d)}" for d in dev_uniq])
    cols = {"function": function, "kind": constant_categorical(kind, n), "device": device,
            "start_ns": start, "end_ns": end, "busy_ns": end - start, "launch_ns": launch, "tid": tid,
            "stream": c.get("streamId", np.full(n, MISSING, np.int64)), "correlation": corr}
    if kind in ("memcpy", "memset"):
        cols["bytes"] = c.get("bytes", np.full(n, MISSING, np.int64))
    return Part("activity", cols)


def _kernel_names(x: Export, c: dict[str, np.ndarray]) -> pd.Categorical:
    if x.name_col and x.name_col in c:
        return labels(x, c[x.name_col])
    return constant_categorical("<unnamed kernel>", len(c["start"]))


def _memcpy_names(x: Export, c: dict[str, np.ndarray]) -> pd.Categorical:
    n = len(c["start"])
    ck = c.get("copyKind", np.zeros(n, np.int64))
    sk = c.get("srcKind", np.full(n, MISSING, np.int64))
    dk = c.get("dstKind", np.full(n, MISSING, np.int64))
    # Few distinct (copy, src, dst) triples: name the triples, not the rows.
    uniq, codes = np.unique(np.stack((ck, sk, dk), axis=1), axis=0, return_inverse=True)
    labels = [memcpy_label(c, s, d) for c, s, d in uniq.tolist()]
    return categorical(codes.reshape(-1).astype(np.int64), labels)


def _memset_names(x: Export, c: dict[str, np.ndarray]) -> pd.Categorical:
    n = len(c["start"])
    if "memKind" not in c:
        return constant_categorical("Memset (Device)", n)
    codes, uniq = dense_codes(c["memKind"].clip(-1, None) + 1)
    labels = [f"Memset ({MEM_KINDS.get(int(u) - 1, 'Device' if u == 0 else f'kind {int(u) - 1}')})" for u in uniq]
    return categorical(codes, labels)
