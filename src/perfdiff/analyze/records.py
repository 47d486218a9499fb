"""The analysis results: frozen records of numbers and stable codes, no prose.

Wording, rounding and escaping happen only in perfdiff.render.  Every quantity carries its
unit in its name (`_us` µs, `_pp` percentage points, `_ms` ms); unknown is NaN.
Definitions are in docs/STATISTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from collections.abc import Iterable
from typing import Any

import numpy as np

from perfdiff.analyze.evidence import NoticeDetail, NoticeValue
from perfdiff.analyze.thresholds import DEFAULT as DEFAULT_THRESHOLDS
from perfdiff.analyze.thresholds import Thresholds
from perfdiff.model.cycles import CyclePlan, WindowReason
from perfdiff.model.cuda_names import MATCHED
from perfdiff.model.schema import GPU_KINDS, Kind
from perfdiff.model.waits import HOST_STATES
from perfdiff.stats import Dependence, TwoSample

NAN = float("nan")


class CycleBase(str, Enum):
    """The run whose mean cycle τ is a share of: the longer of the two (docs/STATISTICS.md, τ),
    the abnormal run's for a slowdown and the normal run's for a speed-up, so that a function's
    change, at most its own time, is at most its cycle; stable across releases."""

    NORMAL = "normal"
    ABNORMAL = "abnormal"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RunSummary:
    """One side's cycles and provenance."""

    name: str
    path: str
    n_cycles: int
    cycle_source: str  # a perfdiff.model.schema.CycleSource value
    cycle_detail: str  # how the cut found the cycles (perfdiff.render.cycles_words adds the reasons below)
    dropped_cycles: int
    mean_us: float
    median_us: float
    p95_us: float
    traced_s: float
    status: str
    dur_us: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    notes: tuple[str, ...] = ()  # the loader's remarks on this input (interrupted, dropped rows …)
    window_reason: WindowReason | None = None  # why fixed windows (cycle_source "window" only)
    passed_over: tuple[tuple[str, int, int], ...] = ()  # sources one run lacked: (source, cycles N, cycles A)


@dataclass(frozen=True)
class FunctionStats:
    """One (function, device): own time, β, calls, and their tests."""

    name: str
    device: str
    kind: str
    wait: bool
    presence: str  # both | new | vanished
    tested: bool
    t_n_us: float  # mean own time per cycle
    t_a_us: float
    tau_pp: float  # pp of the longer run's mean cycle (Analysis.tau_base)
    t: TwoSample | None
    q_t: float
    beta_n: float  # mean share of the cycle, %
    beta_a: float
    d_beta: float
    beta: TwoSample | None
    q_beta: float
    presence_n: float  # share of cycles where it ran
    presence_a: float
    calls_n: float  # mean calls per cycle
    calls_a: float
    per_call_n_us: float  # mean own time per call
    per_call_a_us: float
    sampled: bool = False  # a host state read as a counter per interval: rows are not calls
    incl_n_us: float = NAN  # inclusive time per cycle (CPU ranges: children included)
    incl_a_us: float = NAN
    fragile: bool = False
    beta_vs_common: float = NAN

    @property
    def host_state(self) -> bool:
        """A host state (kind host: a scheduler state such as `oncpu` or `blocked`, or a state
        read as a counter), per thread of the target (perfdiff.attribute.host_threads); not an
        OS runtime call."""
        return self.kind == Kind.HOST and (self.sampled or self.name in HOST_STATES)

    @property
    def same_calls(self) -> bool:
        """Called in both runs, as often per cycle within ±5 % (perfdiff's same_calls_log; an
        analysis asks its own Thresholds.same_calls): a change of its time per call then
        compares like with like."""
        return DEFAULT_THRESHOLDS.same_calls(self.calls_n, self.calls_a)


@dataclass(frozen=True)
class MuStats:
    """μ of one func-scope metric while one function ran."""

    func: int  # index into Analysis.functions
    metric: str
    device: str
    unit: str
    res: TwoSample
    z_log: float
    q: float = NAN
    fragile: bool = False


@dataclass(frozen=True)
class ContextStats:
    """A ctx-scope metric: the run-level signal, compared on its samples."""

    metric: str
    device: str
    unit: str
    res: TwoSample
    z_log: float
    median_interval_ms_n: float
    median_interval_ms_a: float
    aliases: tuple[str, ...] = ()
    q: float = NAN
    fragile: bool = False


