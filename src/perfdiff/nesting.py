"""Which CPU-side ranges run inside which: own time of each function spent inside each
enclosing range, so a finding can report nested work under its parent (a DataLoader step
holds the copies, divisions and concatenations it calls).

One pass per nesting level over the ranges (vectorised: parents from
perfdiff.model.intervals.nesting_parent, then sums by (function, ancestor) pair), never a
Python loop over ranges.  Only ranges of kind `cpu` with a known thread count.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfdiff.attribute import CycleMatrix
from perfdiff.bundle import RunData
from perfdiff.model.intervals import nesting_parent
from perfdiff.model.schema import MISSING, Kind

MAX_DEPTH = 64  # deeper chains are cut here (real profiles nest a few dozen levels at most)


@dataclass(frozen=True)
class Nesting:
    """Own time (ns, all rows) of each (name, device, kind) function, and of it inside each
    enclosing function: inside[(f, a)] with f and a function keys."""

    own_ns: dict[tuple[str, str, str], float] = field(default_factory=dict)
    inside_ns: dict[tuple[tuple[str, str, str], tuple[str, str, str]], float] = field(default_factory=dict)

    def share(self, f: tuple[str, str, str], a: tuple[str, str, str]) -> float:
        """The share of f's own time spent inside a (0 when unknown)."""
        own = self.own_ns.get(f, 0.0)
        return min(1.0, self.inside_ns.get((f, a), 0.0) / own) if own > 0 else 0.0


def nesting_of(run: RunData, matrix: CycleMatrix) -> Nesting:
    """The run's Nesting; `matrix` gives each activity row its function (row_func)."""
    a = run.activity
    if len(a) == 0:
        return Nesting()
    cats = list(a["kind"].cat.categories)
    if Kind.CPU.value not in cats:
        return Nesting()
    # From the categorical codes: no string per row (millions of kernel rows in a trace).
    cpu = a["kind"].cat.codes.to_numpy() == cats.index(Kind.CPU.value)
    rows = np.flatnonzero(cpu)
    rows = rows[a["tid"].to_numpy()[rows] != MISSING]
    if len(rows) == 0:
        return Nesting()
    func = matrix.row_func[rows]
    busy = a["busy_ns"].to_numpy()[rows].astype(np.float64)
    parent, _ = nesting_parent(a["tid"].to_numpy()[rows], a["start_ns"].to_numpy()[rows], a["end_ns"].to_numpy()[rows])
    keys = list(map(tuple, matrix.keys[["name", "device", "kind"]].to_numpy().tolist()))
    F = len(keys)
    own = np.bincount(func, weights=busy, minlength=F)
    inside: dict[int, float] = {}
    cur = parent.copy()
    for _ in range(MAX_DEPTH):
        live = np.flatnonzero(cur >= 0)
        if len(live) == 0:
            break
        # A function nested in itself (recursion) counts once per ancestor level: capped at
        # its own time by Nesting.share.
        pair = func[live] * F + func[cur[live]]
        uniq, inv = np.unique(pair, return_inverse=True)
        sums = np.bincount(inv, weights=busy[live])
        for key, v in zip(uniq.tolist(), sums.tolist(), strict=True):
            inside[key] = inside.get(key, 0.0) + v
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
    used = np.flatnonzero(own > 0)
    return Nesting(own_ns={keys[i]: float(own[i]) for i in used.tolist()},
                   inside_ns={(keys[k // F], keys[k % F]): v for k, v in inside.items() if k // F != k % F})
