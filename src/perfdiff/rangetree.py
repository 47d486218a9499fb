"""One run's range tree: its ranges nested by containment on each thread, folded into name
paths, with each path's calls, inclusive, self and GPU time, in total and per cycle.

Ranges are the CPU-side ranges of the run (NVTX push/pop and start/end ranges, Kineto
``cpu_op`` / ``user_annotation`` / ``record_function`` ranges: activity rows of kind ``cpu``
with a thread), the cycle markers the profiler or the target wrote on a thread
(``ProfilerStep#N``, perfdiff cycle ranges) and the GPU-side ranges (RunData.gpu_ranges:
Kineto ``gpu_user_annotation``, a range on a GPU stream's timeline).  A range's parent is the
innermost range of its thread (of its stream, for a GPU-side range) open when it starts
(perfdiff.model.intervals.nesting_parent).  Its path is the names from its thread's outermost
range down to it, each name folded (`fold_name`: the number of a step or an iteration replaced
by ``*``); ranges with one path, on any thread, are one node (repeated siblings become calls
of one node).  GPU-side ranges form trees of their own (`RangeProfile.gpu_side`): a GPU-side
path never merges with the CPU-side path of the same names.

Times are ns.  Self time is the inclusive time minus that of the ranges directly inside it.
GPU time is that of the kernels, memcpys and memsets launched (by their launch time and
thread) inside the range or inside ranges nested in it, as Nsight Systems projects GPU work
onto NVTX ranges; unknown (NaN; None when no path has it) when the run has no GPU work with
a launch thread.  The GPU time of a GPU-side range is that of the GPU work on its stream that
starts inside it.  Per cycle, a range counts in every cycle it overlaps with the overlapped
part of its inclusive time (its self time prorated alike), its call in the cycle it starts
in, and its GPU work in the cycle it was launched in; a GPU-side range, which runs behind the
CPU that launched its work, counts whole in the cycle its first GPU work was launched in (its
start when unknown).  Everything is vectorised: Python loops run over nesting levels and
streams.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdiff.bundle import RunData
from perfdiff.model.intervals import nesting_parent
from perfdiff.model.schema import GPU_KINDS, MISSING, Kind, MarkerSource
from perfdiff.model.cycles import Cycles

__all__ = ["MAX_DEPTH", "RangeNesting", "RangeProfile", "empty_profile", "fold_name", "range_nesting", "range_profile"]

MAX_DEPTH = 256  # ranges nested deeper than this are left out (counted in RangeProfile.too_deep)
# A trailing number after '#', a separator or '=' is the step's or iteration's number.
_NUMBER_SUFFIX = re.compile(r"(?<=[#_\-. :=])\d+$")
_CYCLE_MARKERS = (MarkerSource.PROFILER_STEP.value, MarkerSource.PERFDIFF.value)


def fold_name(name: str) -> str:
    """`name` with its trailing step or iteration number folded: ``ProfilerStep#12`` →
    ``ProfilerStep#*``, ``layer_3`` → ``layer_*``; a number glued to letters (``conv2d``)
    stays."""
    return _NUMBER_SUFFIX.sub("*", name)


@dataclass(frozen=True)
class RangeProfile:
    """A run's range paths (row p of every array) and what they hold.

    Totals are over the whole run; `*_cyc` arrays over its cycles only (None without cycles).
    `incl_coo`: (path, cycle, inclusive ns) of every (path, cycle) with time, sorted by path
    then cycle, for the per-cycle tests.  `gpu_*` is None when the run's GPU time inside
    ranges is unknown (`gpu_reason` says why), NaN for the paths of a side where it is.
    `nested`: some range of the process's own (not a cycle marker) runs inside another of its
    own.  `gpu_side`: the path is a GPU-side range's (None: no path is); its `threads` are
    streams."""

    parent: np.ndarray  # (P,) parent path, -1 for a root
    name: tuple[str, ...]  # (P,) folded leaf name
    depth: np.ndarray  # (P,)
    calls: np.ndarray  # (P,) ranges
    incl_ns: np.ndarray  # (P,) float64
    self_ns: np.ndarray  # (P,) float64
    gpu_ns: np.ndarray | None  # (P,) float64, inclusive of nested ranges
    threads: np.ndarray  # (P,) distinct threads the path ran on
    n_cycles: int = 0
    calls_cyc: np.ndarray | None = None
    incl_cyc_ns: np.ndarray | None = None
    self_cyc_ns: np.ndarray | None = None
    gpu_cyc_ns: np.ndarray | None = None
    incl_coo: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    nested: bool = False
    gpu_reason: str | None = None
    too_deep: int = 0
    gpu_side: np.ndarray | None = None  # (P,) bool

    def is_gpu_side(self, i: int) -> bool:
        """Path i is a GPU-side range's."""
        return bool(self.gpu_side[i]) if self.gpu_side is not None else False

    @property
    def n_paths(self) -> int:
        return len(self.name)

    def names_of(self, i: int) -> tuple[str, ...]:
        """Path i as its folded names, root first."""
        out = []
        while i >= 0:
            out.append(self.name[i])
            i = int(self.parent[i])
        return tuple(reversed(out))

    @property
    def cycle_share(self) -> float:
        """The share of the top-level ranges' time that lies inside the cycles (NaN without
        cycles or ranges)."""
        if self.incl_cyc_ns is None:
            return float("nan")
        roots = self.parent < 0  # CPU-side roots: GPU-side ranges run behind the cycles
        if self.gpu_side is not None:
            roots &= ~self.gpu_side
        total = float(self.incl_ns[roots].sum())
        return float(self.incl_cyc_ns[roots].sum()) / total if total > 0 else float("nan")


