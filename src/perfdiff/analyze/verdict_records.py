"""The verdict as records: the classes of change (`VerdictCode`), one record per class
(`VerdictClass`) and the numbers a class states (`detail`, one record per code that has some),
units in the names.  The rules that build them are perfdiff.analyze.verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from perfdiff.analyze.evidence import Direction
from perfdiff.analyze.records import OpCategory

NAN = math.nan


class VerdictCode(str, Enum):
    """A class of change; stable across releases."""

    DIFFERENT_HARDWARE = "different-hardware"  # the runs ran on other GPU models or vendors
    CPU_CLOCK = "cpu-clock-reduced"  # CPU-side work slower at unchanged calls while the CPU clock fell
    CPU_QUOTA = "cpu-quota-throttling"  # the target's cgroup hit its CPU quota (CFS throttling grew)
    MEMORY_PRESSURE = "host-memory-pressure"  # memory stalls, swap, major faults or cgroup limit events grew
    CPU_CONTENTION = "cpu-contention"  # the target's threads waited for a CPU (runq grew)
    IO_WAIT = "io-wait"  # threads blocked on I/O
    INPUT_PIPELINE = "input-pipeline"  # data-loading ranges grew
    GPU_DEVICE_WIDE = "gpu-device-wide"  # every kernel of a GPU slower per call (clocks, power, thermal)
    GPU_THROTTLING = "gpu-throttling"  # kernels slower while the GPU's clocks fell or throttle reasons rose
    GPU_KERNEL = "gpu-kernel-regression"  # named kernels slower per call
    COLLECTIVES = "collectives-longer"  # NCCL collective kernels took longer (waiting for peers, or transfer)
    OTHER_PROCESS = "other-process"  # another process used the GPU
    LAUNCH_BOUND = "launch-bound"  # launch calls slower or more numerous than the kernels they feed; GPU idle
    ADDED_SYNC = "added-synchronisation"  # more synchronisation points per cycle; GPU idle
    TRANSFER = "transfer-growth"  # memcpy / memset time grew
    IMPLEMENTATION_SWAPPED = "implementation-swapped"  # kernels replaced under one launching op
    FEWER_LONGER_LAUNCHES = "fewer-longer-launches"  # a kernel's many launches became few long ones of another
    MORE_SHORTER_LAUNCHES = "more-shorter-launches"  # a kernel's few launches became many short ones of another
    NEW_WORK = "new-work"  # work present in the abnormal run only, or more calls per cycle
    CPU_WORK = "cpu-work"  # CPU-side ranges slower, with no host-wide reason found
    LOAD = "load-change"  # the runs carried different load; step times compared at a common load
    MIX = "mix-change"  # the mix of kinds of step changed (a load change); steps compared kind with kind
    NO_MATERIAL = "no-material-change"  # nothing significant and material

    def __str__(self) -> str:
        return self.value


# --- What a class states (VerdictClass.detail), one record per code that has numbers ----------


@dataclass(frozen=True)
class Clock:
    """The host CPU clock's mean in both runs, in `unit`: "%" (of its maximum) or "MHz"."""

    n: float
    a: float
    unit: str


@dataclass(frozen=True)
class HostWide:
    """Every CPU-side function of the host slower per call by one `ratio`: the share it
    explains (pp), its largest functions (indexes into Analysis.functions), and what waiting
    classes explain of it (`explained_pp`, NaN where none; `explained_by` their codes)."""

    device: str
    ratio: float
    host_wide_pp: float
    absorbed_funcs: tuple[int, ...]
    explained_pp: float = NAN
    explained_by: tuple[VerdictCode, ...] = ()


@dataclass(frozen=True)
class CpuClockDetail:
    """CPU_CLOCK: the clock's drop; the host-wide slowdown it explains, if any."""

    clock: Clock
    host_wide: HostWide | None = None


@dataclass(frozen=True)
class CpuWorkDetail:
    """CPU_WORK of a host-wide slowdown per call (a class of CPU-side causes alone has no
    detail)."""

    host_wide: HostWide


@dataclass(frozen=True)
class QuotaDetail:
    """CPU_QUOTA: the cgroup's throttled time, ms per s (NaN where only the count was read)."""

    throttled_ms_per_s_n: float
    throttled_ms_per_s_a: float


@dataclass(frozen=True)
class Signal:
    """A stall signal: a metric (perfdiff.registry unit) whose mean rose, and its q."""

    metric: str
    mean_n: float
    mean_a: float
    q: float


@dataclass(frozen=True)
class StallDetail:
    """MEMORY_PRESSURE, CPU_CONTENTION, IO_WAIT: the signals backing the class (none: the
    host state's time alone)."""

    signals: tuple[Signal, ...] = ()


@dataclass(frozen=True)
class DeviceWideDetail:
    """GPU_DEVICE_WIDE: the GPU and its kernels' ratio per call (A over N)."""

    device: str
    ratio: float


@dataclass(frozen=True)
class ThrottleDetail:
    """GPU_THROTTLING: why the GPU was held back ("power", "thermal", "hardware slowdown",
    "clock").  `held`: no kernel got slower with it (the class names no cause); then the
    throttle reason's share of the time (%) and the SM clock (MHz) in both runs, on `device`
    (NaN where not sampled)."""

    reason: str
    held: bool = False
    device: str = ""
    share_n_pct: float = NAN
    share_a_pct: float = NAN
    clock_n_mhz: float = NAN
    clock_a_mhz: float = NAN