@dataclass(frozen=True)
class DetailRow:
    """A row of the detailed table: a function, optionally paired with a func-scope metric."""

    func: int
    mu: int | None  # index into Analysis.mu, or None
    score: float
    legacy_score: float


@dataclass(frozen=True)
class CommonMode:
    """A device whose functions all scaled by one ratio (docs/STATISTICS.md, common mode):
    their shares of the cycle (`basis` "share"), or their own time per call ("per-call")."""

    device: str
    ratio: float
    k: int
    iqr_log: float
    triggered: bool
    basis: str = "share"
    median_log: float = NAN


@dataclass(frozen=True)
class GpuBusy:
    """A GPU's busy share of the cycle: its GPU work time (kernels, memcpys, memsets) per cycle
    over the cycle time, at most 100 %, in both runs, and the test of its change
    (docs/STATISTICS.md, GPU busy share).  `p` is Bonferroni-adjusted over the GPUs."""

    device: str
    busy_n_pct: float  # mean over cycles, %
    busy_a_pct: float
    res: TwoSample
    p: float = NAN


class NoticeCode(str, Enum):
    """What a warning or a comparability problem is about; stable across releases."""

    METRIC_ONE_SIDE = "metric-one-side"  # a metric sampled in one run only
    CYCLE_RATIO = "cycle-ratio"  # median cycle times differ by more than ×2
    GPU_MODEL = "gpu-model"
    GPU_DRIVER = "gpu-driver"
    MAX_SM_CLOCK = "max-sm-clock"
    POWER_LIMIT = "power-limit"
    CPU_MODEL = "cpu-model"
    CPU_CORES = "cpu-cores"
    OS_KERNEL = "os-kernel"
    WORLD_SIZE = "world-size"  # distributed runs of different sizes (or one distributed, one not)
    RANK = "rank"  # the same world size, another rank
    CYCLE_SOURCE = "cycle-source"
    INPUT_SOURCE = "input-source"
    LOAD = "load"  # the runs' engine steps carried materially different load

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Notice:
    """A warning or a comparability problem: a code and the values it rests on.

    `normal` / `abnormal`: the two runs' values where the notice compares them; `detail`:
    anything else, one record per code that has more (perfdiff.analyze.evidence)."""

    code: NoticeCode
    normal: NoticeValue = None
    abnormal: NoticeValue = None
    detail: NoticeDetail | None = None


@dataclass(frozen=True)
class Trace:
    """One panel of the pictures, both runs: a suspect's own time per cycle (µs; x = cycle
    index) or a context metric over time (its registry unit; x = s since the run's first
    cycle)."""

    kind: str  # "function" | "metric"
    name: str
    device: str
    unit: str
    x_n: np.ndarray = field(repr=False)
    y_n: np.ndarray = field(repr=False)
    x_a: np.ndarray = field(repr=False)
    y_a: np.ndarray = field(repr=False)


NO_SAMPLE = "no step sample in this cycle"  # why one cycle of a run with load has none


@dataclass(frozen=True)
class CycleLoad:
    """What each cycle of one run carried (docs/STATISTICS.md, "Load as a covariate"): the
    summed step_* samples whose interval's midpoint lies in the cycle; NaN where no step
    sample does (`reason` says why a whole run has none)."""

    requests: np.ndarray = field(repr=False)  # requests per cycle
    tokens: np.ndarray = field(repr=False)  # tokens per cycle (prefill + decode)
    prefill_tokens: np.ndarray = field(repr=False)
    decode_tokens: np.ndarray = field(repr=False)
    reason: str = ""  # why the run has no load ("" when it has)

    @property
    def recorded(self) -> bool:
        """Whether any cycle carries a known token count."""
        return bool(np.isfinite(self.tokens).any())


@dataclass(frozen=True)
class FunctionLoad:
    """One tested function's own time per cycle at the common load (µs), both runs' lines
    compared there: the difference, its 95 % CI, p, BH q over the tested functions, and τ at
    that load (pp of the abnormal cycle at that load)."""

    func: int  # index into Analysis.functions
    t_n_us: float
    t_a_us: float
    diff_us: float
    lo_us: float
    hi_us: float
    p: float
    q: float
    tau_pp: float


