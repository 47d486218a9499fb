"""What a multi-rank comparison says, as typed records with stable codes (no prose: the
wording is in perfdiff.render.ranks).  Times are µs; τ is in percentage points of the
abnormal run's mean cycle, as for a pair (docs/STATISTICS.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from perfdiff.model.cycles import CyclePlan

if TYPE_CHECKING:  # the rank workers' preload imports these records, and no analysis
    from perfdiff.analyze.gate_records import CycleStats


MAX_RANK = 1 << 20  # a rank number beyond any job's world (with no rank twice, it bounds the pairs too)


class IdentitySource(str, Enum):
    """Where a rank's number came from, most trusted first."""

    TRACE = "trace"  # Kineto distributedInfo
    ENVIRONMENT = "environment"  # the launcher variables nsys recorded (RANK, PMI_RANK, SLURM_PROCID …)
    MANIFEST = "manifest"  # a run bundle's target.distributed
    NCCL = "nccl"  # the rank NCCL's ncclCommInitRank NVTX range declares (world communicator)
    DEVICE = "device"  # one process per GPU of an export holding several: ranks in device order
    PROCESS = "process"  # one process of an export holding several, in pid order (nothing else told)
    FILE_NAME = "file-name"  # rank-3.json, report.3.sqlite, …
    ORDER = "order"  # none of these: the inputs' sorted order

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankInput:
    """One rank's trace or bundle: `pid` picks a process of an export holding several."""

    rank: int
    path: str
    source: IdentitySource
    world_size: int | None = None  # as the trace declares it; None: not declared
    pid: int | None = None


@dataclass(frozen=True)
class RankPair:
    """The two inputs compared as one rank (`rank`: the normal run's number)."""

    rank: int
    normal: RankInput
    abnormal: RankInput


class ExcessKind(str, Enum):
    """What a rank spends its extra time in."""

    INPUT = "input"  # data loading on the host
    COMPUTE = "compute"  # GPU kernels other than collectives
    TRANSFER = "transfer"  # memcpy, memset
    HOST = "host"  # other CPU ranges, runtime calls, host states

    def __str__(self) -> str:
        return self.value


class StragglerCode(str, Enum):
    """What the straggler analysis of one run concluded."""

    CULPRIT = "culprit"  # one rank arrives last at the collectives, beyond chance
    NO_SKEW = "no-skew"  # the ranks wait alike in the collectives: none holds the others back there
    UNSTABLE = "unstable"  # the last rank changes from cycle to cycle: no one culprit
    NO_COLLECTIVES = "no-collectives"  # no NCCL kernel found on every rank (or a single rank)
    NOT_ITERATIONS = "not-iterations"  # the cycles are time windows or idle gaps: not matched across ranks

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankWait:
    """One rank in one run: median µs per cycle spent waiting in collectives for the last
    rank to arrive, and the share of cycles in which it was that last rank."""

    rank: int
    wait_us: float
    last_share: float


class GroupCode(str, Enum):
    """What the collectives of one communicator say about its own ranks."""

    CULPRIT = "culprit"  # one member arrives last, beyond chance, and waits in no other group
    RELAY = "relay"  # its last member is late because it waited in another group's collectives
    NO_SKEW = "no-skew"  # the members wait alike
    UNSTABLE = "unstable"  # the last member changes from cycle to cycle

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GroupStraggler:
    """One communicator's collectives in one run, among its members only.

    `group`: the communicator's label (process group name and members; "" for collectives whose
    communicator the traces do not name: `ranks` are the ranks that ran them); `last`: the
    member that waits least in them; `skew_us`, `p_last` as for Straggler but among the members; `wait_elsewhere_us`: the last
    member's median wait per cycle in its other groups' collectives (µs)."""

    group: str
    ranks: tuple[int, ...]
    code: GroupCode
    last: int | None
    collectives: int
    skew_us: float
    p_last: float
    wait_elsewhere_us: float = math.nan


