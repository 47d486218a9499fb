"""One comparison's result: everything a report is rendered from, as one serialisable record.

`ComparisonResult` holds the analysis, the findings, the verdict, the range-tree diff, both
runs' manifests and their cycles' bounds.  `to_data` / `from_data` write and read it as
JSON-ready data by its declared fields (perfdiff.model.codec); the renderers
(perfdiff.render) take it whole, so a saved comparison renders as the live one did.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfdiff.analyze.evidence import Finding
from perfdiff.analyze.gate_records import GateDecision
from perfdiff.analyze.records import NO_SAMPLE, Analysis, CategoryRow, CycleLoad, Notice
from perfdiff.analyze.tree_records import TreeDiff
from perfdiff.analyze.verdict_records import VerdictClass
from perfdiff.model import codec


@dataclass(frozen=True)
class CycleTimes:
    """One run's cycles: where each starts and ends (ns, the trace's clock)."""

    start_ns: np.ndarray = field(repr=False)
    end_ns: np.ndarray = field(repr=False)

    @property
    def dur_ns(self) -> np.ndarray:
        """Each cycle's duration (ns)."""
        return self.end_ns - self.start_ns

    @property
    def n(self) -> int:
        return len(self.start_ns)


@dataclass(frozen=True)
class ComparisonResult:
    """A comparison of an abnormal run against a normal one, whole: tables, findings and
    warnings as data (`analysis`, `findings`, `verdict`), the range-tree diff when either
    run's own ranges nest (`tree`), each run's manifest and its cycles' bounds, and the CI
    gate's decision where one was asked for (`gate`, perfdiff.analyze.gate)."""

    analysis: Analysis
    findings: tuple[Finding, ...]
    verdict: tuple[VerdictClass, ...]  # what changed, the largest class first
    manifests: tuple[dict[str, Any], dict[str, Any]]
    cycle_times: tuple[CycleTimes, CycleTimes]
    tree: TreeDiff | None = None
    gate: GateDecision | None = None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready data (perfdiff.model.codec): the analysis's fields at the top, beside
        `findings`, `verdict`, `manifests`, `cycle_times`, `tree` and `gate`."""
        out = codec.to_data(self.analysis)
        for name, t in _OWN_FIELDS.items():
            out[name] = codec.to_data(getattr(self, name), t)
        return out

    @classmethod
    def from_data(cls, data: Any) -> ComparisonResult:
        """The result `to_data` wrote; perfdiff.model.codec.RecordError where `data` does not
        match the fields (a key unknown, missing or renamed; a value of another kind)."""
        if not isinstance(data, dict):
            raise codec.RecordError("a comparison is an object")
        analysis = codec.from_data(Analysis, {k: v for k, v in data.items() if k not in _OWN_FIELDS})
        missing = [k for k in _OWN_FIELDS if k not in data]
        if missing:
            raise codec.RecordError(f"{cls.__name__}: field {missing[0]!r} missing")
        own = {name: codec.read(t, data[name], f"{cls.__name__}.{name}") for name, t in _OWN_FIELDS.items()}
        return cls(analysis=analysis, **own)

    @property
    def warnings(self) -> tuple[Notice, ...]:
        """Warnings about the comparison itself (typed records; see NoticeCode)."""
        return self.analysis.warnings

    @property
    def comparability(self) -> tuple[Notice, ...]:
        """Differences between the runs that can explain a change by themselves."""
        return self.analysis.comparability

    @property
    def functions(self) -> pd.DataFrame:
        """One row per (function, device, kind): the FunctionStats fields, its tests flattened
        as `t_<field>` and `beta_<field>` (the JSON's `t` and `beta` objects)."""
        rows = []
        for f in self.analysis.functions:
            d = {k: getattr(f, k) for k in f.__dataclass_fields__ if k not in ("t", "beta")}
            for prefix, res in (("t", f.t), ("beta", f.beta)):
                for k in ("z", "p_welch", "p_mwu", "hl", "cliffs_delta"):
                    d[f"{prefix}_{k}"] = getattr(res, k) if res is not None else float("nan")
            rows.append(d)
        return pd.DataFrame(rows)

    @property
    def categories(self) -> pd.DataFrame:
        """One row per op category of GPU work (docs/STATISTICS.md, "Op categories"): the
        CategoryRow fields, the category as its code."""
        cols = list(CategoryRow.__dataclass_fields__)
        return pd.DataFrame([{k: (str(v) if k == "category" else v) for k, v in vars(r).items()}
                             for r in self.analysis.categories], columns=cols)

    @property
    def metrics(self) -> pd.DataFrame:
        """One row per metric test: μ while a function ran (scope func) or the run-level series
        (scope ctx), with both runs' means, Z, p and q."""
        a = self.analysis
        rows = []
        for m in a.mu:
            rows.append({"scope": "func", "function": a.functions[m.func].name, "metric": m.metric,
                         "device": m.device, "unit": m.unit, "mean_n": m.res.mean_n, "mean_a": m.res.mean_a,
                         "z": m.res.z, "z_log": m.z_log, "p_welch": m.res.p_welch, "p_mwu": m.res.p_mwu,
                         "q": m.q, "fragile": m.fragile})
        for r in a.context:
            rows.append({"scope": "ctx", "function": None, "metric": r.metric, "device": r.device,
                         "unit": r.unit, "mean_n": r.res.mean_n, "mean_a": r.res.mean_a, "z": r.res.z,
                         "z_log": r.z_log, "p_welch": r.res.p_welch, "p_mwu": r.res.p_mwu, "q": r.q,
                         "fragile": r.fragile})
        return pd.DataFrame(rows, columns=["scope", "function", "metric", "device", "unit", "mean_n", "mean_a",
                                           "z", "z_log", "p_welch", "p_mwu", "q", "fragile"])

    @property
    def cycles(self) -> pd.DataFrame:
        """Every cycle of both runs: run (normal/abnormal), index, start_ns, end_ns, dur_us; when
        the runs recorded their engine steps' load, also the load each cycle carried (tokens,
        requests, prefill_tokens, decode_tokens; NaN where unknown, `load_note` says why)."""
        load = self.analysis.load
        parts = []
        for side, (label, c) in enumerate(zip(("normal", "abnormal"), self.cycle_times, strict=True)):
            df = pd.DataFrame({"run": label, "index": np.arange(c.n), "start_ns": c.start_ns, "end_ns": c.end_ns,
                               "dur_us": c.dur_ns / 1e3})
            if load is not None:
                cl = load.abnormal if side else load.normal
                for name, values in load_columns(cl).items():
                    df[name] = values
                df["load_note"] = np.where(np.isfinite(cl.tokens), "", cl.reason or NO_SAMPLE)
            parts.append(df)
        return pd.concat(parts, ignore_index=True)

    @property
    def cycle_time_change_pct(self) -> float:
        """How much the median cycle time grew, % (negative: it fell)."""
        n, a = self.analysis.normal.median_us, self.analysis.abnormal.median_us
        return 100.0 * (a / n - 1.0) if n else float("nan")


# The result's fields beside the analysis, with their declared types.
_OWN_FIELDS = {k: v for k, v in codec.field_types(ComparisonResult).items() if k != "analysis"}


def load_columns(x: CycleLoad) -> dict[str, np.ndarray]:
    """One run's per-cycle load as named columns."""
    return {"tokens": x.tokens, "requests": x.requests, "prefill_tokens": x.prefill_tokens,
            "decode_tokens": x.decode_tokens}
