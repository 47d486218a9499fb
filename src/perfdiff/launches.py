"""Which CPU-side op or range launched each GPU function of a run.

A kernel's launch is its runtime call (`launch_ns` on thread `tid`: the importers join a
Kineto kernel to its runtime call by correlation id, an nsys kernel to its CUDA runtime or
driver call by correlationId).  The ops open on that thread at that instant (PyTorch-profiler
`cpu_op`/`user_annotation` ranges, NVTX ranges) are the function's launching chain, innermost
first (perfdiff.analyze.launchers finds kernels swapped under one op from them).

Vectorised: one `nesting_parent` over a run's CPU ranges plus one launch point per GPU
function (its first launch); the Python loops run over functions, never over rows.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.model.intervals import nesting_parent
from perfdiff.model.schema import GPU_KINDS, MISSING, Kind

__all__ = ["Key", "LaunchChains", "launch_chains"]

MAX_CHAIN = 64  # ops kept per chain (real profiles nest a few dozen levels at most)

Key = tuple[str, str, str]  # (name, device, kind) of a function
LaunchChains = dict[Key, tuple[str, ...]]  # a GPU function → the ops open at its launch, innermost first


def launch_chains(run: RunData, wanted: set[Key] | None = None) -> LaunchChains:
    """For each GPU function of `run` (only those in `wanted`, when given) whose launch is
    known: the names of the CPU ranges open on the launching thread at its first launch,
    innermost first.  Functions launched outside every range get ()."""
    act = run.activity
    if len(act) == 0:
        return {}
    kind_codes, kind_names = _codes(act["kind"])
    if Kind.CPU.value not in kind_names:  # no op or range to launch from (most nsys exports without NVTX)
        return {}
    fn_codes, fn_names = _codes(act["function"])
    dev_codes, dev_names = _codes(act["device"])
    launch = act["launch_ns"].to_numpy(np.int64)
    tid = act["tid"].to_numpy(np.int64)
    gpu_kind = np.isin(np.asarray(kind_names, dtype=object), GPU_KINDS)
    mask = gpu_kind[kind_codes] & (launch != MISSING) & (tid != MISSING) & (fn_codes >= 0) & (dev_codes >= 0)
    cpu = np.flatnonzero((np.asarray(kind_names, dtype=object) == Kind.CPU.value)[kind_codes] & (tid != MISSING))
    if len(cpu) == 0:  # no op or range to launch from
        return {}
    if wanted is not None:
        mask &= np.isin(np.asarray(fn_names, dtype=object), [w[0] for w in wanted])[fn_codes]
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return {}
    # The first launch of each (function, device, kind).
    span_d, span_k = len(dev_names) + 1, len(kind_names) + 1
    key = (fn_codes[rows].astype(np.int64) * span_d + dev_codes[rows]) * span_k + kind_codes[rows]
    _, first = np.unique(key, return_index=True)
    firsts = rows[np.sort(first)]
    keys = [(fn_names[fn_codes[r]], dev_names[dev_codes[r]], kind_names[kind_codes[r]]) for r in firsts]
    if wanted is not None:
        keep = [k in wanted for k in keys]
        firsts = firsts[np.asarray(keep, dtype=bool)]
        keys = [k for k, ok in zip(keys, keep, strict=True) if ok]
    if len(firsts) == 0:
        return {}
    start = act["start_ns"].to_numpy(np.int64)
    end = act["end_ns"].to_numpy(np.int64)
    # The CPU ranges, then each function's launch as a zero-length range at its instant.
    n_cpu = len(cpu)
    parent, _ = nesting_parent(np.concatenate((tid[cpu], tid[firsts])),
                               np.concatenate((start[cpu], launch[firsts])),
                               np.concatenate((end[cpu], launch[firsts])))
    out: dict[Key, tuple[str, ...]] = {}
    for j, k in enumerate(keys):
        chain: list[str] = []
        p = int(parent[n_cpu + j])
        while p >= 0 and len(chain) < MAX_CHAIN:
            if p < n_cpu:  # a launch point opened at the same instant is no op: skip it
                chain.append(fn_names[fn_codes[cpu[p]]])
            p = int(parent[p])
        out[k] = tuple(chain)
    return out


def _codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a text column and the text of each code (categoricals: their own)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), [str(x) for x in col.cat.categories]
    codes, uniq = pd.factorize(col)
    return codes, [str(x) for x in uniq]
