"""Split a run's timeline into cycles (iterations of its main loop).

Sources, in order, unless the user names one (docs/STATISTICS.md, "Cycles and functions"):
1. perfdiff markers written by the target;
2. annotation ranges: ``ProfilerStep#N``, or an NVTX/annotation range name that repeats;
3. a repeating kernel sequence (smallest period p; a cycle starts at each occurrence of the
   period's first kernel);
4. GPU idle-gap segmentation (threshold from the gap distribution);
5. fixed windows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, RunData
from perfdiff.errors import InputError
from perfdiff.model.schema import GPU_KINDS

DEFAULT_WINDOW_NS = 100_000_000
MIN_CYCLES = 2
_SEQ_WINDOW = 200_000  # kernels examined when looking for a repeating sequence
_SEQ_MATCH = 0.9  # share of positions that must repeat at period p


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


def _ranges_to_cycles(m: pd.DataFrame, source: str, detail: str) -> Cycles:
    """Ranges become cycles as they are; point marks become the spans between consecutive marks."""
    start = m["start_ns"].to_numpy(dtype=np.int64)
    end = m["end_ns"].to_numpy(dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    if len(start) and np.all(end == start):
        return _finish(start[:-1], start[1:], source, detail + " (point marks: each cycle runs to the next mark)")
    return _finish(start, end, source, detail)


def _timeline(run: RunData) -> tuple[int, int]:
    a = run.activity
    if len(a) == 0:
        s = run.samples
        if len(s) == 0:
            return 0, 0
        return int(s["t_start_ns"].min()), int(s["t_end_ns"].max())
    return int(a["start_ns"].min()), int(a["end_ns"].max())


def fixed_windows(run: RunData, window_ns: int, reason: str = "") -> Cycles:
    """Consecutive windows of `window_ns` over the run's activity span."""
    t0, t1 = _timeline(run)
    if t1 <= t0:
        return _finish(np.array([], np.int64), np.array([], np.int64), "window", "no activity")
    edges = np.arange(t0, t1, window_ns, dtype=np.int64)
    ends = np.minimum(edges + window_ns, t1)
    # A final partial window shorter than half a window would skew the distribution.
    keep = (ends - edges) >= window_ns // 2
    detail = f"fixed windows of {window_ns / 1e6:g} ms" + (f" ({reason})" if reason else "")
    return _finish(edges[keep], ends[keep], "window", detail)


def _kernel_order(run: RunData) -> pd.DataFrame:
    a = run.activity
    k = a[a["kind"].isin(GPU_KINDS[:1])]
    if len(k) == 0:
        return k
    t = k["launch_ns"].to_numpy()
    t = np.where(t != MISSING, t, k["start_ns"].to_numpy())
    k = k.assign(_t=t)
    return k.sort_values(["_t", "start_ns"], kind="stable")