_STREAM_KEY0 = -2  # GPU streams get the keys -2, -3, …: threads are ≥ 0 and MISSING is -1


@dataclass(frozen=True)
class _Ranges:
    """Every range of a run: thread (a stream's key for a GPU-side range), ns, folded label
    code; `own`: not a cycle marker; `gpu`: a GPU-side range."""

    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    code: np.ndarray
    labels: list[str]
    label_gpu: np.ndarray  # (labels,) bool
    own: np.ndarray
    gpu: np.ndarray
    stream_keys: dict[tuple[str, int], int]  # (device, stream) → key of the GPU-side ranges' streams


def _ranges(run: RunData) -> _Ranges:
    """The run's ranges: CPU ranges, cycle markers, GPU-side ranges (see the module docstring)."""
    a, m, g = run.activity, run.markers, run.gpu_ranges
    # (tid, start, end, name codes, name labels, own, gpu)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str], bool, bool]] = []
    if len(a) and Kind.CPU.value in list(a["kind"].cat.categories):
        codes = a["kind"].cat.codes.to_numpy()
        rows = np.flatnonzero((codes == list(a["kind"].cat.categories).index(Kind.CPU.value))
                              & (a["tid"].to_numpy() != MISSING))
        if len(rows):
            parts.append((a["tid"].to_numpy()[rows], a["start_ns"].to_numpy()[rows], a["end_ns"].to_numpy()[rows],
                          a["function"].cat.codes.to_numpy()[rows].astype(np.int64),
                          [str(c) for c in a["function"].cat.categories], True, False))
    if len(m):
        src = m["source"].astype(str).to_numpy()
        keep = np.isin(src, _CYCLE_MARKERS) & (m["tid"].to_numpy() != MISSING) & \
            (m["end_ns"].to_numpy() > m["start_ns"].to_numpy())
        rows = np.flatnonzero(keep)
        if len(rows):
            parts.append((m["tid"].to_numpy()[rows], m["start_ns"].to_numpy()[rows], m["end_ns"].to_numpy()[rows],
                          m["name"].cat.codes.to_numpy()[rows].astype(np.int64),
                          [str(c) for c in m["name"].cat.categories], False, False))
    stream_keys: dict[tuple[str, int], int] = {}
    if g is not None and len(g):
        dcats = [str(c) for c in g["device"].cat.categories]
        pairs = np.stack((g["device"].cat.codes.to_numpy().astype(np.int64), g["stream"].to_numpy()))
        uniq, inv = np.unique(pairs, axis=1, return_inverse=True)
        stream_keys = {(dcats[int(d)], int(st)): _STREAM_KEY0 - k for k, (d, st) in enumerate(uniq.T.tolist())}
        keys = _STREAM_KEY0 - inv.reshape(-1).astype(np.int64)
        parts.append((keys, g["start_ns"].to_numpy(), g["end_ns"].to_numpy(),
                      g["name"].cat.codes.to_numpy().astype(np.int64), [str(c) for c in g["name"].cat.categories],
                      True, True))
    labels: dict[tuple[bool, str], int] = {}
    code_parts, own, gpu = [], [], []
    # The GPU side of a cycle marker (Kineto's GPU-side ProfilerStep#N) is a cycle marker too.
    steps = {fold_name(cats[c]) for *_, codes, cats, is_own, _ in parts if not is_own for c in np.unique(codes).tolist()}
    for *_, codes, cats, is_own, is_gpu in parts:
        lookup = np.array([labels.setdefault((is_gpu, fold_name(c)), len(labels)) for c in cats] or [0],
                          dtype=np.int64)
        code_parts.append(lookup[codes])
        mine = np.array([is_own and not (is_gpu and fold_name(c) in steps) for c in cats] or [False], dtype=bool)
        own.append(mine[codes])
        gpu.append(np.full(len(codes), is_gpu))

    def cat(i: int) -> np.ndarray:
        return np.concatenate([p[i] for p in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)

    def flags(x: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(x) if x else np.zeros(0, dtype=bool)

    return _Ranges(cat(0), cat(1), np.maximum(cat(2), cat(1)),
                   np.concatenate(code_parts) if parts else np.zeros(0, np.int64), [lb for _, lb in labels],
                   np.array([side for side, _ in labels], dtype=bool), flags(own), flags(gpu), stream_keys)


def _paths(parent: np.ndarray, depth: np.ndarray, code: np.ndarray, n_labels: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(path of each range, path parent, path name code, path depth): one np.unique per level."""
    path = np.full(len(code), -1, dtype=np.int64)
    p_parent, p_code, p_depth = [], [], []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=-1)) + 2))
    n = 0
    for d in range(min(len(bounds) - 1, MAX_DEPTH)):
        idx = order[bounds[d]:bounds[d + 1]]
        if len(idx) == 0:
            continue
        up = np.where(parent[idx] >= 0, path[np.maximum(parent[idx], 0)], -1)
        key = (up + 1) * n_labels + code[idx]
        uniq, inv = np.unique(key, return_inverse=True)
        path[idx] = n + inv
        p_parent.append(uniq // n_labels - 1)
        p_code.append(uniq % n_labels)
        p_depth.append(np.full(len(uniq), d, dtype=np.int64))
        n += len(uniq)
    if not p_parent:
        e = np.zeros(0, np.int64)
        return path, e, e, e
    return path, np.concatenate(p_parent), np.concatenate(p_code), np.concatenate(p_depth)


def _self_ns(parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each range's duration minus the part of its direct children inside it (as
    perfdiff.model.intervals.self_time_ns, from parents already found)."""
    child = np.flatnonzero(parent >= 0)
    overlap = np.maximum(np.minimum(end[child], end[parent[child]]) - start[child], 0)
    inner = np.bincount(parent[child], weights=overlap.astype(np.float64), minlength=len(start))
    return np.maximum((end - start).astype(np.float64) - inner, 0.0)


def _up(values: np.ndarray, p_parent: np.ndarray, p_depth: np.ndarray) -> np.ndarray:
    """Per-path values summed over each path's subtree (deepest level first)."""
    out = values.astype(np.float64).copy()
    for d in range(int(p_depth.max(initial=0)), 0, -1):
        ids = np.flatnonzero(p_depth == d)
        np.add.at(out, p_parent[ids], out[ids])
    return out


@dataclass(frozen=True)
class _GpuWork:
    """GPU work placed in the ranges: by launch (thread, launch ns) for the CPU-side ranges and
    by stream (a GPU-side range's stream key, start ns) for the GPU-side ones; `when`: the ns
    that picks its cycle (its launch; its start when unknown).  `reason`: why the GPU time of
    the CPU-side ranges is unknown (None: known)."""

    tid: np.ndarray
    at: np.ndarray
    busy: np.ndarray
    when: np.ndarray
    by_stream: np.ndarray  # bool: placed by stream
    reason: str | None


def _gpu_work(run: RunData, stream_keys: dict[tuple[str, int], int]) -> _GpuWork:
    """The run's GPU work (kernels, memcpys, memsets) as `_GpuWork`."""
    a = run.activity
    e = np.zeros(0, np.int64)
    empty = _GpuWork(e, e, np.zeros(0), e, np.zeros(0, dtype=bool), "no GPU work in the run")
    if len(a) == 0:
        return empty
    cats = list(a["kind"].cat.categories)
    want = [cats.index(k) for k in GPU_KINDS if k in cats]
    if not want:
        return empty
    rows = np.flatnonzero(np.isin(a["kind"].cat.codes.to_numpy(), want))
    launch, tid = a["launch_ns"].to_numpy()[rows], a["tid"].to_numpy()[rows]
    start, busy = a["start_ns"].to_numpy()[rows], a["busy_ns"].to_numpy()[rows].astype(np.float64)
    ok = (launch != MISSING) & (tid != MISSING)
    reason = None if ok.any() else "no GPU work with a known launch time and thread"
    parts = [(tid[ok], launch[ok], busy[ok], launch[ok], np.zeros(int(ok.sum()), dtype=bool))]
    if stream_keys:
        dcats = [str(c) for c in a["device"].cat.categories]
        dev, strm = a["device"].cat.codes.to_numpy()[rows], a["stream"].to_numpy()[rows]
        key = np.full(len(rows), MISSING, dtype=np.int64)
        for (device, stream), k in stream_keys.items():  # one pass per GPU stream
            if device in dcats:
                key[(dev == dcats.index(device)) & (strm == stream)] = k
        on = key != MISSING
        parts.append((key[on], start[on], busy[on], np.where(launch[on] != MISSING, launch[on], start[on]),
                      np.ones(int(on.sum()), dtype=bool)))
    return _GpuWork(*(np.concatenate([p[i] for p in parts]) for i in range(5)), reason=reason)


def _launch_parent(tid: np.ndarray, start: np.ndarray, end: np.ndarray, parent: np.ndarray, g_tid: np.ndarray,
                   g_launch: np.ndarray) -> np.ndarray:
    """The innermost range open on the launching thread at each launch (-1: none): the last
    range of the thread to start at or before it (of equal starts the shortest), or the first
    of its ancestors still open then.  One search per thread, then one step up per level."""
    out = np.full(len(g_tid), -1, dtype=np.int64)
    order = np.lexsort((-end, start, tid))
    t_sorted = tid[order]
    threads, first = np.unique(t_sorted, return_index=True)
    bounds = np.append(first, len(order))
    for k, t in enumerate(threads.tolist()):
        mine = np.flatnonzero(g_tid == t)
        if len(mine) == 0:
            continue
        rows = order[bounds[k]:bounds[k + 1]]
        pos = np.searchsorted(start[rows], g_launch[mine], side="right") - 1
        out[mine] = np.where(pos >= 0, rows[np.maximum(pos, 0)], -1)
    for _ in range(MAX_DEPTH):
        closed = np.flatnonzero(out >= 0)
        closed = closed[end[out[closed]] <= g_launch[closed]]
        if len(closed) == 0:
            break
        out[closed] = parent[out[closed]]
    return out


def _anchor(r: _Ranges, w: _GpuWork) -> np.ndarray:
    """The ns that picks each range's cycle: for a GPU-side range, the `when` of the first
    GPU work starting inside it on its stream (its start when none); for others, their start."""
    out = r.start.copy()
    rows = np.flatnonzero(r.gpu)
    for k in np.unique(r.tid[rows]).tolist():  # one search per GPU stream
        mine = rows[r.tid[rows] == k]
        work = np.flatnonzero(w.by_stream & (w.tid == k))
        if len(work) == 0:
            continue
        work = work[np.argsort(w.at[work], kind="stable")]
        pos = np.minimum(np.searchsorted(w.at[work], r.start[mine], side="left"), len(work) - 1)
        hit = (w.at[work[pos]] >= r.start[mine]) & (w.at[work[pos]] < r.end[mine])
        out[mine[hit]] = w.when[work[pos[hit]]]
    return out


def empty_profile(cycles: Cycles | None = None) -> RangeProfile:
    """The range tree of a run without ranges: no path, not nested."""
    e = np.zeros(0)
    return RangeProfile(np.zeros(0, np.int64), (), np.zeros(0, np.int64), np.zeros(0, np.int64), e, e, None,
                        np.zeros(0, np.int64), n_cycles=cycles.n if cycles is not None else 0, gpu_reason="no ranges")


@dataclass(frozen=True)
class RangeNesting:
    """A run's ranges nested by containment (`range_nesting`): each range's parent and depth
    (perfdiff.model.intervals.nesting_parent) and `nested`, whether one of the process's own
    ranges runs inside another (RangeProfile.nested; the report shows a range tree only then)."""

    ranges: _Ranges
    parent: np.ndarray  # (ranges,) index of its parent range, -1 for a top-level one
    depth: np.ndarray  # (ranges,)
    nested: bool


def range_nesting(run: RunData) -> RangeNesting:
    """The run's ranges and how they nest: the first and cheaper part of `range_profile`."""
    r = _ranges(run)
    if len(r.tid) == 0:
        return RangeNesting(r, np.zeros(0, np.int64), np.zeros(0, np.int64), False)
    parent, depth = nesting_parent(r.tid, r.start, r.end)
    own = r.own
    return RangeNesting(r, parent, depth, bool(np.any((parent >= 0) & own & own[np.maximum(parent, 0)])))


def range_profile(run: RunData, cycles: Cycles | None = None, nesting: RangeNesting | None = None) -> RangeProfile:
    """The run's range tree (see the module docstring); per cycle too when `cycles` are given.
    `nesting`: `range_nesting(run)` when already at hand."""
    n = nesting if nesting is not None else range_nesting(run)
    r = n.ranges
    tid, start, end = r.tid, r.start, r.end
    if len(tid) == 0:
        return empty_profile(cycles)
    parent, depth, nested = n.parent, n.depth, n.nested
    path, p_parent, p_code, p_depth = _paths(parent, depth, r.code, max(len(r.labels), 1))
    P = len(p_parent)
    p_gpu = r.label_gpu[p_code] if len(r.label_gpu) else np.zeros(P, dtype=bool)
    kept = path >= 0
    dur = (end - start).astype(np.float64)
    self_ns = _self_ns(parent, start, end)
    pk = path[kept]
    calls = np.bincount(pk, minlength=P)
    incl = np.bincount(pk, weights=dur[kept], minlength=P)
    self_total = np.bincount(pk, weights=self_ns[kept], minlength=P)
    tcode = np.unique(tid, return_inverse=True)[1].astype(np.int64).reshape(-1)
    pairs = np.unique(pk * (int(tcode.max()) + 1) + tcode[kept])
    threads = np.bincount(pairs // (int(tcode.max()) + 1), minlength=P)

    w = _gpu_work(run, r.stream_keys)
    # GPU time is known for the GPU-side paths (their stream's work) and, with launches, the others.
    cpu_unknown = w.reason is not None
    gpu_known = not cpu_unknown or bool(p_gpu.any())
    gpu_ns = g_path = None
    if gpu_known:
        g_parent = _launch_parent(tid, start, end, parent, w.tid, w.at)
        g_path = np.where(g_parent >= 0, path[np.maximum(g_parent, 0)], -1)
        inside = g_path >= 0
        gpu_ns = _up(np.bincount(g_path[inside], weights=w.busy[inside], minlength=P), p_parent, p_depth)
        if cpu_unknown:
            gpu_ns[~p_gpu] = np.nan

    names = tuple(r.labels[c] for c in p_code.tolist())
    base = dict(parent=p_parent, name=names, depth=p_depth, calls=calls, incl_ns=incl, self_ns=self_total,
                gpu_ns=gpu_ns, threads=threads, nested=nested, gpu_reason=w.reason if len(tid) else None,
                too_deep=int((~kept).sum()), gpu_side=p_gpu if p_gpu.any() else None)
    if cycles is None or cycles.n == 0:
        return RangeProfile(**base)
    cs, ce = cycles.start_ns, cycles.end_ns
    K = cycles.n
    anchor = _anchor(r, w)
    rk = np.flatnonzero(kept)
    # Calls: the cycle each range starts in (a GPU-side range: its anchor's).
    a_k = anchor[rk]
    c_start = np.searchsorted(cs, a_k, side="right") - 1
    in_cyc = (c_start >= 0) & (a_k < ce[np.maximum(c_start, 0)])
    calls_cyc = np.bincount(path[rk][in_cyc], minlength=P)
    # Inclusive and self time: one piece per (range, cycle it overlaps); a GPU-side range is
    # one whole piece in its anchor's cycle.
    cpu_r, gpu_r = rk[~r.gpu[rk]], rk[r.gpu[rk]]
    s, e = start[cpu_r], end[cpu_r]
    first = np.searchsorted(ce, s, side="right")
    last = np.searchsorted(cs, e, side="left") - 1
    span = np.maximum(last - first + 1, 0)
    rep = np.repeat(np.arange(len(cpu_r)), span)
    offs = np.cumsum(span) - span
    cyc = first[rep] + (np.arange(len(rep)) - offs[rep])
    overlap = (np.minimum(e[rep], ce[cyc]) - np.maximum(s[rep], cs[cyc])).clip(0).astype(np.float64)
    g_in = in_cyc[np.searchsorted(rk, gpu_r)]
    piece_r = np.concatenate((cpu_r[rep], gpu_r[g_in]))
    cyc = np.concatenate((cyc, c_start[np.searchsorted(rk, gpu_r)][g_in]))
    overlap = np.concatenate((overlap, dur[gpu_r[g_in]]))
    d = dur[piece_r]
    share = np.divide(overlap, d, out=np.zeros_like(overlap), where=d > 0)
    pr = path[piece_r]
    incl_cyc = np.bincount(pr, weights=overlap, minlength=P)
    self_cyc = np.bincount(pr, weights=self_ns[piece_r] * share, minlength=P)
    key = pr * K + cyc
    ukey, inv = np.unique(key[overlap > 0], return_inverse=True)
    coo = (ukey // K, ukey % K, np.bincount(inv, weights=overlap[overlap > 0], minlength=len(ukey)))
    gpu_cyc = None
    if g_path is not None:
        gc = np.searchsorted(cs, w.when, side="right") - 1
        ok = (g_path >= 0) & (gc >= 0) & (w.when < ce[np.maximum(gc, 0)])
        gpu_cyc = _up(np.bincount(g_path[ok], weights=w.busy[ok], minlength=P), p_parent, p_depth)
        if cpu_unknown:
            gpu_cyc[~p_gpu] = np.nan
    return RangeProfile(**base, n_cycles=K, calls_cyc=calls_cyc, incl_cyc_ns=incl_cyc, self_cyc_ns=self_cyc,
                        gpu_cyc_ns=gpu_cyc, incl_coo=coo)