@dataclass(frozen=True)
class LoadComparison:
    """The two runs' load and the step-time comparison at a common load.

    `differs`: the load differs materially (`basis` names which quantities did).  The
    adjusted comparison is NaN with `reason` when it cannot be made (no overlap of the
    loads, too few cycles)."""

    normal: CycleLoad
    abnormal: CycleLoad
    median_tokens_n: float
    median_tokens_a: float
    median_requests_n: float
    median_requests_a: float
    prefill_share_n_pct: float  # Σ prefill tokens / Σ tokens, %
    prefill_share_a_pct: float
    tokens_test: TwoSample | None
    requests_test: TwoSample | None
    prefill_test: TwoSample | None  # the per-cycle prefill share
    differs: bool
    basis: tuple[str, ...]  # "tokens", "requests", "prefill-share"
    support_lo_tokens: float = NAN  # common support: the overlap of both runs' central 90 %
    support_hi_tokens: float = NAN
    x0_tokens: float = NAN  # pooled median tokens per cycle within the support
    n_strata: int = 0  # load strata the comparison at a common load is standardised over
    n_support_n: int = 0
    n_support_a: int = 0
    cycle_n_us: float = NAN  # cycle time standardised to the pooled load (µs)
    cycle_a_us: float = NAN
    change_us: float = NAN
    change_lo_us: float = NAN
    change_hi_us: float = NAN
    change_pct: float = NAN
    p: float = NAN
    slope_n_us: float = NAN  # µs per token, one line over the common support
    slope_a_us: float = NAN
    reason: str = ""  # why the adjusted comparison is n/a ("" when made)
    functions: tuple[FunctionLoad, ...] = ()

    @property
    def adjusted(self) -> bool:
        """Whether the step-time comparison at the common load was made."""
        return not self.reason


@dataclass(frozen=True)
class StepClass:
    """One kind of step (perfdiff.analyze.classes): the cycles whose function signature meets
    `path` — (function index into Analysis.functions, whether it ran) conditions, the splits
    that made the class — in both runs; `marks`: the functions that ran in (almost) all of its
    cycles and (almost) no other cycle, largest first (its name for the reader; may be empty);
    its cycles in each run and their share of the run (%), its median cycle (µs) in each run,
    and the dependence-robust test of its share (`share_test`, on each run's 0/1 series of
    its cycles in time order: p_welch), Cohen's h of the shares and the BH q over the classes
    tested (NaN: the largest class, not tested)."""

    path: tuple[tuple[int, bool], ...]
    marks: tuple[int, ...]
    n_n: int
    n_a: int
    share_n_pct: float
    share_a_pct: float
    median_n_us: float
    median_a_us: float
    share_test: TwoSample
    h: float
    q: float = NAN

    @property
    def signature(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(functions that ran, functions that did not) naming the class for the reader: its
        marks where it has some, else the conditions that made it."""
        if self.marks:
            return self.marks, ()
        return tuple(f for f, ran in self.path if ran), tuple(f for f, ran in self.path if not ran)


@dataclass(frozen=True)
class FunctionByClass:
    """One tested function compared kind with kind (perfdiff.stats.stratified): its own time
    per cycle (µs) in each class and run, standardised to both runs' pooled mix of classes
    (`t_n_us`, `t_a_us`), the difference with its 95 % CI, the stratified rank test's p (and
    the mean difference's, `p_mean`), BH q over the tested functions, τ (pp of the longer
    standardised cycle), how the dependence was dealt with and each run's effective cycles."""

    func: int  # index into Analysis.functions
    t_n_us: float
    t_a_us: float
    diff_us: float
    lo_us: float
    hi_us: float
    p: float
    p_mean: float
    q: float
    tau_pp: float
    class_t_n_us: tuple[float, ...]
    class_t_a_us: tuple[float, ...]
    dependence: Dependence
    n_eff_n: float
    n_eff_a: float


@dataclass(frozen=True)
class StepClasses:
    """The runs' cycles in kinds of step (docs/STATISTICS.md, "Step classes"), and the cycle
    time and each tested function compared kind with kind: the classes; each class's weight
    (its share of both runs' cycles together); each run's class per cycle; the standardised
    cycle time (µs) of each run, its change with the 95 % CI and the stratified rank p; the
    functions; `mix_changed`: a class's share moved significantly and materially."""

    classes: tuple[StepClass, ...]
    weights: tuple[float, ...]
    labels_n: np.ndarray
    labels_a: np.ndarray
    cycle_n_us: float
    cycle_a_us: float
    change_us: float
    change_lo_us: float
    change_hi_us: float
    p: float
    functions: tuple[FunctionByClass, ...]
    mix_changed: bool