@dataclass(frozen=True)
class Straggler:
    """The straggler analysis of one run (docs/STATISTICS.md, stragglers).

    A rank's wait sums its waits in every communicator it belongs to, each collective's wait
    read among that communicator's members only (`groups`).
    `skew_us`: median over cycles of the spread of the ranks' wait in collectives per cycle;
    `p_last`: binomial p (× ranks) that the culprit is last in more cycles than 1/ranks by chance;
    `excess_us`: per kind, the median per cycle of the culprit's own time minus the other
    ranks' median (NaN when unknown: `excess_reason` says why)."""

    side: str  # "normal" | "abnormal"
    code: StragglerCode
    culprit: int | None
    cycles: int
    collectives: int  # matched collectives per cycle (median)
    skew_us: float
    p_last: float
    waits: tuple[RankWait, ...]
    excess: ExcessKind | None = None
    excess_us: tuple[tuple[ExcessKind, float], ...] = ()
    excess_reason: str = ""
    groups: tuple[GroupStraggler, ...] = ()  # per communicator
    grouped: bool = False  # the traces told the communicators apart


@dataclass(frozen=True)
class RankRow:
    """One rank of the rank table: median cycle (µs) of each run, its top cause (the
    function whose own time moved most in the direction of its cycle, when significant and
    material; None otherwise) and its median wait in collectives per cycle.  `waited`: its
    cycle grew mostly by waiting for other ranks (its wait grew by at least half its Δ, and
    by more than its top cause moved)."""

    rank: int
    cycles_n: int
    cycles_a: int
    median_n_us: float
    median_a_us: float
    cause: str | None = None
    cause_kind: str | None = None
    cause_tau_pp: float = math.nan
    cause_delta_us: float = math.nan
    wait_n_us: float = math.nan
    wait_a_us: float = math.nan
    waited: bool = False

    @property
    def wait_tau_pp(self) -> float:
        """The growth of its wait in collectives as pp of its abnormal median cycle (NaN where
        unknown)."""
        return 100.0 * (self.wait_a_us - self.wait_n_us) / self.median_a_us if self.median_a_us else math.nan

    @property
    def delta_us(self) -> float:
        return self.median_a_us - self.median_n_us


class ScopeCode(str, Enum):
    """On which ranks a function changed."""

    ALL_RANKS = "all-ranks"
    SOME_RANKS = "some-ranks"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankFinding:
    """A function whose own time per cycle changed significantly and materially on `ranks`
    (of `world` compared), in one direction: medians over those ranks of its Δ mean own
    time (µs per cycle) and τ (pp); `q_max`: the largest of their q-values."""

    code: ScopeCode
    function: str
    kind: str
    ranks: tuple[int, ...]
    world: int
    delta_us: float
    tau_pp: float
    q_max: float


class RankVerdictCode(str, Enum):
    """A class of change across ranks, for the verdict."""

    STRAGGLER = "straggler"  # one rank makes the others wait in the abnormal run
    STRAGGLER_GONE = "straggler-gone"  # the normal run's straggler holds no one back in the abnormal run
    ALL_RANKS = "all-ranks"  # a function changed on every rank
    SOME_RANKS = "some-ranks"  # a function changed on the named ranks only
    COLLECTIVES = "collectives"  # the collectives' own time changed on every rank compared (not a wait for one)
    UNEXPLAINED = "unexplained"  # the job's cycle changed, and nothing above explains it
    NO_CHANGE = "no-change"  # nothing significant and material on any rank, nor in the job's cycle

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankVerdict:
    """One statement of the verdict: `ranks` it concerns, the function (findings) or the
    excess kind (straggler), and its size (µs per cycle: Δ own time, the others' wait, or Δ
    of the collectives' own time; UNEXPLAINED: Δ of the job's cycle).  `others`: the
    abnormal run's ranks left out of the comparison (COLLECTIVES: they may be the ones
    arriving late); `uncut`: those of them left out because they, or their pairs, could not
    be cut by the plan (pairing them otherwise does not bring them back)."""

    code: RankVerdictCode
    ranks: tuple[int, ...] = ()
    world: int = 0
    function: str | None = None
    excess: ExcessKind | None = None
    size_us: float = math.nan
    tau_pp: float = math.nan
    others: tuple[int, ...] = ()
    uncut: tuple[int, ...] = ()


