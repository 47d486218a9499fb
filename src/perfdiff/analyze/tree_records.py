"""The range-tree diff as records: each matched path (`RangeNode`) and the diff of both runs'
trees (`TreeDiff`), and the rules of a material change that the records' flags follow.  The
diff that builds them is perfdiff.analyze.tree; docs/STATISTICS.md, "Range tree".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from perfdiff import stats

MATERIAL_SHARE = 0.01  # a material change moves at least 1 % of the scale (a cycle, or the largest root)
MATERIAL_RATIO = 0.10  # without tests, and at least 10 % of the path's larger time
MIN_CYCLE_SHARE = 0.5  # per cycle only when the cycles hold at least half of each run's top-level range time
NAN = math.nan


class TreeBasis(str, Enum):
    """What a tree's values are: means per cycle or totals over each run."""

    PER_CYCLE = "per-cycle"
    TOTAL = "total"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RangeNode:
    """One range path of either run.  Times in µs (per cycle or total: TreeDiff.basis);
    `gpu_*` NaN when unknown in that run; `calls_*` per cycle or total.  `presence`: both,
    vanished (normal only) or new (abnormal only).  `name_a`: the abnormal run's name when it
    differs (matched as renamed).  `test`: the inclusive-time test (None: untested);
    `material`: this path changed materially; `changed_below`: it or a path under it did.
    `gpu_side`: a GPU-side range's path (a span on a GPU stream's timeline: its inclusive
    time is that span, its GPU time the work on the stream inside it, its threads streams)."""

    path: tuple[str, ...]
    name_a: str | None
    parent: int
    children: tuple[int, ...]
    presence: str
    incl_n_us: float
    incl_a_us: float
    self_n_us: float
    self_a_us: float
    gpu_n_us: float
    gpu_a_us: float
    calls_n: float
    calls_a: float
    threads_n: int
    threads_a: int
    test: stats.TwoSample | None = None
    q: float = NAN
    material: bool = False
    changed_below: bool = False
    gpu_side: bool = False

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def depth(self) -> int:
        return len(self.path) - 1

    @property
    def delta_us(self) -> float:
        return self.incl_a_us - self.incl_n_us

    @property
    def ratio(self) -> float:
        """A / N of the inclusive time; NaN when N is 0."""
        return self.incl_a_us / self.incl_n_us if self.incl_n_us > 0 else NAN


@dataclass(frozen=True)
class TreeDiff:
    """Both runs' range trees matched: `nodes` in pre-order (each node's children ordered by
    |Δ|, largest first), `roots` the top-level nodes in that order.  `scale_us`: what a
    material change is measured against (the pooled mean cycle, or the largest root's time).
    `nested`: whether each run's own ranges nest (cycle markers aside).  `gpu_reason`: why
    each run's GPU time is unknown (None: known).  `cycle_share`: the share of each run's
    top-level range time inside the pair's cycles (NaN without cycles); below
    MIN_CYCLE_SHARE the values are totals."""

    nodes: tuple[RangeNode, ...]
    roots: tuple[int, ...]
    basis: TreeBasis
    alpha: float
    scale_us: float
    n_cycles: tuple[int, int] = (0, 0)
    matched: bool = False
    n_tests: int = 0
    nested: tuple[bool, bool] = (False, False)
    gpu_reason: tuple[str | None, str | None] = (None, None)
    too_deep: tuple[int, int] = (0, 0)
    renames: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    cycle_share: tuple[float, float] = (NAN, NAN)

    @property
    def n_material(self) -> int:
        return sum(1 for n in self.nodes if n.material)
