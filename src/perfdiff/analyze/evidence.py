"""The findings as records, and the numbers a finding or a notice rests on: one frozen record
per code, units in the names.

`Finding.evidence` (the rules that state findings are perfdiff.analyze.findings) and
`Notice.detail` (perfdiff.analyze.records) hold one of these; the renderer reads their attributes, never string keys.  Every field has a
concrete type (floats, ints, str, bool, tuples of them), so a record is serialisable by
reflection; unknown is NaN (a count or a name that does not apply: its default).
Units: `_us` µs, `_pp` percentage points of the abnormal cycle, `_pct` %, `_tokens` tokens;
`ratio` a factor (A over N); `p`, `q` probabilities; `n_*`, `count` counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from perfdiff.stats.dependence import MIN_CYCLES as DEPENDENCE_MIN_CYCLES  # noqa: F401  (the wording reads it)
from perfdiff.stats.dependence import NEFF_SHOWN, Dependence

NAN = float("nan")
E = TypeVar("E")


# --- Findings ---------------------------------------------------------------------------


class Direction(str, Enum):
    """The way the change a verdict class explains went: the cycle got slower (its causes took
    more time) or faster (less); stable across releases."""

    SLOWER = "slower"
    FASTER = "faster"

    def __str__(self) -> str:
        return self.value



@dataclass(frozen=True)
class CycleTimeEvidence:
    """CYCLE_TIME: both runs' cycle times and the tests of their change; the P95/P99 95 %
    distribution-free CIs (µs)."""

    median_n_us: float
    median_a_us: float
    change_pct: float  # the median's change, % of the normal median
    p_mwu: float  # Mann–Whitney (Wilcoxon signed-rank over matched cycles)
    n_n: int  # cycles
    n_a: int
    paired: bool  # the cycles are matched: p_mwu is the signed-rank test's
    mean_n_us: float
    mean_a_us: float
    p_welch: float
    throughput_change_pct: float  # 100 · (mean_N / mean_A − 1)
    p95_n_us: float
    p95_a_us: float
    p99_n_us: float
    p99_a_us: float
    ks_d: float  # Kolmogorov–Smirnov D
    ks_p: float
    p95_n_lo_us: float = NAN
    p95_n_hi_us: float = NAN
    p95_a_lo_us: float = NAN
    p95_a_hi_us: float = NAN
    p99_n_lo_us: float = NAN
    p99_n_hi_us: float = NAN
    p99_a_lo_us: float = NAN
    p99_a_hi_us: float = NAN


@dataclass(frozen=True)
class CauseEvidence:
    """CAUSE: the function's own time per cycle and τ as the finding states them (at the
    common load when `load_adjusted`; kind with kind when `by_class`, standardised to both
    runs' mix of step classes, with its own time in each class, `class_t_n_us`,
    `class_t_a_us`, in the order of Analysis.step_classes.classes); the causes nested in its
    range and their τ."""

    tau_pp: float
    t_n_us: float
    t_a_us: float
    incl_n_us: float  # inclusive time per cycle (CPU ranges: children included)
    incl_a_us: float
    nested: int  # causes nested in its range
    tau_nested_pp: float  # their own change: part of this cause's work
    load_adjusted: bool = False
    x0_tokens: float = NAN  # the common load, when load_adjusted
    # How its test dealt with dependent cycles (perfdiff.stats.dependence), and the effective
    # cycles of each run behind its q (NaN: not estimated).
    dependence: Dependence = Dependence.NOT_ASSESSED
    n_eff_n: float = NAN
    n_eff_a: float = NAN
    by_class: bool = False
    class_t_n_us: tuple[float, ...] = ()
    class_t_a_us: tuple[float, ...] = ()

    @property
    def dependence_unchecked(self) -> bool:
        """Too few cycles to check that they are independent: the q may be too small."""
        return self.dependence is Dependence.SKIPPED

    def n_eff_differs(self, n_n: int, n_a: int) -> bool:
        """The effective cycles are materially fewer than the cycles (below NEFF_SHOWN of them) on a side."""
        return (self.dependence is Dependence.CORRECTED
                and (self.n_eff_n < NEFF_SHOWN * n_n or self.n_eff_a < NEFF_SHOWN * n_a))


@dataclass(frozen=True)
class NoCauseEvidence:
    """NO_CAUSE: how many functions were tested, and how many changed significantly but not
    materially."""

    n_tests: int
    negligible: int


@dataclass(frozen=True)
class NegligibleEvidence:
    """NEGLIGIBLE: how many significant changes were too small to be a cause (the thresholds:
    Analysis.thresholds)."""

    count: int


@dataclass(frozen=True)
class LoadEvidence:
    """LOAD: the cycle time compared at a common load (perfdiff.analyze.records.LoadComparison)
    and how many functions that changed as measured the load alone explains."""

    x0_tokens: float
    n_strata: int
    cycle_n_us: float
    cycle_a_us: float
    change_us: float
    change_lo_us: float
    change_hi_us: float
    change_pct: float
    p: float
    median_tokens_n: float
    median_tokens_a: float
    explained: int


@dataclass(frozen=True)
class MixEvidence:
    """MIX_CHANGE: one step class's share of the steps moved (Analysis.step_classes.classes
    [`step_class`]): the functions that name it (`present`: ran in its cycles; `absent`: did
    not; function indexes), its cycles in each run (`count_n`, `count_a` of `n_n`, `n_a`) and
    their share (%), Cohen's h, the dependence-robust test of the share (p, q over the classes,
    how it dealt with dependent cycles, each run's effective cycles), and how many functions
    that changed as measured the mix alone explains."""

    step_class: int
    present: tuple[int, ...]
    absent: tuple[int, ...]
    count_n: int
    count_a: int
    n_n: int
    n_a: int
    share_n_pct: float
    share_a_pct: float
    h: float
    p: float
    dependence: Dependence
    n_eff_n: float
    n_eff_a: float
    explained: int

    @property
    def dependence_unchecked(self) -> bool:
        """Too few cycles to check that they are independent: the p may be too small."""
        return self.dependence is Dependence.SKIPPED


@dataclass(frozen=True)
class DeviceWideEvidence:
    """DEVICE_WIDE: every busy function of a device changed per call by one `ratio` (A over
    N); the causes it took in (`absorbed`, the largest as indexes into Analysis.functions) and
    their τ; `host`: the device is the host (CPU-side operators)."""

    ratio: float
    k: int  # functions in the check
    iqr_log: float  # IQR of their ln ratios
    absorbed: int
    tau_pp: float
    absorbed_funcs: tuple[int, ...]
    host: bool


@dataclass(frozen=True)
class CommonModeEvidence:
    """COMMON_MODE: every kernel of a device scaled its share of the cycle by one `ratio`;
    `same_time`: how many kept their own time per cycle."""

    ratio: float
    k: int
    iqr_log: float
    same_time: int


@dataclass(frozen=True)
class SymptomEvidence:
    """SYMPTOM: a wait's own time per cycle and τ; `direction`: the change the findings explain
    (a wait that shrank in a speed-up is the faster work it waited for)."""

    tau_pp: float
    t_n_us: float
    t_a_us: float
    direction: Direction = Direction.SLOWER


@dataclass(frozen=True)
class MetricEvidence:
    """RESOURCE (a context metric) and METRIC_WHILE (μ while a cause ran): the metric's mean in
    both runs, in `unit` (its registry unit)."""

    metric: str
    unit: str
    mean_n: float
    mean_a: float


@dataclass(frozen=True)
class EventEvidence:
    """EVENT: a timed event of the abnormal run only (the collectors' record): its kind, where,
    when (s after the first cycle), and what the kinds that have one name."""

    event: str  # gpu-lost, xid, ecc, other-process, target-exited
    device: str
    t_s: float
    pid: int | None = None  # other-process
    name: str = ""  # other-process: its command
    used_gpu_memory_bytes: float = NAN  # other-process
    xid: str | None = None  # xid: the error's number


@dataclass(frozen=True)
class KernelSwapEvidence:
    """KERNEL_SWAP: the finding's `related` are the kernels that gained calls (the first
    `grew`), then those that lost them; each one's τ, and the net."""

    grew: int
    net_pp: float
    tau_pp: tuple[float, ...]


