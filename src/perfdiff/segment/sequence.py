"""Cycles from the kernel sequence: the period at which the kernel names repeat (a training
step, not the layer inside it), the anchor kernel that starts each cycle, and the cut.

docs/STATISTICS.md, "Cycles and functions", source 4.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, RunData
from perfdiff.model.cuda_names import is_collective_kernel
from perfdiff.model.cycles import NoCycles, NoCyclesCode
from perfdiff.model.schema import GPU_KINDS, CycleSource
from perfdiff.segment.base import MIN_CYCLES, Cycles, empty_cycles, finish, short_name

__all__ = ["ClosingCollective", "KernelPeriod", "closing_collective", "cut_at_kernel", "kernel_launch_counts", "kernel_order", "kernel_period"]

_SEQ_WINDOW = 200_000  # kernels examined when looking for a repeating sequence
_SEQ_MATCH = 0.9  # share of positions that must repeat at period p
# A shorter period is taken only when it repeats nearly as well as the best one: a layer's
# kernels repeat within a step, but the step's own kernels break that repetition.
_SEQ_TOLERANCE = 0.005
# period candidates from the rarest kernels' launches, their first _RARE_SAMPLE (_period_candidates)
_RARE, _RARE_SPAN, _RARE_SAMPLE = 8, 32, 1024
_REGULAR_SPREAD = 0.25  # coefficient of variation of an anchor's distances (in kernels) that counts as regular
_REGULAR_MIN = 10  # launches of a regular anchor: fewer distances look alike by chance
# kernels every few iterations (_incidental): shares of a period's names and launches, and
# the least share of positions the shorter repeat must still match
_INCIDENTAL_NAMES, _INCIDENTAL_LAUNCHES, _INCIDENTAL_MATCH = 0.1, 0.01, 0.75
_ANCHORS = 8  # kernels kept that could anchor the period (another run may have renamed the first)
_PHASE_SPAN = 4_096  # kernels compared to choose where an anchor cut at every m-th launch starts


# The columns the kernel-order readers use: taking only these (not every activity column)
# halves what ordering a million kernels costs.
_ORDER_COLUMNS = ("function", "device", "start_ns", "end_ns", "busy_ns", "launch_ns")


def kernel_order(run: RunData) -> pd.DataFrame:
    """The run's kernel rows in launch order (start where the launch is unknown), the
    order time in column `_t` (ns); the columns of _ORDER_COLUMNS only."""
    a = run.activity
    rows = np.flatnonzero(a["kind"].isin(GPU_KINDS[:1]).to_numpy())
    cols = [c for c in _ORDER_COLUMNS if c in a.columns]
    if len(rows) == 0:
        return a.iloc[rows][cols].assign(_t=np.zeros(0, np.int64))
    start = a["start_ns"].to_numpy()[rows]
    t = a["launch_ns"].to_numpy()[rows]
    t = np.where(t != MISSING, t, start)
    order = np.lexsort((start, t))  # by _t, then start; stable, as a stable sort on both
    rows = rows[order]
    # Categorical columns stay categorical (codes taken, not strings).
    out = pd.DataFrame({c: a[c].array.take(rows) if isinstance(a[c].dtype, pd.CategoricalDtype)
                        else a[c].to_numpy()[rows] for c in cols})
    out["_t"] = t[order]
    return out


class KernelPeriod(NamedTuple):
    """A repeating kernel sequence: `period` kernels, cut at every `every`-th of the `launches`
    of kernel `anchor` (the first seen of the kernels launched fewest times per period).
    `flat`: every kernel of the sequence is launched as often per period (a layer of
    identical layers, with nothing of a step's own).  Where the sequence does not repeat
    position by position, `anchor` is a kernel launched at regular distances and `period` its
    mean distance (kernels per launch).  `anchors`: the kernels launched as often as `anchor`
    per period, in the order first seen (it first): another run may have renamed one."""

    period: int
    anchor: str
    launches: int
    every: int
    flat: bool
    anchors: tuple[str, ...]


def kernel_period(run: RunData) -> KernelPeriod | None:
    """The run's repeating kernel sequence (KernelPeriod), None when it does not repeat."""
    k = kernel_order(run)
    if len(k) < 6:
        return None
    codes_all = k["function"].cat.codes.to_numpy()
    named = codes_all >= 0  # a kernel without a name (code -1) has no place in a sequence
    codes_all = codes_all[named]
    if len(codes_all) < 6:
        return None
    names = k["function"].cat.categories
    busy = k["busy_ns"].to_numpy()[named][:_SEQ_WINDOW].astype(np.float64)
    period = _best_period(codes_all[:_SEQ_WINDOW], np.bincount(codes_all[:_SEQ_WINDOW], weights=busy))
    if period is not None:
        counts = np.bincount(codes_all, minlength=int(codes_all.max()) + 1)
        n_periods = len(codes_all) / period
        per = np.round(counts / n_periods)
        regular = (per >= 1) & (np.abs(counts - per * n_periods) <= np.maximum(per, 0.02 * per * n_periods))
        if regular.any():
            fewest = np.flatnonzero(regular & (per == per[regular].min()))
            first_pos = {c: int(np.argmax(codes_all == c)) for c in fewest}
            order = sorted(first_pos, key=first_pos.get)
            anchor = order[0]
            flat = bool(np.all(per[counts > 0.5 * n_periods] == per[anchor]))
            return KernelPeriod(period, str(names[anchor]), int(counts[anchor]), int(per[anchor]), flat,
                                tuple(str(names[c]) for c in order[:_ANCHORS]))
    regular_anchor = _regular_anchor(codes_all[:_SEQ_WINDOW])
    if regular_anchor is None:
        return None
    code, distance = regular_anchor
    return KernelPeriod(distance, str(names[code]), int(np.count_nonzero(codes_all == code)), 1, False,
                        (str(names[code]),))


class ClosingCollective(NamedTuple):
    """The collective kernel that closes each iteration: `name`, its `launches`, and its mean
    `distance` in kernels from one launch to the next."""

    name: str
    launches: int
    distance: int


def closing_collective(run: RunData) -> ClosingCollective | None:
    """The rarest collective kernel (perfdiff.model.cuda_names.is_collective_kernel) launched
    throughout the run at alike distances (as _regular_anchor), at least MIN_CYCLES + 1 times:
    the send/receive or all-reduce that ends a training step on every rank.  A kernel sequence
    that repeats many times between two of its launches is a layer inside the step, not the
    step (perfdiff.cycles.plan).  None without one."""
    # The names first (hundreds): a run without a collective kernel (one GPU) needs no
    # kernel order of its millions of kernels.  kernel_order keeps the run's categories.
    names = run.activity["function"].cat.categories
    wanted = np.array([is_collective_kernel(str(n)) for n in names], dtype=bool)
    if not wanted.any():
        return None
    k = kernel_order(run)
    if len(k) < 6:
        return None
    codes = k["function"].cat.codes.to_numpy()
    codes = codes[codes >= 0][:_SEQ_WINDOW]
    if len(codes) < 6:
        return None
    at = _Launches.of(codes)
    found = np.flatnonzero(wanted[:len(at.counts)] & (at.counts >= MIN_CYCLES + 1) & at.throughout)
    for c in sorted(found.tolist(), key=lambda c: (at.counts[c], at.first[c])):
        d = np.diff(at.positions(c))
        if d.std() <= _REGULAR_SPREAD * d.mean():
            return ClosingCollective(str(names[c]), int(at.counts[c]), int(round(d.mean())))
    return None


def _regular_anchor(seq: np.ndarray) -> tuple[int, int] | None:
    """(code, its mean distance in kernels) of the rarest kernel launched throughout `seq`, at
    least _REGULAR_MIN times, at alike distances (coefficient of variation at most
    _REGULAR_SPREAD), for a sequence that does not repeat position by position: a kernel of
    some steps only, or names that vary, shift every position after it, while a kernel of
    every step (the loss) still comes once a step."""
    at = _Launches.of(seq)
    for c in sorted(np.flatnonzero((at.counts >= _REGULAR_MIN) & at.throughout),
                    key=lambda c: (at.counts[c], at.first[c])):
        d = np.diff(at.positions(c))
        if d.std() <= _REGULAR_SPREAD * d.mean():
            return int(c), int(round(d.mean()))
    return None


class _Launches(NamedTuple):
    """Where each code of a sequence occurs: `sorted_pos` holds every code's positions in
    turn, code c's from `bounds[c]` to `bounds[c + 1]`; `counts` per code; `throughout`:
    first launched in the first third and last in the last (a warm-up kernel is not)."""

    sorted_pos: np.ndarray
    sorted_code: np.ndarray
    counts: np.ndarray
    bounds: np.ndarray
    throughout: np.ndarray

    @classmethod
    def of(cls, seq: np.ndarray) -> _Launches:
        n = len(seq)
        pos = np.arange(n)
        order = np.lexsort((pos, seq))
        counts = np.bincount(seq)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        p_sorted = pos[order]
        throughout = (p_sorted[np.minimum(bounds[:-1], n - 1)] < n / 3) \
            & (p_sorted[np.maximum(bounds[1:] - 1, 0)] >= 2 * n / 3)
        return cls(p_sorted, seq[order], counts, bounds, throughout)

    @property
    def first(self) -> np.ndarray:
        """Each code's first position (meaningless for a code that does not occur)."""
        return self.sorted_pos[np.minimum(self.bounds[:-1], len(self.sorted_pos) - 1)]

    def positions(self, c: int) -> np.ndarray:
        """The positions of code `c`, ascending."""
        return self.sorted_pos[self.bounds[c]:self.bounds[c + 1]]


def _best_period(seq: np.ndarray, busy: np.ndarray) -> int | None:
    """The period of the code sequence `seq`: the shortest candidate that repeats about as
    well as the best one (an iteration, not the layer that repeats inside it), None when no
    candidate repeats at _SEQ_MATCH of the positions.  `busy`: each code's GPU time (ns)."""
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
    period = next((p for p, match in tried if match >= bar), None)
    if period is None:
        return None
    # A few kernels every k iterations (a metrics reduction every 10 steps) make k iterations
    # the best repeat; where they are all that a shorter repeat q lacks, q is the iteration.
    counts = np.bincount(seq)
    return next((q for q, match in tried if q < period and _incidental(counts, busy, period, q, match)), period)


def _incidental(counts: np.ndarray, busy: np.ndarray, period: int, q: int, match: float) -> bool:
    """Whether `period` is k ≥ 2 repeats of the shorter `q`, which repeats at `match` of the
    positions (at least _INCIDENTAL_MATCH), plus incidental kernels: kernels launched fewer
    than k times per period (not in every q), under _INCIDENTAL_NAMES of its kernel names and
    _INCIDENTAL_LAUNCHES of its launches and GPU time (an optimizer every k micro-batches is
    no incidental kernel), which explain q's mismatches (each shifts the positions of about
    one q after it); and q is no flat layer but a step with kernels of its own.  A step is
    also many layers plus kernels of its own (embedding, loss, optimizer), but those are a
    larger share of its names.  `counts`, `busy`: each code's launches and GPU time (ns)."""
    k = round(period / q)
    if k < 2 or abs(period - k * q) > max(k, 0.02 * period):
        return False
    n = counts.sum()
    per = counts / (n / period)  # launches per period
    present = per >= 0.5
    extra = present & (per < k - 0.5)
    shifts = per[extra].sum()
    # q must be an iteration of its own: some kernels once per q and others more often (a
    # step's loss among its layers), not a flat layer.
    per_q = counts / (n / q)
    per_q = np.round(per_q[per_q >= 0.5])
    return (0 < np.count_nonzero(extra) < _INCIDENTAL_NAMES * np.count_nonzero(present)
            and shifts < _INCIDENTAL_LAUNCHES * per[present].sum()
            and busy[extra].sum() < _INCIDENTAL_LAUNCHES * busy[present].sum()
            and match >= max(_INCIDENTAL_MATCH, 1.0 - 1.5 * shifts * q / period)
            and len(per_q) > 0 and per_q.min() == 1 and per_q.max() > 1)


def _period_candidates(seq: np.ndarray) -> np.ndarray:
    """Candidate periods, ascending: the typical distance between consecutive launches of each
    kernel, and between a launch and the 2nd … _RARE_SPAN-th next of the _RARE rarest kernels
    launched throughout the sequence (an iteration launches them a few times each; a few
    warm-up kernels at the start would crowd them out)."""
    at = _Launches.of(seq)
    same = at.sorted_code[1:] == at.sorted_code[:-1]
    gaps = (at.sorted_pos[1:] - at.sorted_pos[:-1])[same]
    if len(gaps) == 0:
        return np.zeros(0, np.int64)
    found = [pd.Series(gaps).groupby(at.sorted_code[1:][same]).median().to_numpy()]
    rare = np.flatnonzero((at.counts >= 4) & at.throughout)
    for c in rare[np.argsort(at.counts[rare], kind="stable")][:_RARE]:
        launches = at.positions(c)[:_RARE_SAMPLE]
        span = min(_RARE_SPAN, len(launches) - 2)
        w = np.lib.stride_tricks.sliding_window_view(launches, span + 1)
        found.append(np.median(w[:, 2:] - w[:, :1], axis=0))  # launch to its 2nd … span-th next
    return np.unique(np.concatenate(found).astype(np.int64))


def cut_at_kernel(run: RunData, anchor: str, period: int | None = None, every: int = 1) -> Cycles | None:
    """Cycles that start at every `every`-th launch of kernel `anchor` (the last, open-ended
    one dropped), from the one of its first `every` launches chosen by `_phase`."""
    k = kernel_order(run)
    if len(k) == 0:
        return None
    hit = (k["function"] == anchor).to_numpy()
    first = _phase(k, np.flatnonzero(hit), every, period or 1) if every > 1 else 0
    starts = k["_t"].to_numpy()[hit][first::every]
    if len(starts) < MIN_CYCLES + 1:
        return empty_cycles(CycleSource.KERNEL_SEQUENCE, NoCycles(
            NoCyclesCode.FEW_ANCHOR_STARTS, name=anchor, launches=int(hit.sum()), every=every, count=len(starts)))
    t_end = int(run.activity["end_ns"].max())
    ends = np.append(starts[1:], max(t_end, int(starts[-1]) + 1))
    # The last cycle is open-ended (it may hold the tail of the trace): drop it.
    starts, ends = starts[:-1], ends[:-1]
    what = f"period {period} kernel(s), " if period else ""
    launch = "at each launch" if every == 1 else f"every {every} launches"
    detail = f"repeating kernel sequence: {what}a cycle starts {launch} of {short_name(anchor)}"
    return finish(starts, ends, CycleSource.KERNEL_SEQUENCE, detail)


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


def kernel_launch_counts(run: RunData) -> dict[str, int]:
    """Launches per kernel name."""
    a = run.activity
    k = a["function"][(a["kind"] == GPU_KINDS[0]).to_numpy()]
    if len(k) == 0:
        return {}
    counts = k.value_counts(sort=False)
    return {str(name): int(n) for name, n in counts.items() if n > 0}