class RankNoticeCode(str, Enum):
    """Something the reader must know about the comparison itself."""

    PLAN_IMPOSED = "plan-imposed"  # ranks whose own trace lacks the plan's cycle source
    ITERATIONS_TRIMMED = "iterations-trimmed"  # cycles not present on every rank of a run left out
    PAIRED_BY_USER = "paired-by-user"  # --ranks chose the pairs
    UNPAIRED = "unpaired"  # ranks present in one run only
    IDENTITY_DIFFERS = "identity-differs"  # a loaded trace declares another rank than assumed
    GROUPS_UNKNOWN = "groups-unknown"  # collectives whose communicator the traces do not name
    CYCLES_NOT_ITERATIONS = "cycles-not-iterations"  # time windows or idle gaps: no iteration on every rank
    UNCUT = "uncut"  # ranks too few of whose plan markers survive: left out with their pairs
    NO_COLLECTIVES = "no-collectives"  # ranks with no NCCL kernel where others have them: no straggler analysis

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankNotice:
    code: RankNoticeCode
    ranks: tuple[int, ...] = ()
    side: str = ""
    count: int = 0
    paired: tuple[int, ...] = ()  # uncut: the other run's rank of each pair left out, as `ranks`


@dataclass(frozen=True)
class RankCycle:
    """The job's cycle time in each run: per iteration, the median over the ranks compared of
    their cycle time; then the median over iterations (µs).  `change_pct`: how much it grew (%,
    negative: it fell); `p`: Mann–Whitney p of the per-iteration medians, A against N;
    `stats`: the per-iteration job cycle's statistics the CI gate reads (its mean and P95 too)."""

    median_n_us: float
    median_a_us: float
    change_pct: float
    p: float
    cycles_n: int
    cycles_a: int
    stats: CycleStats | None = None


@dataclass(frozen=True)
class CollectiveTime:
    """The collectives' own time per cycle in each run: a rank's NCCL kernel time less its wait
    for the other ranks compared (the transfer, and any wait for ranks not compared), per
    iteration the median over ranks; then the mean over iterations (µs).  `delta_us`: A − N;
    `tau_pp`: of the abnormal job cycle; `p`: Mann–Whitney of the per-iteration medians;
    `changed`: significant at the comparison's α and material as a function's change is.
    `count_n`, `count_a`: collectives per cycle (per iteration the median over ranks, then the
    median).  NaN, with `reason`, when a run has no NCCL kernels (or p, too few cycles)."""

    mean_n_us: float
    mean_a_us: float
    delta_us: float
    tau_pp: float
    p: float
    cliffs_delta: float
    changed: bool = False
    reason: str = ""
    count_n: float = math.nan
    count_a: float = math.nan


@dataclass(frozen=True)
class Phase:
    """The wall time (s) one phase of a multi-rank comparison took in this process: "start"
    (find and pair the ranks, start or reach the cluster), "plan" (the reference ranks),
    "ranks" (every rank's task), "ranks again" (every rank cut at the markers most pairs
    offer, where the reference pair had none), "analysis" (on the driver).  Measured: it varies run to run.
    A phase of tasks also has their count (rank tasks, however they were batched) and their
    own wall times summed (`work_s`, s, measured in the workers; NaN without tasks):
    work_s / (wall_s × workers) is how busy the workers were, and work_s / tasks what a task
    costs."""

    name: str
    wall_s: float
    tasks: int = 0
    work_s: float = float("nan")


@dataclass(frozen=True)
class RankAnalysis:
    """Everything a multi-rank comparison found."""

    pairs: tuple[RankPair, ...]
    world_n: int
    world_a: int
    plan: CyclePlan
    rows: tuple[RankRow, ...]
    stragglers: tuple[Straggler, Straggler]  # normal, abnormal
    findings: tuple[RankFinding, ...]
    verdict: tuple[RankVerdict, ...]
    alpha: float
    workers: int  # worker processes (local, or the Dask cluster's) the ranks ran on
    notices: tuple[RankNotice, ...] = field(default=())
    # (first, last) iteration every rank of the run has: ProfilerStep numbers, else ordinals
    iterations: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    cycle: RankCycle | None = None  # the job's cycle time (the --fail-on gate)
    collectives: CollectiveTime | None = None  # the collectives' own time, beyond waiting for one another
    phases: tuple[Phase, ...] = ()
