"""Statistics of the comparison (docs/STATISTICS.md): pure functions on 1-D float arrays.

Every function takes the per-cycle values of one side (or both: ``a`` = abnormal,
``n`` = normal), drops NaN/±inf inside (the caller counts them through
`compare_samples`), never modifies its inputs, and returns NaN for "not computable"
— never 0 or 1 in its place.  Values keep the unit of the input (µs, pp, MHz, …);
p- and q-values are probabilities in [0, 1].

Conventions fixed here (and tested in tests/test_stats.py):

- Two-sided exact Mann–Whitney p = min(1, 2·min(P(W ≤ w), P(W ≥ w))) over the
  permutation distribution of the rank sum W (midranks when tied).  Without ties this is
  scipy's ``method="exact"``; scipy ignores ties there, so the tied case is computed here.
- HL and its CI are computed on the floating-point differences ``a_i - n_j`` exactly as
  ``np.median(a[:, None] - n[None, :])`` would, without building the m·n matrix.
- "Fragile" needs both tests computable: an n/a test is reported with its own reason and
  is not a disagreement (see `is_fragile`).

Modules: `describe` (one-sample summaries), `pairwise` (order statistics of a_i - n_j),
`mannwhitney` (U test), `welch` (t test), `effects` (HL, its CI, Z, Cliff's δ, KS D),
`dependence` (dependence-robust p values of series in time order, n_eff),
`twosample` (all of them for one row, or the U test's p and Cliff's δ alone, of one row or many), `paired` (matched cycles), `multiple` (BH q, fragile), `common_mode`,
`binomial` (the exact one-sided binomial test),
`score` (suspicion and legacy scores), `power` (cycles needed).
"""
from __future__ import annotations

from perfdiff.stats.binomial import binomial_greater_p
from perfdiff.stats.common_mode import (COMMON_MAX_IQR, COMMON_MIN_BETA, COMMON_MIN_SHIFT, CommonMode,
                                        CommonModeDetail, common_mode, common_mode_detail, delta_vs_common)
from perfdiff.stats.dependence import Dependence
from perfdiff.stats.describe import (MAD_TO_SD, QUANTILE_KEYS, drop_nonfinite, log_epsilon, quantile_ci,
                                     quantile_table, resolution, robust_scale)
from perfdiff.stats.effects import (MEDIAN_SHARE, cliffs_delta, hl_confidence_interval, hodges_lehmann,
                                    ks_pvalue, ks_statistic, z_log, z_score)
from perfdiff.stats.mannwhitney import EXACT_LIMIT, mann_whitney_p, min_attainable_p
from perfdiff.stats.multiple import bh_qvalues, is_fragile
from perfdiff.stats.pairwise import HL_MAX_PAIRS, HL_MAX_SIDE
from perfdiff.stats.paired import MATCH_MIN_CYCLES, MATCH_MIN_RHO, compare_paired, cycles_match
from perfdiff.stats.power import cycles_needed
from perfdiff.stats.score import SCORE_Z_CAP, legacy_score, suspicion_score
from perfdiff.stats.twosample import TwoSample, UTest, compare_samples, u_test, u_test_rows
from perfdiff.stats.welch import welch_p

__all__ = [
    "COMMON_MAX_IQR", "COMMON_MIN_BETA", "COMMON_MIN_SHIFT", "EXACT_LIMIT", "HL_MAX_PAIRS", "HL_MAX_SIDE",
    "MATCH_MIN_CYCLES", "MATCH_MIN_RHO",
    "MAD_TO_SD", "MEDIAN_SHARE", "QUANTILE_KEYS", "SCORE_Z_CAP",
    "CommonMode", "CommonModeDetail", "Dependence", "TwoSample", "UTest",
    "bh_qvalues", "binomial_greater_p", "cliffs_delta", "common_mode", "common_mode_detail", "compare_paired",
    "compare_samples", "cycles_match", "cycles_needed",
    "delta_vs_common", "drop_nonfinite", "hl_confidence_interval", "hodges_lehmann", "is_fragile",
    "ks_pvalue", "ks_statistic", "legacy_score", "log_epsilon", "mann_whitney_p", "min_attainable_p", "quantile_ci",
    "quantile_table",
    "resolution", "robust_scale", "suspicion_score", "u_test", "u_test_rows", "welch_p", "z_log", "z_score",
]
