"""Vectorised helpers on time intervals (ns): nesting depth, parent and self time of ranges.

A profiler's CPU ranges (Kineto ``cpu_op``/``user_annotation``, NVTX push/pop ranges) nest
per thread: ``aten::linear`` contains ``aten::addmm``, which contains ``cudaLaunchKernel``.
The time a function *itself* spends is its duration minus the time of the ranges directly
inside it on the same thread (its "self" or "exclusive" time).  Everything here works on
whole arrays (sorting, cumulative sums, one searchsorted), never a Python loop per range.

Rules, so every input has one well-defined answer:

- Ranges are ordered per thread by start, then by end *descending*, then by input position:
  of two ranges starting together the longer one is the parent; of two identical ranges the
  first in the input is the parent (its self time is then 0, the second keeps the time).
- Ranges are half-open, [start, end): a range that ends exactly when another starts does
  not contain it (touching ranges are siblings).  A zero-length range is a child of the
  ranges open at its instant (including zero-length ones listed before it).
- Ranges that overlap without nesting (A starts, B starts inside A, A ends before B) do not
  occur in well-formed profiler output but do in async annotations.  B is still taken as A's
  child, and A loses only the part of B that overlaps it, so self time is never negative.
  After A ends the depth bookkeeping is off for ranges opened inside B: such a range is
  subtracted from nothing (its overlap with the parent found, A, is empty), which can
  overstate B's self time.  That is the documented cost of not reconstructing a stack.
- ``end < start`` is read as a zero-length range at ``start``.
"""
from __future__ import annotations

import numpy as np

from perfdiff.model import native

__all__ = ["nesting_parent", "self_time_ns"]


def _as_int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _thread_time_keys(tid: np.ndarray, *times: np.ndarray) -> list[np.ndarray] | None:
    """One int64 sort key per time array: (dense thread code, time), or None on overflow."""
    codes = np.unique(tid, return_inverse=True)[1].astype(np.int64)
    tmin = min(int(t.min()) for t in times)
    tmax = max(int(t.max()) for t in times)
    span = tmax - tmin + 1
    if (int(codes.max()) + 1) * span >= 2**62:
        return None
    return [codes * span + (t - tmin) for t in times]


