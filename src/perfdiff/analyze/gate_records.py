"""The CI gate's decision as records: what was gated on (`GateSpec`), one judged check per
gate (`GateCheck`), and the decision over them (`GateDecision`), with stable codes.

The rules that judge are perfdiff.analyze.gate; the words are perfdiff.render.gate's.  Units:
`_pct` % of the normal run's value, `_us` µs; unknown is NaN.  docs/CI.md describes the gate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

NAN = math.nan


class GateOutcome(str, Enum):
    """A gate's outcome; stable across releases (the exit codes: perfdiff.errors)."""

    PASS = "pass"
    REGRESSION = "regression"
    CANNOT_JUDGE = "cannot-judge"

    def __str__(self) -> str:
        return self.value


class GateReason(str, Enum):
    """Why a gate came out as it did; stable across releases."""

    GREW = "grew"  # regression: grew by at least the threshold, significantly
    BELOW_THRESHOLD = "below-threshold"  # pass: grew by less than the threshold, or fell
    NOT_SIGNIFICANT = "not-significant"  # pass: grew by at least the threshold, not significantly
    IDENTICAL = "identical-inputs"  # the inputs hold the same bytes: nothing was measured twice
    EMPTY_CAPTURE = "empty-capture"  # a run holds no GPU work (or no cycle) where the other does
    NOT_STATIONARY = "not-stationary"  # no cycles, and fixed windows refused: the work changes over the run
    NO_CYCLES = "no-cycles"  # compared by totals (each run one piece, or a few steps): no cycles to test
    WINDOWS = "windows"  # cycles are fixed windows: their duration is the window's, no iteration's
    DIFFERENT_HARDWARE = "different-hardware"  # the runs ran on other GPU models or vendors
    TOO_FEW_CYCLES = "too-few-cycles"  # a run has too few cycles for the test (or the interval)
    NO_FUNCTION = "no-function"  # function:REGEX names no function the comparison holds
    UNTESTED = "untested"  # the function is too small a share of the cycle to be tested

    def __str__(self) -> str:
        return self.value


# The reasons that make a gate CANNOT_JUDGE, in the order they are checked.
CANNOT_JUDGE_REASONS = (GateReason.IDENTICAL, GateReason.EMPTY_CAPTURE, GateReason.NOT_STATIONARY,
                        GateReason.NO_CYCLES, GateReason.DIFFERENT_HARDWARE, GateReason.WINDOWS,
                        GateReason.TOO_FEW_CYCLES, GateReason.NO_FUNCTION, GateReason.UNTESTED)


class GateMetric(str, Enum):
    """What a gate judges: the cycle time's median, mean or P95, or a function's own time per
    cycle (`function:REGEX`)."""

    MEDIAN = "median"
    MEAN = "mean"
    P95 = "p95"
    FUNCTION = "function"

    def __str__(self) -> str:
        return self.value


class GateTest(str, Enum):
    """The test a gate's "significantly" rests on."""

    MANN_WHITNEY = "mann-whitney"  # two-sided U test of the cycles (the median)
    SIGNED_RANK = "signed-rank"  # Wilcoxon signed-rank over matched cycles
    WELCH = "welch"  # Welch's t test of the cycles (the mean)
    QUANTILE_CI = "quantile-ci"  # both runs' distribution-free 95 % CIs of the P95 apart (no p)
    FUNCTION_Q = "function-q"  # the function's own-time test, Benjamini–Hochberg q over the functions

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Gate:
    """One gate asked for: a metric, and for FUNCTION the regex naming the functions."""

    metric: GateMetric
    pattern: str = ""


# What users feel, as the report's headline states it: the mean cycle (throughput) and the P95.
DEFAULT_GATES = (Gate(GateMetric.MEAN), Gate(GateMetric.P95))


@dataclass(frozen=True)
class GateSpec:
    """The gates asked for (`--gate-on`; default the mean cycle and the P95), the threshold
    (`--fail-on`, % growth) and whether cannot-judge passes (`--allow-inconclusive`)."""

    threshold_pct: float
    gates: tuple[Gate, ...] = DEFAULT_GATES
    allow_inconclusive: bool = False


@dataclass(frozen=True)
class CycleStats:
    """A cycle time in both runs as a gate reads it (µs): the median and its test (`p_median`,
    `p_median_min` the smallest p the test can reach at these sizes, `shift_lo_us`/`hi` the
    Hodges–Lehmann 95 % CI of the shift, `paired`: signed-rank over matched cycles); the mean,
    Welch's p and the 95 % CI of the difference of means; the P95 and both runs' 95 %
    distribution-free CIs; the cycles of each run."""

    n_n: int
    n_a: int
    median_n_us: float
    median_a_us: float
    p_median: float
    mean_n_us: float
    mean_a_us: float
    p_welch: float
    p95_n_us: float
    p95_a_us: float
    p_median_min: float = NAN
    shift_lo_us: float = NAN
    shift_hi_us: float = NAN
    paired: bool = False
    diff_lo_us: float = NAN
    diff_hi_us: float = NAN
    p95_n_lo_us: float = NAN
    p95_n_hi_us: float = NAN
    p95_a_lo_us: float = NAN
    p95_a_hi_us: float = NAN


@dataclass(frozen=True)
class GateCheck:
    """One gate judged: its outcome and stable reason; the value in both runs (µs: the cycle
    time's statistic, or the function's own time per cycle), its change (% of the normal
    value) with a 95 % interval (NaN where unknown), the test and its p (NaN where the test
    gives none, or none was made), the threshold and α it was judged by, and the cycles of
    each run.  `function`, `device`: the function judged (FUNCTION); `pattern`: its regex."""

    metric: GateMetric
    outcome: GateOutcome
    reason: GateReason
    threshold_pct: float
    alpha: float
    test: GateTest
    n_us: float = NAN
    a_us: float = NAN
    change_pct: float = NAN
    lo_pct: float = NAN
    hi_pct: float = NAN
    p: float = NAN
    cycles_n: int = 0
    cycles_a: int = 0
    pattern: str = ""
    function: str = ""
    device: str = ""
    needed: int = 0  # TOO_FEW_CYCLES: the cycles a side the test or interval needs (0: unknown)


@dataclass(frozen=True)
class GateDecision:
    """The gate's decision over its checks: REGRESSION when any check regressed, else
    CANNOT_JUDGE when any could not judge, else PASS.  `allow_inconclusive`: cannot-judge was
    asked to pass (`passes` then holds), which every output says."""

    checks: tuple[GateCheck, ...]
    threshold_pct: float
    allow_inconclusive: bool = False

    @property
    def outcome(self) -> GateOutcome:
        found = {c.outcome for c in self.checks}
        for o in (GateOutcome.REGRESSION, GateOutcome.CANNOT_JUDGE):
            if o in found:
                return o
        return GateOutcome.PASS

    @property
    def passes(self) -> bool:
        """Whether the gate lets the change through: PASS, or CANNOT_JUDGE allowed."""
        o = self.outcome
        return o is GateOutcome.PASS or (o is GateOutcome.CANNOT_JUDGE and self.allow_inconclusive)

    @property
    def allowed(self) -> bool:
        """Cannot-judge turned into a pass on purpose (--allow-inconclusive)."""
        return self.outcome is GateOutcome.CANNOT_JUDGE and self.allow_inconclusive