@dataclass(frozen=True)
class ReplacedEvidence:
    """REPLACED: under the launching op (the finding's `function`), the GPU functions that
    vanished (the first `gone` of `related`) and those that are new (the rest); their own time
    per cycle summed (µs), normal `t_n_us` and abnormal `t_a_us`, and the change as a share of
    the abnormal cycle (`tau_pp`, pp: the new functions' τ plus the vanished ones')."""

    gone: int
    t_n_us: float
    t_a_us: float
    tau_pp: float


@dataclass(frozen=True)
class StepChangeEvidence:
    """STEP_CHANGE (a pair compared by totals): each run's step (`step`; else the whole run,
    a one-shot program) as one number, described, not tested: the median piece (µs) and the
    change (%); `pieces_n`, `pieces_a`: the steps (or pieces) each run holds."""

    step: bool
    pieces_n: int
    pieces_a: int
    n_us: float
    a_us: float
    change_pct: float


@dataclass(frozen=True)
class PerCallEvidence:
    """PER_CALL: one function's calls compared (Analysis.per_call[`test`]): slower or faster
    per call at q ≤ α, the calls' medians (µs), their counts and the Mann–Whitney p."""

    test: int
    slower: bool
    median_n_us: float
    median_a_us: float
    calls_n: int
    calls_a: int
    p: float


@dataclass(frozen=True)
class PerCallNoneEvidence:
    """PER_CALL_NONE: `n_tests` functions tested per call, none slower or faster at q ≤ α."""

    n_tests: int


@dataclass(frozen=True)
class TotalsEvidence:
    """VANISHED / NEW (a pair compared by totals): the function's own time per piece (µs) and
    its calls per piece, in the run that has it."""

    t_us: float
    calls: float