def nesting_parent(tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent index (into the inputs; -1 for a top-level range) and nesting depth of each range.

    The parent of a range is the innermost range of the same thread that is open when it
    starts (see the module docstring for ties and for ranges that overlap without nesting).
    """
    tid = _as_int64(tid)
    start = _as_int64(start_ns)
    end = np.maximum(_as_int64(end_ns), start)
    n = len(start)
    if not (len(tid) == n == len(end)):
        raise ValueError("tid, start_ns and end_ns must have the same length")
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rank = np.arange(n, dtype=np.int64)
    keys = _thread_time_keys(tid, start, end)
    if keys is None:  # thread codes x time span overflow int64: slower multi-key sorts
        return _nesting_parent_lexsort(tid, start, end)
    kstart, kend = keys
    # Sorted rank r: by thread, start, longer first, input order (lexsort is stable).
    order = np.lexsort((-end, kstart))
    fast = _walked(order, tid, start, end)
    if fast is not None:
        return fast
    ks_o, t_o = kstart[order], tid[order]
    zero = (end == start)[order]
    # Ranges of this thread open when r starts = ranges of the thread started before r
    # (r - first rank of the thread) minus those already closed.  At one instant ends come
    # before starts (touching ranges do not nest), except the end of a zero-length range,
    # which comes after every start at its instant (it is open "at" that instant).
    ke_o = kend[order]
    closed_nz = np.sort(ke_o[~zero])
    closed_z = np.sort(ke_o[zero])
    floor = _thread_floor(ks_o, t_o)  # smallest key of each range's thread
    before = rank - np.searchsorted(ks_o, floor, side="left")
    closed = (np.searchsorted(closed_nz, ks_o, side="right") - np.searchsorted(closed_nz, floor, side="left")
              + np.searchsorted(closed_z, ks_o, side="left") - np.searchsorted(closed_z, floor, side="left"))
    depth_o = before - closed
    parent_o = _parent_from_depth(depth_o, t_o)
    return _to_input_order(order, parent_o, depth_o)


def _walked(order: np.ndarray, tid: np.ndarray, start: np.ndarray,
            end: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(parent, depth) in input order from the ranges sorted by `order`, by the compiled walk
    (`_nesting.c`: the same counts and parents as the numpy code below, in one pass); None
    where it is not built."""
    mod = native.compiled("perfdiff.model._nesting")
    if mod is None:
        return None
    t_o, s_o, e_o = (np.ascontiguousarray(a[order]) for a in (tid, start, end))
    depth_raw, parent_raw = mod.depth_parent(t_o, s_o, e_o)
    depth_o = np.frombuffer(depth_raw, dtype=np.int64)
    parent_o = np.frombuffer(parent_raw, dtype=np.int64)
    return _to_input_order(order, parent_o, depth_o)


def _thread_floor(k_sorted: np.ndarray, t_sorted: np.ndarray) -> np.ndarray:
    """For keys sorted by (thread, time): the smallest key of each element's thread."""
    first = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
    seg = np.cumsum(np.r_[True, t_sorted[1:] != t_sorted[:-1]]) - 1
    return k_sorted[first][seg]


def _parent_from_depth(depth_o: np.ndarray, t_o: np.ndarray) -> np.ndarray:
    """Parent rank of each sorted range: the last earlier range one level up (or -1)."""
    n = len(depth_o)
    rank = np.arange(n, dtype=np.int64)
    small = depth_o.astype(np.int16) if n and depth_o.max() < 2**15 and depth_o.min() >= 0 else depth_o
    by_depth = np.argsort(small, kind="stable")  # radix sort for int16: (depth, rank) order
    keys_sorted = depth_o[by_depth] * n + by_depth
    hit = np.searchsorted(keys_sorted, (depth_o - 1) * n + rank, side="left") - 1
    parent_o = np.full(n, -1, dtype=np.int64)
    ok = (depth_o > 0) & (hit >= 0)
    cand = by_depth[np.where(ok, hit, 0)]
    ok &= (depth_o[cand] == depth_o - 1) & (t_o[cand] == t_o)
    parent_o[ok] = cand[ok]
    return parent_o


def _to_input_order(order: np.ndarray, parent_o: np.ndarray, depth_o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(order)
    parent = np.full(n, -1, dtype=np.int64)
    has = parent_o >= 0
    parent[order[has]] = order[parent_o[has]]
    depth = np.empty(n, dtype=np.int64)
    depth[order] = depth_o
    return parent, depth


def _nesting_parent_lexsort(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nesting_parent by an event sweep with multi-key sorts (no combined int64 keys)."""
    n = len(start)
    idx = np.arange(n, dtype=np.int64)
    order = np.lexsort((idx, -end, start, tid))
    fast = _walked(order, tid, start, end)
    if fast is not None:
        return fast
    s_o, e_o, t_o = start[order], end[order], tid[order]
    zero = e_o == s_o
    ev_tid = np.concatenate((t_o, t_o))
    ev_time = np.concatenate((s_o, e_o))
    ev_type = np.concatenate((np.ones(n, np.int8), np.where(zero, 2, 0).astype(np.int8)))
    ev_rank = np.concatenate((idx, idx))
    ev_delta = np.concatenate((np.ones(n, np.int64), np.full(n, -1, np.int64)))
    eo = np.lexsort((ev_rank, ev_type, ev_time, ev_tid))
    cum = np.cumsum(ev_delta[eo])
    where = np.empty(2 * n, dtype=np.int64)
    where[eo] = np.arange(2 * n, dtype=np.int64)
    # Each thread's events sum to zero, so one global cumulative sum serves all threads.
    depth_o = cum[where[:n]] - 1
    return _to_input_order(order, _parent_from_depth(depth_o, t_o), depth_o)


def self_time_ns(tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Exclusive time (ns) of each range: its duration minus its direct children's, per thread.

    `tid`, `start_ns`, `end_ns` are equal-length integer arrays (any order).  A child is
    subtracted only where it overlaps its parent; the result is never negative.  See the
    module docstring for equal timestamps and ranges that overlap without nesting.
    """
    start = _as_int64(start_ns)
    end = np.maximum(_as_int64(end_ns), start)
    dur = end - start
    if len(start) == 0:
        return dur
    parent, _ = nesting_parent(tid, start, end)
    child = np.flatnonzero(parent >= 0)
    p = parent[child]
    overlap = np.minimum(end[child], end[p]) - start[child]
    np.maximum(overlap, 0, out=overlap)
    inner = np.zeros(len(start), dtype=np.int64)
    np.add.at(inner, p, overlap)
    out = dur - inner
    np.maximum(out, 0, out=out)
    return out
