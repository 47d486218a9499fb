"""The results of a benchmark-table comparison as data: enums with stable codes, frozen records.

No wording here: `perfdiff.benchtable.render` words and rounds.  Values keep the unit of the
metric column (whatever the table used); ratios are candidate / reference, dimensionless.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import pandas as pd


class Significance(Enum):
    """What the repetitions of one configuration allow to say about its ratio."""

    SIGNIFICANT = "significant"  # Mann–Whitney p ≤ alpha
    NOT_SIGNIFICANT = "not-significant"  # p > alpha: shown as "~"
    TOO_FEW = "too-few"  # repetitions, but even a perfect separation could not reach alpha
    SINGLE = "single"  # one value on each side: nothing to test
    MISSING = "missing"  # the configuration lacks one side


class Outcome(Enum):
    """The candidate's result in one configuration, whichever way the metric is better."""

    BETTER = "better"
    WORSE = "worse"
    SAME = "same"  # not significant, or within the tie threshold when untested
    MISSING = "missing"


class Kind(Enum):
    """Why a pair of variants is compared."""

    BASELINE = "baseline"  # a variant against the baseline (or after against before)
    PAIR = "pair"  # the two variants besides the baseline, head to head


class NoteCode(Enum):
    """Things the reader should know about the input, with their values in `Note.values`."""

    ROWS_WITHOUT_VALUE = "rows-without-value"  # rows whose metric is NaN or infinite: left out
    ROWS_NOT_POSITIVE = "rows-not-positive"  # rows whose metric is 0 or negative (no ratio): left out
    ROWS_WITHOUT_VARIANT = "rows-without-variant"  # rows with no variant name: left out
    IGNORED_COLUMNS = "ignored-columns"  # numeric, non-integer columns that are neither key nor metric
    VARIANT_KEYS = "variant-keys"  # key columns that describe a variant (not matched on)
    REPETITIONS = "repetitions"  # configurations measured more than once


@dataclass(frozen=True)
class Note:
    code: NoteCode
    values: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """One compared pair: candidate / reference, matched on `match_keys`.

    `variant_keys` are key columns left out of the match because one side holds a single
    value there that the other never has (torch-f16's b_dtype float16 against uint4b).
    """

    reference: str
    candidate: str
    kind: Kind
    match_keys: tuple[str, ...]
    variant_keys: tuple[str, ...]
    n_matched: int
    n_reference_only: int
    n_candidate_only: int


@dataclass(frozen=True)
class GroupSummary:
    """The ratios of one comparison over one group of configurations.

    `group` is ((column, value), …), empty for all configurations; `geomean` its geometric
    mean ratio with a t interval on the log ratios (`ci_reason` when NaN); `better`, `worse`,
    `same` count the candidate's outcomes; `untested` how many of them rest on no test.
    """

    comparison: int  # index into BenchResult.comparisons
    grouping: tuple[str, ...]
    group: tuple[tuple[str, str], ...]
    n_configs: int
    geomean: float
    ci_low: float
    ci_high: float
    ci_reason: str
    better: int
    worse: int
    same: int
    untested: int


@dataclass(frozen=True)
class BenchResult:
    """A benchmark-table comparison.

    `rows` has one row per (comparison, configuration): `comparison` (index), the key columns
    (as text), `n_ref`, `n_cand`, `ref_median`, `cand_median`, `ref_ci_low` … `cand_ci_high`
    (the median's distribution-free CI, NaN with fewer than 6 repetitions), `ratio`,
    `p_value`, `test` (Significance code), `outcome` (Outcome code), `order` (first appearance in the
    input).  `configs` has one row per configuration with every variant's median and n.
    """

    sources: tuple[str, ...]
    metric: str
    by: str
    higher_is_better: bool
    alpha: float
    level: float
    tie_pct: float
    variants: tuple[str, ...]
    baseline: str
    keys: tuple[str, ...]
    constant_keys: tuple[tuple[str, str], ...]
    groupings: tuple[tuple[str, ...], ...]
    comparisons: tuple[Comparison, ...]
    rows: pd.DataFrame
    configs: pd.DataFrame
    summaries: tuple[GroupSummary, ...]
    notes: tuple[Note, ...]

    def overall(self, comparison: int) -> GroupSummary:
        """The summary of one comparison over all its configurations."""
        return next(s for s in self.summaries if s.comparison == comparison and not s.grouping)
