"""The numbers a notice rests on: one frozen record per code, units in the names.

`Notice.detail` (perfdiff.analyze.records) holds one of these; the renderer reads their
attributes, never string keys.  Every field has a concrete type (floats, ints, str, bool,
tuples of them), so a record is serialisable by reflection; unknown is NaN (a count or a name that does not apply: its default).
Units: `_us` µs, `_pp` percentage points of the abnormal cycle, `_pct` %, `_tokens` tokens;
`ratio` a factor (A over N); `p`, `q` probabilities; `n_*`, `count` counts.
"""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


# --- Notices ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricOneSideDetail:
    """METRIC_ONE_SIDE: a metric sampled in one run only."""

    metric: str
    device: str
    side: str  # "normal" | "abnormal"


@dataclass(frozen=True)
class CycleRatioDetail:
    """CYCLE_RATIO: the median cycle times' ratio (A over N) and whether both runs' cycles are
    the process's own markers of one source."""

    ratio: float
    same_marked_source: bool
    source_n: str
    source_a: str


@dataclass(frozen=True)
class WorldSizeDetail:
    """WORLD_SIZE: each run's rank (None: unknown)."""

    rank_n: int | None
    rank_a: int | None


@dataclass(frozen=True)
class RankDetail:
    """RANK: the normal run's world size (None: unknown)."""

    world_size: int | None


@dataclass(frozen=True)
class CycleSourceDetail:
    """CYCLE_SOURCE: how each run's cycles were found."""

    detail_n: str
    detail_a: str


@dataclass(frozen=True)
class LoadNoticeDetail:
    """LOAD: the runs' load beyond the median tokens (the notice's normal/abnormal) and the
    cycle time at a common load (NaN with `reason` when it could not be compared)."""

    basis: tuple[str, ...]  # "tokens", "requests", "prefill-share"
    requests_n: float
    requests_a: float
    prefill_share_n_pct: float
    prefill_share_a_pct: float
    adjusted: bool
    x0_tokens: float
    cycle_n_us: float
    cycle_a_us: float
    change_pct: float
    change_lo_pct: float
    change_hi_pct: float
    p: float
    reason: str


NoticeDetail = (MetricOneSideDetail | CycleRatioDetail | WorldSizeDetail | RankDetail | CycleSourceDetail
                | LoadNoticeDetail)
