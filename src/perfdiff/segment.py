"""Split a run's timeline into cycles (iterations of its main loop).

Sources, in order, unless the user names one (docs/STATISTICS.md, "Cycles and functions"):
1. perfdiff markers written by the target;
2. annotation ranges: ``ProfilerStep#N``, or an NVTX/annotation range name that repeats;
3. a repeating kernel sequence (the shortest period that repeats about as well as the best
   one; a cycle starts at every m-th launch of a kernel launched m times a period);
4. GPU idle-gap segmentation (threshold from the gap distribution);
5. fixed windows.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import NamedTuple
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, RunData
from perfdiff.errors import InputError
from perfdiff.model.cycles import CyclePlan
from perfdiff.model.schema import GPU_KINDS, CycleSource, MarkerSource

DEFAULT_WINDOW_NS = 100_000_000
MIN_CYCLES = 2
MAX_WINDOWS = 1_000_000  # fixed windows of one run: beyond, a window far too short for the run (memory)
_SEQ_WINDOW = 200_000  # kernels examined when looking for a repeating sequence
_SEQ_MATCH = 0.9  # share of positions that must repeat at period p
# A shorter period is taken only when it repeats nearly as well as the best one: a layer's
# kernels repeat within a step, but the step's own kernels break that repetition.
_SEQ_TOLERANCE = 0.005
# period candidates from the rarest kernels' launches, their first _RARE_SAMPLE (_period_candidates)
_RARE, _RARE_SPAN, _RARE_SAMPLE = 8, 32, 1024
_REGULAR_SPREAD = 0.25  # coefficient of variation of an anchor's distances (in kernels) that counts as regular
_PHASE_SPAN = 4_096  # kernels compared to choose where an anchor cut at every m-th launch starts
_WORK_SAMPLE = 20_000  # GPU rows sampled to tell what share of the work a range holds


@dataclass(frozen=True)
class Cycles:
    """Cycle bounds [start_ns, end_ns) in wall-clock ns, and how they were found."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    source: str  # perfdiff-markers | profiler-step | annotation | kernel-sequence | idle-gaps | window | regex
    detail: str  # in words, for the report
    dropped: int = 0  # cycles dropped for a non-positive or non-finite duration

    @property
    def n(self) -> int:
        return int(len(self.start_ns))

    @property
    def dur_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns


def _finish(start: np.ndarray, end: np.ndarray, source: str, detail: str) -> Cycles:
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    ok = end > start
    return Cycles(start[ok], end[ok], source, detail, int((~ok).sum()))


