"""Reduce millions of activity rows to per-(function, cycle) sums, and samples to μ.

Everything here is one pass of searchsorted + bincount over the rows; the only Python
loops run over metrics (tens), never over events.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdiff.bundle import MISSING, RunData
from perfdiff.model.schema import GPU_KINDS
from perfdiff.model.waits import HOST_STATES
from perfdiff.model.cycles import Cycles


@dataclass
class CycleMatrix:
    """Per-function, per-cycle own time of one run, and per-function totals.

    own_ns[f, c] is f's own time attributed to cycle c (ns, float: prorated rows); the tests
    need it cycle by cycle.  Host states count per thread (`host_threads`).  Inclusive time and calls are only ever summed over the cycles, so
    they are kept as totals: a (functions × cycles) matrix each would be hundreds of MB with a
    million cycles.
    """

    keys: pd.DataFrame  # columns name, device, kind; row f of the matrices
    own_ns: np.ndarray  # (F, K) float64
    incl_total_ns: np.ndarray  # (F,) inclusive time in all cycles: end − start for CPU ranges
    # (children included), else own
    calls_total: np.ndarray  # (F,) rows that started (or were launched) in a cycle; host rows per thread
    row_cycle: np.ndarray  # cycle index per activity row (-1 = outside every cycle)
    row_func: np.ndarray  # function index per activity row
    unattributed_rows: int  # rows outside every cycle


def _function_index(activity: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Map each row to a (name, device, kind) index without touching strings per row.

    The combined code space (names × devices × kinds) is small, so a lookup table built with
    bincount replaces a sort of millions of keys.
    """
    cols = ("function", "device", "kind")
    parts = [activity[c].cat.codes.to_numpy().astype(np.int64) for c in cols]
    sizes = [len(activity[c].cat.categories) + 1 for c in cols]
    key = (parts[0] * sizes[1] + parts[1]) * sizes[2] + parts[2]
    used = np.flatnonzero(np.bincount(key, minlength=sizes[0] * sizes[1] * sizes[2]))
    lookup = np.full(sizes[0] * sizes[1] * sizes[2], -1, dtype=np.int64)
    lookup[used] = np.arange(len(used))
    k2 = used % sizes[2]
    k1 = (used // sizes[2]) % sizes[1]
    k0 = used // (sizes[2] * sizes[1])
    cats = [np.asarray(activity[c].cat.categories, dtype=object) for c in cols]
    keys = pd.DataFrame({"name": cats[0][k0], "device": cats[1][k1], "kind": cats[2][k2]})
    return keys, lookup[key]


def _kind_masks(a: pd.DataFrame):
    """kinds("kernel", "memcpy") → boolean row mask, from the categorical codes (no strings)."""
    codes = a["kind"].cat.codes.to_numpy() if len(a) else np.zeros(0, np.int8)
    cats = list(a["kind"].cat.categories) if len(a) else []

    def mask(*names: str) -> np.ndarray:
        want = [cats.index(n) for n in names if n in cats]
        if not want:
            return np.zeros(len(codes), dtype=bool)
        return codes == want[0] if len(want) == 1 else np.isin(codes, want)

    return mask


def attribute_activity(run: RunData, cycles: Cycles) -> CycleMatrix:
    """Own time and calls of every function in every cycle.

    GPU work with a known launch time belongs to the cycle it was launched in, whole (even
    when it ran later); every other row is clipped to the cycles it overlaps, its busy time
    prorated by the overlapped share.  A zero-length row counts whole in the cycle holding it.
    """
    a = run.activity
    keys, func = _function_index(a) if len(a) else (pd.DataFrame(columns=["name", "device", "kind"]), np.zeros(0, np.int64))
    F, K = len(keys), cycles.n
    kinds = _kind_masks(a)
    if len(a):
        # A host state sampled as a counter (no thread, one row per interval) has no "calls".
        host = kinds("host")
        counter = host & (a["tid"].to_numpy() == MISSING) if host.any() else host
        if counter.any():
            keys["sampled"] = (np.bincount(func, weights=counter.astype(np.float64), minlength=F)
                               == np.bincount(func, minlength=F))
        else:  # no counter row (a trace): every function has rows, none of them a counter's
            keys["sampled"] = np.zeros(F, dtype=bool)
    else:
        keys["sampled"] = np.zeros(0, dtype=bool)
    row_cycle = np.full(len(a), -1, dtype=np.int64)
    if len(a) == 0 or K == 0:
        return CycleMatrix(keys, np.zeros((F, K)), np.zeros(F), np.zeros(F, np.int64), row_cycle, func, len(a))
    cs, ce = cycles.start_ns, cycles.end_ns
    start = a["start_ns"].to_numpy()
    end = a["end_ns"].to_numpy()
    busy = a["busy_ns"].to_numpy().astype(np.float64)
    # Inclusive time of nested CPU ranges (their busy is self time); own time for the rest.
    is_cpu = kinds("cpu")
    has_cpu = bool(is_cpu.any())
    incl_w = np.where(is_cpu, (end - start).astype(np.float64), busy) if has_cpu else busy
    launch = a["launch_ns"].to_numpy()
    by_launch = (launch != MISSING) & kinds(*GPU_KINDS)
    # (rows, cycles, share of the row, counts as a call) of the pieces of rows split over
    # several cycles (path 2's general case); every other attributed row counts whole in
    # row_cycle's cycle.  One bincount per matrix at the end (each is F·K long: with a
    # million cycles, a bincount per path would allocate and add hundreds of MB each).
    split: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    # 1. launched GPU work: whole row to the launching cycle.
    li = np.flatnonzero(by_launch)
    if len(li):
        c = np.searchsorted(cs, launch[li], side="right") - 1
        ok = (c >= 0) & (launch[li] < ce[np.maximum(c, 0)])
        row_cycle[li[ok]] = c[ok]

    # 2. everything else: clip to every overlapped cycle.
    oi = np.flatnonzero(~by_launch)
    # Cycles may overlap (marker ranges from several threads, a --cycle regex): a row then
    # counts in each cycle it overlaps, which only the general path below does.
    disjoint = bool(np.all(cs[1:] >= ce[:-1]))
    if len(oi) and disjoint:
        s, e = start[oi], end[oi]
        # Fast path, most rows: inside the cycle that holds their start (whole: share 1).
        # One searchsorted and a comparison; only the rest (crossing a cycle end, in a gap
        # between cycles, before the first) take the general path below.
        home = np.searchsorted(cs, s, side="right") - 1
        h = np.maximum(home, 0)
        inside = (home >= 0) & (e <= ce[h]) & ((e > s) | (s < ce[h]) | (s == cs[h]))
        ii = np.flatnonzero(inside)
        row_cycle[oi[ii]] = home[ii]
        rest = np.flatnonzero(~inside)
        oi, s, e = oi[rest], s[rest], e[rest]
    elif len(oi):
        s, e = start[oi], end[oi]
    if len(oi):
        first = np.searchsorted(ce, s, side="right")  # first cycle whose end is after s
        last = np.searchsorted(cs, e, side="left") - 1  # last cycle starting before e
        point = e == s
        span = np.maximum(last - first + 1, 0)
        if point.any():
            # A zero-length row counts in the cycle holding it: the last one starting at or
            # before it, if it has not ended yet (a cycle's start is inside it, its end is
            # not); before the first cycle or in a gap it is outside every cycle.
            home = np.searchsorted(cs, s, side="right") - 1
            h = np.maximum(home, 0)
            held = (home >= 0) & ((s < ce[h]) | (s == cs[h]))
            last = np.where(point, home, last)
            first = np.where(point, home, first)
            span = np.where(point, held.astype(np.int64), span)
        # The rows left mostly lie in one cycle (a gap row that ends in the next cycle): they
        # need no expansion.  The few that span several are repeated once per cycle.
        one = np.flatnonzero(span == 1)
        many = np.flatnonzero(span > 1)
        rep = np.concatenate([one, np.repeat(many, span[many])])
        offs = np.concatenate([np.zeros(len(one), np.int64),
                               np.arange(span[many].sum()) - np.repeat(np.cumsum(span[many]) - span[many], span[many])])
        cyc = first[rep] + offs
        r = oi[rep]
        s_r, e_r = s[rep], e[rep]
        ov = np.minimum(e_r, ce[cyc]) - np.maximum(s_r, cs[cyc])
        length = (e_r - s_r).astype(np.float64)
        share = np.where(point[rep], 1.0, np.clip(ov, 0, None) / np.where(length > 0, length, 1.0))
        valid = share > 0
        r, cyc, share = r[valid], cyc[valid], share[valid]
        # A row counts as a call in the cycle where it starts (or, clipped, the first cycle it
        # overlaps): each row's pieces are adjacent and in cycle order, so that is its first.
        starts_here = np.r_[True, r[1:] != r[:-1]] if len(r) else np.zeros(0, bool)
        row_cycle[r[starts_here]] = cyc[starts_here]
        split.append((r, cyc, share, starts_here))

    # Rows that count whole in one cycle (paths 1 and 2's fast path, most of them): straight
    # from row_cycle, over every row in row order, those outside every cycle or split over
    # several into one extra bin that is dropped; no gathering of the rows.
    whole = row_cycle >= 0
    for r, _, _, _ in split:
        whole[r] = False
    cell = func * K + row_cycle
    cell[~whole] = F * K
    own = np.bincount(cell, weights=busy, minlength=F * K + 1)[:F * K]
    del cell
    fcell = np.where(whole, func, F)
    incl = np.bincount(fcell, weights=incl_w, minlength=F + 1)[:F]
    calls = np.bincount(fcell, minlength=F + 1)[:F]
    del fcell
    # Rows split over several cycles (or prorated at an edge): their pieces.
    for r, cyc, share, starts_here in split:
        idx = func[r] * K + cyc
        own_w = busy[r] * share
        if len(r) >= F * K // 64:
            own += np.bincount(idx, weights=own_w, minlength=F * K)
        else:  # a few: no F·K-long temporary
            np.add.at(own, idx, own_w)
        incl += np.bincount(func[r], weights=incl_w[r] * share if has_cpu else own_w, minlength=F)
        calls += np.bincount(func[r][starts_here], minlength=F)
    unattributed = int((row_cycle < 0).sum())
    # Host states are summed over the target's threads: per thread, so that a state
    # is never more than its cycle (docs/STATISTICS.md, "Host states per thread").
    threads = host_threads(run, keys, func)
    if (threads > 1).any():
        own = own.reshape(F, K)
        own /= threads[:, None]
        incl = incl / threads
        calls = calls / threads
    return CycleMatrix(keys, own.reshape(F, K), incl, calls, row_cycle, func, unattributed)


def host_threads(run: RunData, keys: pd.DataFrame, func: np.ndarray) -> np.ndarray:
    """Per function (row f of `keys`; `func`: each activity row's function index), the number
    of the target's threads its time is summed over: 1 but for host states (kind host: the
    scheduler states of HOST_STATES, such as nsys' `oncpu` per thread, and every state read as
    a counter).  A state whose rows name their thread: the distinct threads of its rows.  A
    state read as a counter (no thread, one row per interval, summed over every thread of the
    target): `counter_threads`.  OS runtime calls (`poll`, `read` with a thread) are calls, each
    on its thread, summed per cycle as every call is."""
    n_funcs = len(keys)
    out = np.ones(n_funcs)
    a = run.activity
    if not len(a):
        return out
    tid = a["tid"].to_numpy()
    host = _kind_masks(a)("host")
    state = keys["name"].isin(HOST_STATES).to_numpy()
    named = host & (tid != MISSING) & state[func]
    if named.any():
        pairs = np.unique((func[named].astype(np.int64) << 32) | (tid[named].astype(np.int64) & 0xFFFFFFFF))
        out = np.maximum(out, np.bincount(pairs >> 32, minlength=n_funcs)[:n_funcs])
    counter = host & (tid == MISSING)
    if counter.any():
        has = np.bincount(func[counter], minlength=n_funcs)[:n_funcs] > 0
        out[has] = np.maximum(out[has], counter_threads(run))
    return out


def counter_threads(run: RunData) -> int:
    """The threads a host state read as a counter is summed over, at least 1: the host
    collector's largest thread count of the target, or, where larger (or not recorded), the
    most threads a state holds on average (its busy time over the time its rows span, rounded
    up), so that a run that names no thread count still has no state longer than its cycles
    per thread, on average (a single row's may exceed its threads: a late tick's reading is
    lumpy)."""
    n = 1
    for x in run.manifest.get("collectors") or []:
        if isinstance(x, dict) and x.get("name") == "host" and isinstance(x.get("max_threads"), int):
            n = max(n, x["max_threads"])
    a = run.activity
    tid = a["tid"].to_numpy()
    counter = np.flatnonzero(_kind_masks(a)("host") & (tid == MISSING)) if len(a) else np.zeros(0, np.int64)
    if len(counter):
        length = (a["end_ns"].to_numpy()[counter] - a["start_ns"].to_numpy()[counter]).astype(np.float64)
        busy = a["busy_ns"].to_numpy()[counter].astype(np.float64)
        state = a["function"].cat.codes.to_numpy()[counter].astype(np.int64)
        span = np.bincount(state, weights=np.maximum(length, 0.0))
        held = np.bincount(state, weights=busy)
        ok = span > 0
        if ok.any():
            n = max(n, int(np.ceil(float(np.max(held[ok] / span[ok])) - 1e-6)))
    return n


def keep_rows_for_mu(run: RunData, matrix: CycleMatrix) -> tuple[RunData, CycleMatrix]:
    """`run` and `matrix` with only the activity rows μ can use (those on a device that has
    samples: see device_rows); the others are in the matrices' sums already.  A comparison
    needs no more of them, and a run handed between processes is then a fraction of its size."""
    a = run.activity
    if len(a) == 0:
        return run, matrix
    devices = set(run.samples["device"].astype(str).unique()) if len(run.samples) else set()
    codes = [i for i, d in enumerate(a["device"].cat.categories) if str(d) in devices]
    keep = np.isin(a["device"].cat.codes.to_numpy(), codes)
    if keep.all():
        return run, matrix
    rows = np.flatnonzero(keep)
    pg = run.process_groups
    if pg is not None and len(pg):  # its rows point into the activity: renumber them
        kept = keep[pg["row"].to_numpy()]
        pg = pg[kept].assign(row=(np.cumsum(keep) - 1)[pg["row"].to_numpy()[kept]]).reset_index(drop=True)
    run = dataclasses.replace(run, activity=a.iloc[rows].reset_index(drop=True), process_groups=pg)
    matrix = dataclasses.replace(matrix, row_cycle=matrix.row_cycle[rows], row_func=matrix.row_func[rows])
    return run, matrix


@dataclass
class SeriesInfo:
    """One (metric, device) sample series of a run."""

    metric: str
    device: str
    t0: np.ndarray  # interval starts, ns (sorted)
    t1: np.ndarray  # interval ends, ns (point samples: the next sample's time)
    value: np.ndarray
    median_interval_ns: float
    dropped_nonfinite: int


def sample_series(run: RunData) -> dict[tuple[str, str], SeriesInfo]:
    """Group samples into series; point samples cover the interval to the next sample."""
    s = run.samples
    out: dict[tuple[str, str], SeriesInfo] = {}
    if len(s) == 0:
        return out
    for (metric, device), g in s.groupby(["metric", "device"], observed=True, sort=True):
        t0 = g["t_start_ns"].to_numpy()
        t1 = g["t_end_ns"].to_numpy()
        v = g["value"].to_numpy(dtype=np.float64)
        order = np.argsort(t0, kind="stable")
        t0, t1, v = t0[order], t1[order], v[order]
        point = t1 == t0
        if point.any():
            # A point reading lasts until the next reading (of any value, so that the
            # interval before an unknown reading is not stretched over it).
            nxt = np.append(t0[1:], t0[-1])
            step = float(np.median(np.diff(t0))) if len(t0) > 1 else 0.0
            nxt[-1] = t0[-1] + int(step)
            t1 = np.where(point, np.maximum(nxt, t0), t1)
        finite = np.isfinite(v)
        dropped = int((~finite).sum())
        t0, t1, v = t0[finite], t1[finite], v[finite]
        if len(v) == 0:
            continue
        widths = t1 - t0
        med = float(np.median(widths)) if len(widths) else float("nan")
        out[(str(metric), str(device))] = SeriesInfo(str(metric), str(device), t0, t1, v, med, dropped)
    return out


@dataclass
class DeviceRows:
    """The attributed activity rows on one device, with what μ needs of them."""

    mid_ns: np.ndarray  # midpoint of each row
    busy: np.ndarray  # busy ns (float)
    cell: np.ndarray  # function index × K + cycle index


def device_rows(run: RunData, matrix: CycleMatrix, device: str, K: int) -> DeviceRows | None:
    """Rows of `run` on `device` that fell in a cycle (computed once per device)."""
    a = run.activity
    cats = list(a["device"].cat.categories) if len(a) else []
    if device not in cats:
        return None
    code = cats.index(device)
    rows = np.flatnonzero((a["device"].cat.codes.to_numpy() == code) & (matrix.row_cycle >= 0))
    if len(rows) == 0:
        return None
    mid = (a["start_ns"].to_numpy()[rows] + a["end_ns"].to_numpy()[rows]) // 2
    return DeviceRows(mid, a["busy_ns"].to_numpy()[rows].astype(np.float64),
                      matrix.row_func[rows] * K + matrix.row_cycle[rows])


def mu_matrix(rows: DeviceRows | None, series: SeriesInfo, F: int, K: int,
              cache: dict | None = None) -> np.ndarray:
    """μ[f, c]: busy-weighted mean of the series while f ran in c (NaN where undefined).

    Each activity row takes the value of the sample interval holding its midpoint, weighted by
    its busy time — exact when rows are shorter than a sample interval, which is when a metric
    has `func` scope.  `cache` shares the row → sample lookup between series that were
    sampled at the same instants (all metrics of one sampler tick).
    """
    if rows is None:
        return np.full((F, K), np.nan)
    key = (id(rows), len(series.t0), int(series.t0[0]), int(series.t0[-1]), int(series.t1[-1]))
    hit = cache.get(key) if cache is not None else None
    if hit is not None and np.array_equal(hit[0], series.t0) and np.array_equal(hit[1], series.t1):
        j, ok, den = hit[2], hit[3], hit[4]
    else:
        j = np.searchsorted(series.t0, rows.mid_ns, side="right") - 1
        ok = (j >= 0) & (rows.mid_ns < series.t1[np.maximum(j, 0)])
        j = j[ok]
        den = np.bincount(rows.cell[ok], weights=rows.busy[ok], minlength=F * K)
        if cache is not None:
            cache[key] = (series.t0, series.t1, j, ok, den)
    num = np.bincount(rows.cell[ok], weights=rows.busy[ok] * series.value[j], minlength=F * K)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return mu.reshape(F, K)


CallDurations = dict[tuple[str, str, str], np.ndarray]  # (function, device, kind) → each call's µs


def call_durations(run: RunData, cycles: Cycles) -> CallDurations:
    """Each call's duration (µs) by (function, device, kind), of the calls that start inside
    the cycles (a pair compared by totals: the samples of its per-call tests)."""
    a = run.activity
    if len(a) == 0:
        return {}
    s, e = a["start_ns"].to_numpy(), a["end_ns"].to_numpy()
    home = np.searchsorted(cycles.start_ns, s, side="right") - 1  # the cycle each call starts in, as above
    inside = (home >= 0) & (s < cycles.end_ns[np.maximum(home, 0)])
    sub = pd.DataFrame({"f": a["function"].astype(str).to_numpy()[inside], "d": a["device"].astype(str).to_numpy()[inside],
                        "k": a["kind"].astype(str).to_numpy()[inside], "t": (e - s)[inside] / 1e3})
    return {key: g["t"].to_numpy(dtype=np.float64) for key, g in sub.groupby(["f", "d", "k"], sort=False)}