class OpCategory(str, Enum):
    """What kind of work a kernel or an operator is (perfdiff.analyze.categories, by name
    rules; docs/STATISTICS.md, "Op categories"); stable across releases."""

    GEMM = "gemm"
    ATTENTION = "attention"
    CONVOLUTION = "convolution"
    NORMALIZATION = "normalization"
    ELEMENTWISE = "elementwise"  # elementwise and activation kernels, copies, indexing
    REDUCTION = "reduction"  # reductions and softmax
    MEMCPY = "memcpy"  # memcpy and memset (by kind)
    COMMUNICATION = "communication"  # NCCL / RCCL collectives
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DeviceTotal:
    """One GPU's work (its kernels, memcpys and memsets), both runs: time per cycle (µs) and
    its change, and the number of distinct functions on it."""

    device: str  # "GPU 0", as the normal run names it
    t_n_us: float  # mean GPU time per cycle
    t_a_us: float
    d_us: float  # t_a_us − t_n_us
    functions_n: int
    functions_a: int


@dataclass(frozen=True)
class CategoryRow:
    """One category of GPU work (kernels, memcpys, memsets of every GPU together), both runs:
    its time per cycle (µs), its share of the run's GPU time (%), the change (µs per cycle),
    its calls per cycle and the number of distinct functions in it."""

    category: OpCategory
    t_n_us: float  # mean GPU time per cycle
    t_a_us: float
    share_n_pct: float  # of the run's GPU time
    share_a_pct: float
    d_us: float  # t_a_us − t_n_us
    calls_n: float  # mean calls per cycle
    calls_a: float
    functions_n: int  # distinct kernels (memcpy kinds …) in the category
    functions_a: int


def unmatched_gpu_share(functions: Iterable[FunctionStats]) -> float:
    """The share of both runs' GPU time (µs per cycle, summed) in rows present in one run only
    (new or vanished), 0..1; NaN without GPU time."""
    total = unmatched = 0.0
    for f in functions:
        if f.kind not in GPU_KINDS:
            continue
        total += f.t_n_us + f.t_a_us
        if f.presence != "both":
            unmatched += f.t_n_us + f.t_a_us
    return unmatched / total if total > 0 else NAN


def runtime_of(functions: Iterable[FunctionStats], side: int) -> str:
    """The GPU runtime one run's calls (kind api) belong to: "hip" when they are hip… calls,
    "cuda" when cuda… or cu… (driver) calls, "" when neither or both; `side` 0 the normal run,
    1 the abnormal (a matched row "cudaX ⇄ hipX" counts for each run by its own name)."""
    seen = set()
    for f in functions:
        if f.kind != "api" or f.presence == ("new", "vanished")[side]:
            continue
        name = f.name.split(MATCHED)[-1 if side else 0]
        if name.startswith("hip"):
            seen.add("hip")
        elif name.startswith("cu"):
            seen.add("cuda")
    return seen.pop() if len(seen) == 1 else ""


@dataclass(frozen=True)
class Replacement:
    """GPU functions that vanished (`gone`) and ones that are new (`new`) on one device under
    one launching op (`op`, the innermost CPU range both runs launched them from): an
    implementation swapped.  Indexes into Analysis.functions, largest first; their own time
    per cycle (µs) summed, normal run `t_n_us`, abnormal run `t_a_us`.  `inner`: the CPU
    ranges of one run only between those kernels and `op` (the implementations' own ops).
    `launches_n`, `launches_a`: the gone and the new kernels' launches per cycle."""

    op: str
    device: str
    gone: tuple[int, ...]
    new: tuple[int, ...]
    t_n_us: float
    t_a_us: float
    inner: tuple[int, ...] = ()
    launches_n: float = 0.0
    launches_a: float = 0.0


@dataclass(frozen=True)
class PerCallTest:
    """One function's calls compared where the runs are compared by totals (Regime.TOTALS):
    each launch of a kernel, each call of an op, its duration a sample; a two-sided
    Mann–Whitney test over the calls (the calls are the units, not cycles), `q` its
    Benjamini–Hochberg q over the functions tested."""

    name: str
    device: str
    kind: str
    calls_n: int
    calls_a: int
    median_n_us: float
    median_a_us: float
    p: float
    q: float