def _ranges_to_cycles(m: pd.DataFrame, source: str, detail: str, to_next: bool = False) -> Cycles:
    """Ranges become cycles as they are, or with `to_next` each runs from one range's start to
    the next's (the last dropped); point marks become the spans between consecutive marks."""
    start = m["start_ns"].to_numpy(dtype=np.int64)
    end = m["end_ns"].to_numpy(dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    if len(start) and np.all(end == start):
        return _finish(start[:-1], start[1:], source, detail + " (point marks: each cycle runs to the next mark)")
    if to_next:
        return _finish(start[:-1], start[1:], source, detail + ", each cycle running to the next one's start")
    return _finish(start, end, source, detail)


def timeline_ns(run: RunData) -> tuple[int, int]:
    """First and last instant (ns) of the run's activity (else of its samples)."""
    a = run.activity
    if len(a) == 0:
        s = run.samples
        if len(s) == 0:
            return 0, 0
        return int(s["t_start_ns"].min()), int(s["t_end_ns"].max())
    return int(a["start_ns"].min()), int(a["end_ns"].max())


def fixed_windows(run: RunData, window_ns: int, reason: str = "") -> Cycles:
    """Consecutive windows of `window_ns` over the run's activity span.  InputError when they
    would be more than MAX_WINDOWS (a window far too short for the run)."""
    t0, t1 = timeline_ns(run)
    if t1 <= t0:
        return _finish(np.array([], np.int64), np.array([], np.int64), "window", "no activity")
    if (t1 - t0) // window_ns > MAX_WINDOWS:
        raise InputError(f"windows of {_ms(window_ns)} cut this run's {_ms(t1 - t0)} into more than "
                         f"{MAX_WINDOWS:,} cycles: choose a window of at least {_ms((t1 - t0) // MAX_WINDOWS + 1)}",
                         path=run.path)
    if t1 - t0 < window_ns // 2:
        return _finish(np.array([], np.int64), np.array([], np.int64), "window",
                       f"its activity spans {_ms(t1 - t0)}, under half a window of {_ms(window_ns)}"
                       + (f" ({reason})" if reason else ""))
    edges = np.arange(t0, t1, window_ns, dtype=np.int64)
    ends = np.minimum(edges + window_ns, t1)
    # A final partial window shorter than half a window would skew the distribution.
    keep = (ends - edges) >= window_ns // 2
    detail = f"fixed windows of {window_ns / 1e6:g} ms" + (f" ({reason})" if reason else "")
    return _finish(edges[keep], ends[keep], "window", detail)


def _ms(ns: int) -> str:
    """A duration given in ns, as ms for a message (four significant digits)."""
    return f"{ns / 1e6:,.4g} ms"


def _kernel_order(run: RunData) -> pd.DataFrame:
    a = run.activity
    k = a[a["kind"].isin(GPU_KINDS[:1])]
    if len(k) == 0:
        return k
    t = k["launch_ns"].to_numpy()
    t = np.where(t != MISSING, t, k["start_ns"].to_numpy())
    k = k.assign(_t=t)
    return k.sort_values(["_t", "start_ns"], kind="stable")


class KernelPeriod(NamedTuple):
    """A repeating kernel sequence: `period` kernels, cut at every `every`-th of the `launches`
    of kernel `anchor` (the first seen of the kernels launched fewest times per period)."""

    period: int
    anchor: str
    launches: int
    every: int


def kernel_period(run: RunData) -> KernelPeriod | None:
    """The run's repeating kernel sequence (KernelPeriod), None when it does not repeat."""
    k = _kernel_order(run)
    if len(k) < 6:
        return None
    codes_all = k["function"].cat.codes.to_numpy()
    codes_all = codes_all[codes_all >= 0]  # a kernel without a name (code -1) has no place in a sequence
    if len(codes_all) < 6:
        return None
    names = k["function"].cat.categories
    period = _best_period(codes_all[:_SEQ_WINDOW])
    if period is None:
        regular = _regular_anchor(codes_all[:_SEQ_WINDOW])
        if regular is None:
            return None
        code, distance = regular
        return KernelPeriod(distance, str(names[code]), int(np.count_nonzero(codes_all == code)), 1)
    counts = np.bincount(codes_all, minlength=int(codes_all.max()) + 1)
    n_periods = len(codes_all) / period
    per = np.round(counts / n_periods)
    regular = (per >= 1) & (np.abs(counts - per * n_periods) <= np.maximum(per, 0.02 * per * n_periods))
    if not regular.any():
        return None
    fewest = np.flatnonzero(regular & (per == per[regular].min()))
    first_pos = {c: int(np.argmax(codes_all == c)) for c in fewest}
    anchor = min(first_pos, key=first_pos.get)
    return KernelPeriod(period, str(names[anchor]), int(counts[anchor]), int(per[anchor]))


def _regular_anchor(seq: np.ndarray) -> tuple[int, int] | None:
    """(code, its median distance in kernels) of the rarest kernel launched throughout `seq`
    (at least four times) at alike distances (coefficient of variation at most
    _REGULAR_SPREAD), for a sequence that does not repeat position by position: a kernel of
    some steps only, or names that vary, shift every position after it, while a kernel of
    every step (the loss) still comes once a step."""
    n = len(seq)
    pos = np.arange(n)
    order = np.lexsort((pos, seq))
    p_sorted = pos[order]
    counts = np.bincount(seq)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    spans = (p_sorted[bounds[:-1]] < n / 3) & (p_sorted[np.maximum(bounds[1:] - 1, 0)] >= 2 * n / 3)
    for c in sorted(np.flatnonzero((counts >= 4) & spans), key=lambda c: (counts[c], p_sorted[bounds[c]])):
        d = np.diff(p_sorted[bounds[c]:bounds[c + 1]])
        if d.std() <= _REGULAR_SPREAD * d.mean():
            return int(c), int(np.median(d))
    return None


def _best_period(seq: np.ndarray) -> int | None:
    """The period of the code sequence `seq`: the shortest candidate that repeats about as
    well as the best one (an iteration, not the layer that repeats inside it), None when no
    candidate repeats at _SEQ_MATCH of the positions."""
    n = len(seq)
    candidates = _period_candidates(seq)
    candidates = candidates[(candidates >= 1) & (candidates <= n // 3)]
    best, tried = 0.0, []
    for p in candidates:
        match = np.count_nonzero(seq[:-p] == seq[p:]) / (n - p)
        tried.append((int(p), match))
        best = max(best, match)
        if match >= 1.0 - _SEQ_TOLERANCE:
            break  # nothing longer can repeat better by more than the tolerance
    bar = max(_SEQ_MATCH, best - _SEQ_TOLERANCE)
    return next((p for p, match in tried if match >= bar), None)


def _period_candidates(seq: np.ndarray) -> np.ndarray:
    """Candidate periods, ascending: the typical distance between consecutive launches of each
    kernel, and between a launch and the 2nd … _RARE_SPAN-th next of the _RARE rarest kernels
    launched throughout the sequence (an iteration launches them a few times each)."""
    n = len(seq)
    pos = np.arange(n)
    order = np.lexsort((pos, seq))
    s_sorted, p_sorted = seq[order], pos[order]
    same = s_sorted[1:] == s_sorted[:-1]
    gaps = (p_sorted[1:] - p_sorted[:-1])[same]
    if len(gaps) == 0:
        return np.zeros(0, np.int64)
    found = [pd.Series(gaps).groupby(s_sorted[1:][same]).median().to_numpy()]
    counts = np.bincount(seq)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    # Kernels launched throughout (first in the first third, last in the last): a few warm-up
    # kernels at the start would crowd out the ones an iteration launches a few times.
    spans = (p_sorted[bounds[:-1]] < n / 3) & (p_sorted[np.maximum(bounds[1:] - 1, 0)] >= 2 * n / 3)
    rare = np.flatnonzero((counts >= 4) & spans)
    for c in rare[np.argsort(counts[rare], kind="stable")][:_RARE]:
        at = p_sorted[bounds[c]:bounds[c + 1]][:_RARE_SAMPLE]
        span = min(_RARE_SPAN, len(at) - 2)
        w = np.lib.stride_tricks.sliding_window_view(at, span + 1)
        found.append(np.median(w[:, 2:] - w[:, :1], axis=0))  # launch to its 2nd … span-th next
    return np.unique(np.concatenate(found).astype(np.int64))


def cut_at_kernel(run: RunData, anchor: str, period: int | None = None, every: int = 1) -> Cycles | None:
    """Cycles that start at every `every`-th launch of kernel `anchor` (the last, open-ended
    one dropped), from the one of its first `every` launches chosen by `_phase`."""
    k = _kernel_order(run)
    if len(k) == 0:
        return None
    hit = (k["function"] == anchor).to_numpy()
    first = _phase(k, np.flatnonzero(hit), every, period or 1) if every > 1 else 0
    starts = k["_t"].to_numpy()[hit][first::every]
    if len(starts) < MIN_CYCLES + 1:
        return None
    t_end = int(run.activity["end_ns"].max())
    ends = np.append(starts[1:], max(t_end, int(starts[-1]) + 1))
    # The last cycle is open-ended (it may hold the tail of the trace): drop it.
    starts, ends = starts[:-1], ends[:-1]
    what = f"period {period} kernel(s), " if period else ""
    launch = "at each launch" if every == 1 else f"every {every} launches"
    detail = f"repeating kernel sequence: {what}a cycle starts {launch} of {_short(anchor)}"
    return _finish(starts, ends, "kernel-sequence", detail)


def _phase(k: pd.DataFrame, hits: np.ndarray, every: int, period: int) -> int:
    """Which of the anchor's first `every` launches (positions `hits` in kernel order `k`)
    starts the first cycle: the one followed by the least kernel names in name order, over up
    to one period.  It depends on what the kernels are, not on where the trace began, so
    every rank of a job (and both runs) starts its cycles at the same place in the step."""
    if len(hits) < every:
        return 0
    categories = k["function"].cat.categories
    rank = np.empty(len(categories), np.int64)
    rank[np.argsort(np.asarray(categories, dtype=str), kind="stable")] = np.arange(len(categories))
    codes = k["function"].cat.codes.to_numpy()
    seq = np.where(codes >= 0, rank[np.maximum(codes, 0)], -1)
    span = min(period, _PHASE_SPAN, len(seq) - int(hits[every - 1]))
    windows = np.stack([seq[h:h + span] for h in hits[:every]])
    return int(np.lexsort(windows.T[::-1])[0])


GAP_SAMPLE = 200_000  # idle gaps kept per run for the joint threshold
GAP_TOP = 20_000  # of them, the longest kept exactly


def _gpu_busy(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """Start times and running end (max of ends so far) of the GPU rows, by start."""
    a = run.activity
    g = a[a["kind"].isin(GPU_KINDS)]
    if len(g) < 4:
        return None
    order = np.argsort(g["start_ns"].to_numpy(), kind="stable")
    return g["start_ns"].to_numpy()[order], np.maximum.accumulate(g["end_ns"].to_numpy()[order])


@dataclass(frozen=True)
class IdleGaps:
    """A run's positive GPU idle gaps, as the plan needs them (small: it crosses processes).

    `sample_ns`: sorted, at most GAP_SAMPLE of them (the GAP_TOP longest exactly, evenly
    spaced quantiles of the rest); `long_ns`, `long_row`: the GAP_TOP longest in time order,
    each with the index of the GPU row that follows it (rows in start order); `block_ns`,
    `block_row`: the first GAP_TOP in time order, alike; `rows`: the GPU rows."""

    sample_ns: np.ndarray
    long_ns: np.ndarray
    long_row: np.ndarray
    block_ns: np.ndarray
    block_row: np.ndarray
    rows: int

    def cycles(self, threshold_ns: float) -> int:
        """Cycles that splitting at gaps longer than `threshold_ns` gives."""
        return int(np.count_nonzero(self.sample_ns > threshold_ns)) + 1

    def spread(self, threshold_ns: float) -> float:
        """Coefficient of variation of the GPU rows per cycle when split at gaps longer than
        `threshold_ns`: over all cycles (the first and last, maybe partial, included) where
        every such gap is among `long_ns`, else over the whole cycles within the first
        GAP_TOP gaps; NaN when that holds fewer than two."""
        cut = self.long_ns > threshold_ns
        if self.cycles(threshold_ns) - 1 <= np.count_nonzero(cut):
            per = np.diff(np.concatenate([[0], self.long_row[cut], [self.rows]]))
        else:
            per = np.diff(self.block_row[self.block_ns > threshold_ns])
        if len(per) < 2 or per.mean() <= 0:
            return float("nan")
        return float(per.std() / per.mean())


def idle_gaps(run: RunData) -> IdleGaps:
    """The run's positive GPU idle gaps (IdleGaps)."""
    busy = _gpu_busy(run)
    if busy is None:
        empty = np.zeros(0, np.int64)
        return IdleGaps(np.zeros(0), np.zeros(0), empty, np.zeros(0), empty, 0)
    s, e = busy
    gaps = s[1:] - e[:-1]
    row = np.flatnonzero(gaps > 0)
    longest = row if len(row) <= GAP_TOP else row[np.argpartition(gaps[row], -GAP_TOP)[-GAP_TOP:]]
    longest = np.sort(longest)
    block = row[:GAP_TOP]
    pos = np.sort(gaps[row].astype(np.float64))
    if len(pos) > GAP_SAMPLE:
        body, top = pos[:-GAP_TOP], pos[-GAP_TOP:]
        body = body[np.linspace(0, len(body) - 1, GAP_SAMPLE - GAP_TOP).astype(np.int64)]
        pos = np.concatenate([body, top])
    return IdleGaps(pos, gaps[longest].astype(np.float64), longest + 1, gaps[block].astype(np.float64), block + 1,
                    len(s))


def idle_gap_thresholds(gaps_ns: np.ndarray) -> list[tuple[float, float]]:
    """Gap lengths (ns) that may separate "between iterations" gaps from the launch gaps
    inside one: a point in each jump of at least ×3 among the upper half of the sorted gap
    sizes (geometric middle), shortest first, each with its jump (a ratio)."""
    if len(gaps_ns) < 3:
        return []
    lg = np.sort(np.log(gaps_ns.astype(np.float64)))
    lo = len(lg) // 2
    jumps = np.diff(lg[lo:])
    at = np.flatnonzero(jumps >= np.log(3.0))
    return [(float(np.exp((lg[lo + j] + lg[lo + j + 1]) / 2)), float(np.exp(jumps[j]))) for j in at]


def cut_at_gaps(run: RunData, threshold_ns: float) -> Cycles | None:
    """Cycles split at GPU idle gaps longer than `threshold_ns`; a cycle runs from one burst's
    start to the next burst's start (the gap belongs to it)."""
    busy = _gpu_busy(run)
    if busy is None:
        return None
    s, e = busy
    gaps = s[1:] - e[:-1]
    cut = np.flatnonzero(gaps > threshold_ns)
    starts = np.concatenate([[s[0]], s[cut + 1]])
    ends = np.concatenate([e[cut], [e[-1]]])
    if len(starts) < 3:
        return None
    cyc_end = np.append(starts[1:], ends[-1])
    detail = f"GPU idle gaps longer than {threshold_ns / 1e3:.1f} µs split the timeline"
    return _finish(starts, cyc_end, "idle-gaps", detail)


def repeated_ranges(m: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Range names that repeat (≥ 3 times) without overlapping: name → (count, covered ns)."""
    out: dict[str, tuple[int, int]] = {}
    if len(m) == 0:
        return out
    m = m[m["end_ns"] > m["start_ns"]]
    for name, grp in m.groupby("name", observed=True, sort=False):
        if len(grp) < 3:
            continue
        order = np.argsort(grp["start_ns"].to_numpy(), kind="stable")
        s = grp["start_ns"].to_numpy()[order]
        e = grp["end_ns"].to_numpy()[order]
        if np.any(s[1:] < e[:-1]):
            continue  # overlapping ranges (several threads, nesting) are not iterations
        out[str(name)] = (len(grp), int((e - s).sum()))
    return out


def range_work_share(run: RunData, m: pd.DataFrame, names: Iterable[str]) -> dict[str, float]:
    """For each range name of `names` (ranges in `m`): the share of the run's GPU work (rows,
    at their launch, else start) that falls inside its ranges; NaN without GPU work.  Ranges
    that hold the work are iterations; ranges that hold little of it mark one part of each."""
    a = run.activity
    g = a[a["kind"].isin(GPU_KINDS).to_numpy()]
    if len(g) == 0:
        return {name: float("nan") for name in names}
    t = g["launch_ns"].to_numpy()
    t = np.where(t != MISSING, t, g["start_ns"].to_numpy())
    if len(t) > _WORK_SAMPLE:
        t = t[np.linspace(0, len(t) - 1, _WORK_SAMPLE).astype(np.int64)]
    out = {}
    for name in names:
        r = range_rows(m, name)
        order = np.argsort(r["start_ns"].to_numpy(), kind="stable")
        s, e = r["start_ns"].to_numpy()[order], r["end_ns"].to_numpy()[order]
        i = np.searchsorted(s, t, side="right") - 1
        out[name] = float(np.mean((i >= 0) & (t < e[np.maximum(i, 0)])))
    return out


def range_rows(m: pd.DataFrame, name: str) -> pd.DataFrame:
    """The non-empty ranges called `name`."""
    return m[((m["name"].astype(str) == name) & (m["end_ns"] > m["start_ns"])).to_numpy()]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


STEP_NAME = r"ProfilerStep#\d+"


def source_rows(markers: pd.DataFrame, source: CycleSource) -> pd.DataFrame:
    """The marker rows a cycle source reads: the target's perfdiff markers, the profiler's
    ProfilerStep#N ranges, or (ANNOTATION) every range not written by perfdiff."""
    if len(markers) == 0:
        return markers
    if source == CycleSource.PROFILER_STEP:
        return markers[markers["name"].astype(str).str.fullmatch(STEP_NAME).to_numpy()]
    own = (markers["source"].astype(str) == MarkerSource.PERFDIFF.value).to_numpy()
    return markers[own if source == CycleSource.PERFDIFF_MARKERS else ~own]


def marker_cycles(m: pd.DataFrame, source: CycleSource, name: str | None = None, to_next: bool = False) -> Cycles:
    """Cycles from marker ranges of one source (ranges as they are, or from start to start with
    `to_next`; point marks as the spans between consecutive marks)."""
    if source == CycleSource.PERFDIFF_MARKERS:
        return _ranges_to_cycles(m, source.value, "perfdiff cycle markers from the target")
    if source == CycleSource.PROFILER_STEP:
        return _ranges_to_cycles(m, source.value, f"{len(m)} ProfilerStep#N ranges")
    return _ranges_to_cycles(m, source.value, f"repeating range {_short(name or '')!r} ({len(m)}×)", to_next)


def gpu_busy_by_device(run: RunData) -> dict[str, float]:
    """Busy ns of the GPU work (kernels, memcpys, memsets) on each device."""
    a = run.activity
    g = a[a["kind"].isin(GPU_KINDS).to_numpy()]
    if len(g) == 0:
        return {}
    sums = g.groupby("device", observed=True)["busy_ns"].sum()
    return {str(d): float(v) for d, v in sums.items() if v > 0}


def rename_devices(run: RunData, device_map: tuple[tuple[str, str], ...]) -> RunData:
    """`run` with its devices renamed (old, new) in the activity, samples and GPU-side range
    tables (a GPU-side range keeps finding its stream's work on the renamed GPU)."""
    if not device_map:
        return run
    mapping = dict(device_map)
    tables = {}
    for name in ("activity", "samples", "gpu_ranges"):
        df = getattr(run, name)
        if df is None or len(df) == 0:
            continue
        if not isinstance(df["device"].dtype, pd.CategoricalDtype):
            df = df.assign(device=pd.Categorical(df["device"].astype(str)))
        cats = [str(c) for c in df["device"].cat.categories]
        # A new name may already be a category (another device's): rebuild from the codes.
        renamed = [mapping.get(c, c) for c in cats]
        uniq = list(dict.fromkeys(renamed))
        lookup = np.array([uniq.index(r) for r in renamed], dtype=np.int64)
        codes = df["device"].cat.codes.to_numpy()
        new = pd.Categorical.from_codes(np.where(codes >= 0, lookup[np.maximum(codes, 0)], -1),
                                        categories=pd.Index(pd.array(uniq, dtype=str)))
        tables[name] = df.assign(device=new)
    return dataclasses.replace(run, **tables)


def kernel_launch_counts(run: RunData) -> dict[str, int]:
    """Launches per kernel name."""
    a = run.activity
    k = a["function"][(a["kind"] == GPU_KINDS[0]).to_numpy()]
    if len(k) == 0:
        return {}
    counts = k.value_counts(sort=False)
    return {str(name): int(n) for name, n in counts.items() if n > 0}


def cut_cycles(run: RunData, plan: CyclePlan) -> Cycles:
    """Cut `run` into cycles by `plan`.  Raises InputError when fewer than 2 cycles result."""
    cycles = _cut(run, plan)
    if cycles.n == 0:
        raise InputError(f"no cycles found: {cycles.detail}", path=run.path)
    if cycles.n < MIN_CYCLES:
        raise InputError(
            f"only {cycles.n} cycle found ({cycles.detail}): comparing needs at least "
            f"{MIN_CYCLES}; collect longer or choose cycles with --cycle REGEX / --window DURATION",
            path=run.path)
    return cycles


def _cut(run: RunData, plan: CyclePlan) -> Cycles:
    src = plan.source
    markers = run.markers
    if src == CycleSource.WINDOW:
        reason = "chosen with --window" if plan.chosen_by_user else \
            "no markers, no repeating kernel sequence, no clear GPU idle gaps"
        return _with_one_sided(fixed_windows(run, int(plan.window_ns or DEFAULT_WINDOW_NS), reason), plan)
    if src == CycleSource.REGEX:
        return _regex_cycles(run, str(plan.name))
    if src in (CycleSource.PERFDIFF_MARKERS, CycleSource.PROFILER_STEP, CycleSource.ANNOTATION):
        rows = source_rows(markers, src)
        if src == CycleSource.ANNOTATION:
            rows = range_rows(rows, str(plan.name))
        return _with_one_sided(marker_cycles(rows, src, plan.name, plan.to_next_start), plan)
    if src == CycleSource.KERNEL_SEQUENCE:
        cyc = cut_at_kernel(run, str(plan.name), plan.period, plan.anchor_every)
    else:
        cyc = cut_at_gaps(run, float(plan.threshold_ns or 0.0))
    if cyc is None:
        cyc = _finish(np.array([], np.int64), np.array([], np.int64), src.value, "no activity")
    return _with_one_sided(cyc, plan)


def _with_one_sided(cyc: Cycles, plan: CyclePlan) -> Cycles:
    """Say in the detail which sources were passed over for having too few cycles."""
    if not plan.one_sided:
        return cyc
    few = ", ".join(f"{n_n}/{n_a} {src} cycle(s)" for src, n_n, n_a in plan.one_sided
                    if src != CycleSource.ANNOTATION.value)
    if not few:
        return cyc
    return Cycles(cyc.start_ns, cyc.end_ns, cyc.source,
                  f"{cyc.detail} (only {few} in the normal/abnormal run: too few to compare)", cyc.dropped)


def cycle_pattern(cycle_regex: str) -> re.Pattern:
    """--cycle compiled; InputError (one line) for a pattern Python cannot compile."""
    try:
        return re.compile(cycle_regex)
    except (re.error, OverflowError, RecursionError) as exc:
        raise InputError(f"bad --cycle regular expression {cycle_regex!r}: {exc}") from None


def _matching(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """Which rows' names rx finds a match in: searched once per distinct name (no warning
    about the groups a user's pattern may have, as str.contains gives)."""
    s = names.astype(str)
    found = [x for x in pd.unique(s) if rx.search(x)]
    return s.isin(found).to_numpy()


def _regex_cycles(run: RunData, cycle_regex: str) -> Cycles:
    """Cycles from marker ranges (else kernel launches) whose name matches `cycle_regex`."""
    markers = run.markers
    rx = cycle_pattern(cycle_regex)
    hit = markers[_matching(markers["name"], rx)] if len(markers) else markers
    if len(hit):
        return _ranges_to_cycles(hit, "regex", f"marker ranges matching /{cycle_regex}/")
    k = _kernel_order(run)
    if len(k):
        hk = k[_matching(k["function"], rx)]
        if len(hk) >= 2:
            t = hk["_t"].to_numpy()
            end = np.append(t[1:], t[-1])
            return _finish(t[:-1], end[:-1], "regex",
                           f"a cycle starts at each launch of a kernel matching /{cycle_regex}/")
    raise InputError(f"no marker or kernel matches --cycle {cycle_regex!r}", path=run.path)