@dataclass(frozen=True)
class LaunchCall:
    """A launch call of a launch-bound class: µs per call and calls per cycle, both runs."""

    name: str
    per_call_n_us: float
    per_call_a_us: float
    calls_n: float
    calls_a: float


@dataclass(frozen=True)
class LaunchDetail:
    """LAUNCH_BOUND: its launch calls, and the calls per cycle of the kernels on the starved GPUs."""

    launches: tuple[LaunchCall, ...]
    kernel_calls_n: float
    kernel_calls_a: float
    devices: tuple[str, ...]


@dataclass(frozen=True)
class SyncCall:
    """A synchronisation call of an added-synchronisation class: calls per cycle, both runs."""

    name: str
    calls_n: float
    calls_a: float


@dataclass(frozen=True)
class SyncDetail:
    """ADDED_SYNC: the synchronisation calls that grew in number."""

    calls: tuple[SyncCall, ...]


@dataclass(frozen=True)
class SwapOp:
    """One launching op whose kernels were replaced: the names that vanished and those that
    are new, largest first."""

    op: str
    device: str
    gone: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True)
class SwappedDetail:
    """IMPLEMENTATION_SWAPPED: the ops whose kernels were replaced, largest change first."""

    ops: tuple[SwapOp, ...]


@dataclass(frozen=True)
class LaunchStructureDetail:
    """FEWER_LONGER_LAUNCHES / MORE_SHORTER_LAUNCHES: the kernel that vanished (`gone`) and the
    new one (`new`), their calls per piece and µs per call."""

    gone: str
    new: str
    calls_n: float
    calls_a: float
    per_call_n_us: float
    per_call_a_us: float


@dataclass(frozen=True)
class OtherProcessDetail:
    """OTHER_PROCESS: the GPUs another process used."""

    devices: tuple[str, ...]


@dataclass(frozen=True)
class LoadDetail:
    """LOAD: median tokens per cycle, both runs; the cycle time's change at a common load and
    its p; `explained`: no other class holds (the load explains the change)."""

    median_tokens_n: float
    median_tokens_a: float
    change_pct: float
    p: float
    explained: bool


@dataclass(frozen=True)
class MixShift:
    """One step class whose share of the steps moved: the functions that name it (`present`:
    ran in its steps; `absent`: did not), its share of each run's steps (%) and the share
    test's p."""

    present: tuple[str, ...]
    absent: tuple[str, ...]
    share_n_pct: float
    share_a_pct: float
    p: float


@dataclass(frozen=True)
class MixDetail:
    """MIX: the step classes whose share moved; `explained`: no other class holds (the mix
    explains the change)."""

    shifts: tuple[MixShift, ...]
    explained: bool


@dataclass(frozen=True)
class CategoryShift:
    """One op category's GPU time per cycle (µs) in both runs (Analysis.categories)."""

    category: OpCategory
    t_n_us: float
    t_a_us: float


@dataclass(frozen=True)
class HardwareDetail:
    """DIFFERENT_HARDWARE: each run's GPU models (empty where the manifests agree or say
    nothing), its GPU runtime ("cuda", "hip"; "" unknown) and the op categories whose GPU time
    changed most, largest |change| first."""

    gpus_n: tuple[str, ...]
    gpus_a: tuple[str, ...]
    runtime_n: str
    runtime_a: str
    shifts: tuple[CategoryShift, ...]


VerdictDetail = (HardwareDetail | CpuClockDetail | CpuWorkDetail | QuotaDetail | StallDetail | DeviceWideDetail | ThrottleDetail
                 | LaunchDetail | SyncDetail | SwappedDetail | LaunchStructureDetail | OtherProcessDetail
                 | LoadDetail | MixDetail)


@dataclass(frozen=True)
class Starved:
    """A GPU whose busy share of the cycle fell materially while a host-side class held: the
    GPU waited for the host, and `cause` is the host-side class it points to."""

    device: str
    busy_n_pct: float  # mean busy share of the cycle, %
    busy_a_pct: float
    p: float  # the share's test, Bonferroni-adjusted over the GPUs
    cause: VerdictCode


@dataclass(frozen=True)
class VerdictClass:
    """One class of the verdict: its evidence (indexes into the findings), the share of the
    longer cycle it explains (pp, Analysis.tau_base) and the smallest q among its evidence;
    `direction`: whether its causes made the cycle slower or faster; `detail`: the
    numbers it states (None for a class that names its causes alone); `starved`: the GPUs
    that waited for the host because of this class.  `tau_by_device`: (device, pp) where the
    evidence lies on several devices, largest first: the host's time and the GPU's overlap in
    the cycle, so their sum (tau_pp) is no share of the cycle's wall time."""

    code: VerdictCode
    tau_pp: float = 0.0
    q: float = math.nan
    evidence: tuple[int, ...] = ()
    detail: VerdictDetail | None = None
    starved: tuple[Starved, ...] = ()
    tau_by_device: tuple[tuple[str, float], ...] = ()
    # A cause in its evidence was tested over too few cycles to check that they are
    # independent (perfdiff.stats.dependence): its q may be too small, and the wording says so.
    dependence_unchecked: bool = False
    direction: Direction = Direction.SLOWER

    @property
    def share_pp(self) -> float:
        """The share of the longer cycle the class explains (pp): on several devices the
        largest device's, since the sum over host and GPU is no share of the cycle."""
        return max((pp for _, pp in self.tau_by_device), key=abs, default=self.tau_pp)