@dataclass(frozen=True)
class Analysis:
    """Everything the report shows, unformatted."""

    normal: RunSummary
    abnormal: RunSummary
    alpha: float
    cycle_test: TwoSample
    cycle_ks: float  # Kolmogorov–Smirnov D of the cycle durations
    quantiles_n: dict[str, float]
    quantiles_a: dict[str, float]
    functions: tuple[FunctionStats, ...]
    mu: tuple[MuStats, ...]
    context: tuple[ContextStats, ...]
    details: tuple[DetailRow, ...]
    common_modes: tuple[CommonMode, ...]
    constants: tuple[str, ...]  # "metric@device" constant in both runs
    aliases: dict[str, list[str]]  # "metric@device" → metrics with the identical series
    comparability: tuple[Notice, ...]
    warnings: tuple[Notice, ...]
    untested: tuple[int, ...]
    scope: dict[str, str]  # "metric@device" -> func | ctx
    n_tests_t: int
    min_p: float
    cycles_needed: int | None
    renames: tuple[tuple[str, str], ...] = ()  # (normal name, abnormal name) matched
    gpu_busy: tuple[GpuBusy, ...] = ()  # per GPU: busy share of the cycle in both runs
    events_n: tuple[dict[str, Any], ...] = ()  # timed events the collectors recorded
    events_a: tuple[dict[str, Any], ...] = ()
    plan: CyclePlan | None = None  # the one cycle definition both runs were cut by
    matched: bool = False  # cycle i of both runs does the same work: paired tests
    match_rho: float = NAN  # Spearman ρ of the two runs' cycle durations, cycle by cycle
    cycle_ks_p: float = NAN  # its asymptotic p: a changed shape (a tail) the median test misses
    # inside[f][a]: share of function f's own time in the abnormal run spent inside range a
    inside: dict[int, dict[int, float]] = field(default_factory=dict)
    traces: tuple[Trace, ...] = ()  # the top suspects' and changed context metrics' series
    load: LoadComparison | None = None  # the runs' engine-step load, when they recorded it
    # the kinds of step the cycles fall into, and the comparison kind with kind (None: one kind)
    step_classes: StepClasses | None = None
    # the decision thresholds the analysis used, which the findings, verdict and wording read too
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # GPU time per op category, both runs (perfdiff.analyze.categories): where the time went
    # when the runs' kernels do not match by name (another GPU vendor, another library)
    categories: tuple[CategoryRow, ...] = ()
    per_call: tuple[PerCallTest, ...] = ()  # per-call tests, where the runs are compared by totals
    replacements: tuple[Replacement, ...] = ()  # kernels swapped under one launching op
    devices: tuple[DeviceTotal, ...] = ()  # GPU time per device, both runs (perfdiff.analyze.devices)
    tau_base: CycleBase = CycleBase.ABNORMAL  # the run whose mean cycle τ is a share of: the longer

    @property
    def unmatched_gpu_share(self) -> float:
        """The share of both runs' GPU time in kernels, memcpys and memsets present in one run
        only (0..1, NaN without GPU time): high when the runs' kernels do not match by name."""
        return unmatched_gpu_share(self.functions)

    @property
    def hardware_differs(self) -> bool:
        """The runs ran on other GPU models (gpu_models) or through another vendor's runtime
        (CUDA calls in one, HIP calls in the other)."""
        n, a = self.runtimes
        return bool(self.gpu_models) or bool(n and a and n != a)

    @property
    def gpu_models(self) -> tuple[tuple[str, ...], tuple[str, ...]] | tuple[()]:
        """(the normal run's GPU models, the abnormal run's) where both runs name their GPUs and
        the models differ (the notice gpu-model; the same models on more or fewer GPUs, or a
        run that names none, are no other hardware); () otherwise."""
        for x in self.comparability:
            if x.code == NoticeCode.GPU_MODEL and isinstance(x.normal, tuple) and isinstance(x.abnormal, tuple):
                gn = tuple(dict.fromkeys(str(g) for g in x.normal if str(g) != "?"))
                ga = tuple(dict.fromkeys(str(g) for g in x.abnormal if str(g) != "?"))
                if gn and ga and set(gn) != set(ga):
                    return gn, ga
        return ()

    @property
    def runtimes(self) -> tuple[str, str]:
        """Each run's GPU runtime as its runtime calls name it: "cuda", "hip", "" (none or both)."""
        return runtime_of(self.functions, 0), runtime_of(self.functions, 1)

    def __post_init__(self) -> None:
        # One α: the record's alpha is the analysis's (an Analysis built with another alpha, or
        # copied with dataclasses.replace(c, alpha=…), carries thresholds with that alpha).
        if self.thresholds.alpha != self.alpha:
            object.__setattr__(self, "thresholds", replace(self.thresholds, alpha=self.alpha))