@dataclass(frozen=True)
class LaunchStructureEvidence:
    """LAUNCH_STRUCTURE: the largest vanished kernel (`related[0]`) and the largest new one
    (`related[1]`) on a device, launched fewer times and longer each (`fewer_longer`), or more
    times and shorter each: an algorithm's launch structure changed.  Calls per piece and µs
    per call."""

    fewer_longer: bool
    calls_n: float
    calls_a: float
    per_call_n_us: float
    per_call_a_us: float


@dataclass(frozen=True)
class OppositeEvidence:
    """OPPOSITE: each related function's τ as the finding states it (at the common load when
    the load differed; empty: as measured, Analysis.functions[i].tau_pp)."""

    tau_pp: tuple[float, ...] = ()


@dataclass(frozen=True)
class CyclesNeededEvidence:
    """CYCLES_NEEDED: too few cycles for one function's q to reach α."""

    n_n: int
    n_a: int
    min_p: float  # the smallest attainable p
    n_tests: int
    cycles_needed: int


FindingEvidence = (CycleTimeEvidence | CauseEvidence | NoCauseEvidence | NegligibleEvidence | LoadEvidence | MixEvidence
                   | DeviceWideEvidence | CommonModeEvidence | SymptomEvidence | MetricEvidence | EventEvidence
                   | KernelSwapEvidence | ReplacedEvidence | OppositeEvidence | CyclesNeededEvidence
                   | StepChangeEvidence | PerCallEvidence | PerCallNoneEvidence | TotalsEvidence
                   | LaunchStructureEvidence)


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


# What a notice compares, in each run: a setting (a name, a count; None: unknown), one per
# GPU (a tuple), or a number (the median cycle in ms, the median tokens per cycle).
Setting = str | int | float | None
NoticeValue = str | int | float | tuple[Setting, ...] | None

NoticeDetail = (MetricOneSideDetail | CycleRatioDetail | WorldSizeDetail | RankDetail | CycleSourceDetail
                | LoadNoticeDetail)


# --- The findings ---------------------------------------------------------------------------

MAX_LISTED = 4  # functions a proportional, opposite or common-mode finding names


class FindingCode(str, Enum):
    """What a finding says; stable across releases."""

    CYCLE_TIME = "cycle-time"  # the median cycle time moved (always first)
    CAUSE = "cause"  # a function's own time moved with the cycle time, significantly
    NO_CAUSE = "no-cause"  # no function's own time did
    PROPORTIONAL = "proportional"  # host states and idle threads' waits that grew with the cycle, keeping their share
    COMMON_MODE = "common-mode"  # every kernel on a device scaled together
    SYMPTOM = "symptom"  # a wait changed significantly
    RESOURCE = "resource"  # a context metric changed significantly
    METRIC_WHILE = "metric-while"  # a metric changed while a cause ran
    EVENT = "event"  # a timed event in the abnormal run only
    OPPOSITE = "opposite"  # functions that moved against the cycle-time change
    CYCLES_NEEDED = "cycles-needed"  # too few cycles for any q to reach α
    IDENTICAL = "identical"  # the two inputs hold the same bytes: nothing to find
    NEGLIGIBLE = "negligible"  # significant changes too small to be a cause
    DEVICE_WIDE = "device-wide"  # every busy function of a device changed per call by one ratio
    LOAD = "load"  # the runs carried different load: the cycle time compared at a common load
    MIX_CHANGE = "mix-change"  # a kind of step's share of the steps moved: a load change, not a regression
    KERNEL_SWAP = "kernel-swap"  # kernels with more calls replaced others on a device, net change small
    REPLACED = "replaced"  # kernels vanished and new ones appeared under one launching op
    # A pair compared by totals (Regime.TOTALS: one or a few steps per run, a one-shot program)
    STEP_CHANGE = "step-change"  # the step's (or the run's) change, described, not tested (always first)
    PER_CALL = "per-call"  # a function slower or faster per call (Mann–Whitney over its calls)
    PER_CALL_NONE = "per-call-none"  # functions tested per call, none changed
    LAUNCH_STRUCTURE = "launch-structure"  # fewer, longer launches of another kernel, or more, shorter ones
    VANISHED = "vanished"  # a function of the normal run only
    NEW = "new"  # a function of the abnormal run only

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One finding.  `func` indexes Analysis.functions, `related` lists more function indexes,
    `ref` indexes Analysis.context (RESOURCE) or Analysis.mu (METRIC_WHILE); `evidence` holds
    the numbers the finding rests on (a record of perfdiff.analyze.evidence; None for
    IDENTICAL and PROPORTIONAL, which rest on their `related` alone)."""

    code: FindingCode
    function: str | None = None
    device: str | None = None
    q: float = float("nan")
    func: int | None = None
    related: tuple[int, ...] = ()
    ref: int | None = None
    evidence: FindingEvidence | None = None

    def evidence_as(self, kind: type[E]) -> E:
        """The evidence, of the record type this finding's code states (a bug otherwise)."""
        if not isinstance(self.evidence, kind):
            raise TypeError(f"a {self.code} finding without its {kind.__name__}: {self.evidence!r}")
        return self.evidence