def kernel_sequence_cycles(run: RunData) -> Cycles | None:
    """Cycles from the smallest period p with which the kernel-name sequence repeats."""
    k = _kernel_order(run)
    if len(k) < 6:
        return None
    codes_all = k["function"].cat.codes.to_numpy()
    seq = codes_all[:_SEQ_WINDOW]
    n = len(seq)
    # Candidate periods: the typical distance between consecutive occurrences of each kernel.
    pos = np.arange(n)
    order = np.lexsort((pos, seq))
    s_sorted, p_sorted = seq[order], pos[order]
    same = s_sorted[1:] == s_sorted[:-1]
    gaps = (p_sorted[1:] - p_sorted[:-1])[same]
    owners = s_sorted[1:][same]
    if len(gaps) == 0:
        return None
    med = pd.Series(gaps).groupby(owners).median()
    candidates = np.unique(med.to_numpy().astype(np.int64))
    candidates = candidates[(candidates >= 1) & (candidates <= n // 3)]
    period = None
    for p in np.sort(candidates):
        if np.mean(seq[:-p] == seq[p:]) >= _SEQ_MATCH:
            period = int(p)
            break
    if period is None:
        return None
    # The period's first kernel: of the kernels that occur once per period, the first one seen.
    counts = np.bincount(codes_all, minlength=int(codes_all.max()) + 1)
    n_periods = len(codes_all) / period
    once = np.flatnonzero(np.abs(counts - n_periods) <= max(1.0, 0.02 * n_periods))
    if len(once) == 0:
        return None
    first_pos = {c: int(np.argmax(codes_all == c)) for c in once}
    anchor = min(first_pos, key=first_pos.get)
    t = k["_t"].to_numpy()
    starts = t[codes_all == anchor]
    name = str(k["function"].cat.categories[anchor])
    t_end = int(run.activity["end_ns"].max())
    ends = np.append(starts[1:], max(t_end, int(starts[-1]) + 1))
    # The last cycle is open-ended (it may hold the tail of the trace): drop it.
    starts, ends = starts[:-1], ends[:-1]
    if len(starts) < MIN_CYCLES:
        return None
    detail = (f"repeating kernel sequence: period {period} kernel(s), a cycle starts at each "
              f"launch of {_short(name)}")
    return _finish(starts, ends, "kernel-sequence", detail)


def idle_gap_cycles(run: RunData) -> Cycles | None:
    """Cycles split at long GPU idle gaps; the threshold is the widest jump in the gap sizes."""
    a = run.activity
    g = a[a["kind"].isin(GPU_KINDS)]
    if len(g) < 4:
        return None
    order = np.argsort(g["start_ns"].to_numpy(), kind="stable")
    s = g["start_ns"].to_numpy()[order]
    e = np.maximum.accumulate(g["end_ns"].to_numpy()[order])
    gaps = s[1:] - e[:-1]
    pos = gaps[gaps > 0]
    if len(pos) < 3:
        return None
    lg = np.sort(np.log(pos.astype(np.float64)))
    # Look for the largest jump among the upper half of gap sizes (separating "between
    # iterations" gaps from the launch gaps inside an iteration).
    lo = len(lg) // 2
    jumps = np.diff(lg[lo:])
    if len(jumps) == 0:
        return None
    j = int(np.argmax(jumps))
    if jumps[j] < np.log(3.0):
        return None
    threshold = float(np.exp((lg[lo + j] + lg[lo + j + 1]) / 2))
    cut = np.flatnonzero(gaps > threshold)
    starts = np.concatenate([[s[0]], s[cut + 1]])
    ends = np.concatenate([e[cut], [e[-1]]])
    if len(starts) < 3:
        return None
    # A cycle runs from one burst's start to the next burst's start (the gap belongs to it).
    cyc_end = np.append(starts[1:], ends[-1])
    detail = f"GPU idle gaps longer than {threshold / 1e3:.1f} µs split the timeline"
    return _finish(starts, cyc_end, "idle-gaps", detail)


def _repeating_range(m: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """The repeated, non-overlapping range name covering the most time."""
    if len(m) == 0:
        return None
    m = m[m["end_ns"] > m["start_ns"]]
    best = None
    for name, grp in m.groupby("name", observed=True, sort=False):
        if len(grp) < 3:
            continue
        s = np.sort(grp["start_ns"].to_numpy())
        e = grp["end_ns"].to_numpy()[np.argsort(grp["start_ns"].to_numpy())]
        if np.any(s[1:] < e[:-1]):
            continue  # overlapping ranges (several threads, nesting) are not iterations
        covered = int((e - s).sum())
        if best is None or covered > best[0]:
            best = (covered, str(name), grp)
    if best is None:
        return None
    return best[1], best[2]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def segment_cycles(run: RunData, *, cycle_regex: str | None = None,
                   window_ns: int | None = None) -> Cycles:
    """Find the cycles of `run` (see module doc). Raises InputError when fewer than 2 remain."""
    cycles = _pick_cycles(run, cycle_regex, window_ns)
    if cycles.n == 0:
        raise InputError("no cycles found (no markers, no activity to segment)", path=run.path)
    if cycles.n < MIN_CYCLES:
        raise InputError(
            f"only {cycles.n} cycle found ({cycles.detail}): comparing needs at least "
            f"{MIN_CYCLES}; collect longer or choose cycles with --cycle REGEX / --window DURATION",
            path=run.path)
    return cycles


def _pick_cycles(run: RunData, cycle_regex: str | None, window_ns: int | None) -> Cycles:
    if window_ns is not None:
        return fixed_windows(run, window_ns, "chosen with --window")
    markers = run.markers
    if cycle_regex is not None:
        try:
            rx = re.compile(cycle_regex)
        except re.error as exc:
            raise InputError(f"bad --cycle regular expression {cycle_regex!r}: {exc}") from None
        names = pd.Series(markers["name"].astype(str))
        hit = markers[names.str.contains(rx).to_numpy()] if len(markers) else markers
        if len(hit):
            return _ranges_to_cycles(hit, "regex", f"marker ranges matching /{cycle_regex}/")
        k = _kernel_order(run)
        if len(k):
            kn = pd.Series(k["function"].astype(str))
            hk = k[kn.str.contains(rx).to_numpy()]
            if len(hk) >= 2:
                t = hk["_t"].to_numpy()
                end = np.append(t[1:], t[-1])
                return _finish(t[:-1], end[:-1], "regex",
                               f"a cycle starts at each launch of a kernel matching /{cycle_regex}/")
        raise InputError(f"no marker or kernel matches --cycle {cycle_regex!r}", path=run.path)
    skipped: list[str] = []  # marker sources that gave too few cycles, said in the detail
    if len(markers):
        src = markers["source"].astype(str)
        own = markers[(src == "perfdiff").to_numpy()]
        if len(own):
            cyc = _ranges_to_cycles(own, "perfdiff-markers", "perfdiff cycle markers from the target")
            if cyc.n >= MIN_CYCLES:
                return cyc
            skipped.append(f"{cyc.n} perfdiff marker cycle(s)")
        names = markers["name"].astype(str)
        steps = markers[names.str.fullmatch(r"ProfilerStep#\d+").to_numpy()]
        if len(steps):
            cyc = _ranges_to_cycles(steps, "profiler-step", f"{len(steps)} ProfilerStep#N ranges")
            if cyc.n >= MIN_CYCLES:
                return cyc
            skipped.append(f"{cyc.n} ProfilerStep#N range(s)")
        rng = _repeating_range(markers[(src != "perfdiff").to_numpy()])
        if rng is not None:
            name, grp = rng
            return _ranges_to_cycles(grp, "annotation", f"repeating range {_short(name)!r} ({len(grp)}×)")
    fallback = _fallback_cycles(run)
    if skipped:
        return Cycles(fallback.start_ns, fallback.end_ns, fallback.source,
                      f"{fallback.detail} (only {', '.join(skipped)}: too few to compare)", fallback.dropped)
    return fallback


def _fallback_cycles(run: RunData) -> Cycles:
    seq = kernel_sequence_cycles(run)
    if seq is not None:
        return seq
    gaps = idle_gap_cycles(run)
    if gaps is not None:
        return gaps
    return fixed_windows(run, DEFAULT_WINDOW_NS, "no markers, no repeating kernel sequence, no clear GPU idle gaps")
