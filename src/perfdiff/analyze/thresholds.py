"""The decision thresholds of a comparison, as one record (docs/STATISTICS.md, "Thresholds").

Every rule that turns a number into a decision (significant, material, a cause, a class of the
verdict, a sentence's "the median held") reads its threshold here, and the report reads the
same record, so what a report says and what the analysis did cannot drift apart.  The record
is validated once, when it is built; `Analysis.thresholds` carries it to the renderer.
Standard library only: the CLI and the API build one before the runs load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from perfdiff.errors import InputError


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of one comparison; the defaults are perfdiff's.

    Significance and materiality (docs/STATISTICS.md, "Significant and material"):
    `alpha` the false-discovery rate; a cause moves at least `material_tau_pp` of the abnormal
    cycle with |Cliff's δ| ≥ `material_delta`.  Which functions are tested: pooled mean own
    time ≥ `test_min_share` of the pooled mean cycle; the tests' Z floors `t_floor_us`,
    `beta_floor_pp`, `busy_floor_pp`.  The checks': `same_calls_log`, `cycle_ratio_max`,
    `common_mode_min_beta`, `per_call_min_beta`.  The findings' rules: `host_share_min_rel`, `idle_share_pct`,
    `more_calls_ratio`, `swap_offset`, `device_wide_band`, `nested_min_share`.  The verdict's:
    `clock_drop_rel`, `host_wide_rest_share`, `swap_share`, `starved_drop_pp`, `starved_drop_rel`,
    `launch_ratio`, `sync_more_ratio`, `throttle_held_pp`.  The wording's: `shape_median_pct`,
    `shape_tail_ratio`, `head_mean_pct`, `inclusive_rel`, `categories_first_share`.  Across ranks:
    `material_cycle_pct`, `waited_share`."""

    alpha: float = 0.05  # false-discovery rate: significant is q ≤ alpha
    material_tau_pp: float = 1.0  # a cause moves at least 1 % of the abnormal cycle …
    material_delta: float = 0.147  # … with at least a small effect size, |Cliff's δ| (Romano et al. 2006)
    test_min_share: float = 0.001  # a function is tested when its pooled mean own time ≥ 0.1 % of the pooled mean cycle
    t_floor_us: float = 1e-3  # own-time Z floor: the 1 ns timer resolution, in µs
    beta_floor_pp: float = 0.01  # β's Z floor, pp
    busy_floor_pp: float = 0.01  # a GPU's busy share's Z floor, pp, as for β
    same_calls_log: float = 0.05  # |ln(calls_A / calls_N)| at most: "the same calls per cycle"
    cycle_ratio_max: float = 2.0  # median cycle times further apart than this ratio: warn
    common_mode_min_beta: float = 0.05  # pp of the cycle a kernel must hold to take part in the common-mode check
    per_call_min_beta: float = 0.05  # pp of the cycle a function must hold to take part in the per-call check
    host_share_min_rel: float = 0.10  # a host state is a cause only when its share moved by ≥ 10 % of itself
    idle_share_pct: float = 99.0  # a wait filling this much of the cycle in both runs: a thread idle through it
    more_calls_ratio: float = 1.25  # new work: at least 25 % more calls per cycle
    swap_offset: float = 0.8  # kernels moving the other way take back at least this share of the causes' τ
    device_wide_band: float = 0.1  # |ln r| from the device's median ratio within which a function follows it
    nested_min_share: float = 0.9  # a cause inside another cause's range for at least this share of its time
    clock_drop_rel: float = 0.10  # the host CPU clock fell by at least 10 % of itself
    host_wide_rest_share: float = 0.25  # waits leave ≥ 25 % of a host-wide slowdown unexplained
    swap_share: float = 0.25  # kernels replaced under one op explain ≥ 25 % of the cycle's change: a verdict class
    starved_drop_pp: float = 5.0  # a GPU's busy share fell by at least 5 pp of the cycle …
    starved_drop_rel: float = 0.10  # … and by at least 10 % of itself
    launch_ratio: float = 1.25  # launch calls ≥ 25 % slower per call, or ≥ 25 % more numerous than the kernels
    sync_more_ratio: float = 1.25  # synchronisation calls ≥ 25 % more numerous per cycle (or new)
    throttle_held_pp: float = 5.0  # a GPU throttle reason rose by ≥ 5 pp of the time: said even with no kernel slower
    shape_median_pct: float = 5.0  # the median moved less than this …
    shape_tail_ratio: float = 1.5  # … while P95 grew by this factor and the KS test rejects: a stall
    head_mean_pct: float = 5.0  # a cycle time "moved" by at least this much, %
    inclusive_rel: float = 0.05  # a range's inclusive change said beside its own when they differ by this share
    material_cycle_pct: float = 1.0  # across ranks: a job cycle that changed by less is no change to explain
    waited_share: float = 0.5  # across ranks: a rank whose wait grew by this share of its Δ was held back
    categories_first_share: float = 0.5  # GPU time in rows new or vanished above this share: the category table first

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 1.0):
            raise InputError(f"alpha {self.alpha}: must be between 0 and 1")
        if not (isinstance(self.material_delta, (int, float)) and 0.0 <= self.material_delta <= 1.0):
            raise InputError(f"material_delta {self.material_delta}: must be between 0 and 1 (|Cliff's δ|)")
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise InputError(f"threshold {f.name} {v!r}: must be a finite number, at least 0")

    def significant(self, q: float | None) -> bool:
        """q ≤ alpha (a NaN or missing q is never significant)."""
        return q is not None and math.isfinite(q) and q <= self.alpha

    def material(self, tau_pp: float, delta: float) -> bool:
        """|τ| ≥ material_tau_pp and |δ| ≥ material_delta (δ unknown, NaN: τ alone)."""
        return abs(tau_pp) >= self.material_tau_pp and not self.small_effect(delta)

    def same_calls(self, calls_n: float, calls_a: float) -> bool:
        """Called in both runs, as often per cycle within same_calls_log (±5 %)."""
        return calls_n > 0 and calls_a > 0 and abs(math.log(calls_a / calls_n)) <= self.same_calls_log

    def small_effect(self, delta: float) -> bool:
        """|Cliff's δ| known and below material_delta."""
        return math.isfinite(delta) and abs(delta) < self.material_delta


DEFAULT = Thresholds()
