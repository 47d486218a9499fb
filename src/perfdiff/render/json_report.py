"""The JSON twin of the report: every number unrounded, findings and notices as records.

Versioned: `format` is "perfdiff-comparison" and `format_version` says which layout; a reader
(`read_comparison_json`) rejects any other.  A version grows by optional keys only (`load`,
`range_tree`), which its readers ignore when they do not know them; a key removed, renamed or
changed in meaning makes a new version.  docs/FORMAT.md describes the layout.
"""
from __future__ import annotations

import json
import math
from dataclasses import is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from perfdiff.version import __version__
from perfdiff.analyze import Analysis, Finding
from perfdiff.analyze.tree import RangeNode, TreeDiff
from perfdiff.analyze.verdict import VerdictClass
from perfdiff.errors import InputError

FORMAT = "perfdiff-comparison"
FORMAT_VERSION = 1


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy → Python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_clean(v) for v in x.tolist()]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _two(res: Any) -> dict[str, Any] | None:
    if res is None:
        return None
    return {k: getattr(res, k) for k in res.__dataclass_fields__}


def _record(x: Any) -> dict[str, Any]:
    """A frozen record as a dict (enum codes as their values, nested records as dicts)."""
    return {k: _field(v) for k, v in vars(x).items()}


def _field(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if is_dataclass(v) and not isinstance(v, type):
        return _record(v)
    if isinstance(v, tuple) and v and all(is_dataclass(e) for e in v):
        return [_record(e) for e in v]
    return v


def to_json(c: Analysis, findings: list[Finding], verdict: list[VerdictClass],
            tree: TreeDiff | None = None) -> dict[str, Any]:
    """Every number the report shows (unrounded), the verdict, findings and notices as records;
    `tree`: the range-tree diff of the report's "Range tree" section (key `range_tree`)."""
    def run(r: Any) -> dict[str, Any]:
        return {k: getattr(r, k) for k in ("name", "path", "n_cycles", "cycle_source", "cycle_detail",
                                           "dropped_cycles", "mean_us", "median_us", "p95_us", "traced_s",
                                           "status", "notes")}
    funcs = []
    for f in c.functions:
        d = {k: getattr(f, k) for k in f.__dataclass_fields__ if k not in ("t", "beta")}
        d["t_test"] = _two(f.t)
        d["beta_test"] = _two(f.beta)
        funcs.append(d)
    details = []
    for r in c.details:
        f = c.functions[r.func]
        row: dict[str, Any] = {"function": f.name, "device": f.device, "kind": f.kind, "score": r.score,
                               "legacy_score": r.legacy_score, "function_index": r.func}
        if r.mu is not None:
            m = c.mu[r.mu]
            row.update({"metric": m.metric, "unit": m.unit, "mu_test": _two(m.res), "z_log_mu": m.z_log, "q_mu": m.q,
                        "mu_fragile": m.fragile})
        else:
            row["metric"] = None
        details.append(row)
    ctx = [{"metric": r.metric, "device": r.device, "unit": r.unit, "test": _two(r.res), "z_log_mu": r.z_log,
            "q_mu": r.q, "aliases": r.aliases, "fragile": r.fragile,
            "median_interval_ms_n": r.median_interval_ms_n, "median_interval_ms_a": r.median_interval_ms_a}
           for r in c.context]
    extra = {"load": _load(c)} if c.load is not None else {}  # runs without step load: no key
    if tree is not None:  # runs whose ranges do not nest: no key, as the report has no section
        extra["range_tree"] = tree_json(tree)
    return _clean({
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "perfdiff_version": __version__, "alpha": c.alpha,
        "normal": run(c.normal), "abnormal": run(c.abnormal),
        "cycle_plan": _record(c.plan) if c.plan is not None else None,
        "cycle_test": _two(c.cycle_test), "cycle_ks_d": c.cycle_ks,
        "quantiles": {"normal": c.quantiles_n, "abnormal": c.quantiles_a},
        "verdict": [_record(v) for v in verdict],
        "findings": [{**_record(f), "related": [c.functions[i].name for i in f.related]} for f in findings],
        "functions": funcs, "details": details, "context": ctx,
        "common_mode": [vars(cm) for cm in c.common_modes],
        "gpu_busy": [{"device": b.device, "busy_n_pct": b.busy_n_pct, "busy_a_pct": b.busy_a_pct, "p": b.p,
                      "test": _two(b.res)} for b in c.gpu_busy],
        "constants": c.constants, "aliases": c.aliases, "scope": c.scope,
        "comparability": [_record(n) for n in c.comparability], "warnings": [_record(n) for n in c.warnings],
        "renames": c.renames,
        "untested": [c.functions[i].name for i in c.untested],
        "n_tests": c.n_tests_t, "min_attainable_p": c.min_p, "cycles_needed": c.cycles_needed,
        **extra,
    })


def _load(c: Analysis) -> dict[str, Any]:
    """The load record (docs/STATISTICS.md, "Load as a covariate") without its per-cycle
    arrays, which the cycles CSV carries; the functions by name."""
    assert c.load is not None
    lc = c.load
    d = {k: getattr(lc, k) for k in lc.__dataclass_fields__
         if k not in ("normal", "abnormal", "functions", "tokens_test", "requests_test", "prefill_test")}
    d["reason_normal"], d["reason_abnormal"] = lc.normal.reason, lc.abnormal.reason
    d["tests"] = {"tokens": _two(lc.tokens_test), "requests": _two(lc.requests_test),
                  "prefill_share": _two(lc.prefill_test)}
    d["functions"] = [{"function": c.functions[f.func].name, "device": c.functions[f.func].device,
                       **{k: v for k, v in vars(f).items() if k != "func"}} for f in lc.functions]
    return d


_NODE_FIELDS = tuple(f for f in RangeNode.__dataclass_fields__ if f != "test")
_TREE_FIELDS = ("basis", "alpha", "scale_us", "n_cycles", "matched", "n_tests", "nested", "gpu_reason", "too_deep",
                "renames", "cycle_share", "roots")


def tree_json(d: TreeDiff) -> dict[str, Any]:
    """The range-tree diff as JSON-ready data: the TreeDiff's fields, `n_material`, and `nodes`
    (pre-order, children by |Δ|) with every RangeNode field, its `test` as a dict, and its
    `depth`, `delta_us` and `ratio`.  NaN stays NaN here (`_clean` makes it null)."""
    nodes = []
    for n in d.nodes:
        rec: dict[str, Any] = {f: _field(getattr(n, f)) for f in _NODE_FIELDS}
        rec.update(depth=n.depth, delta_us=n.delta_us, ratio=n.ratio, test=_two(n.test))
        nodes.append(rec)
    out = {f: _field(getattr(d, f)) for f in _TREE_FIELDS}
    out.update(n_material=d.n_material, nodes=nodes)
    return _clean(out)


def dumps(data: dict[str, Any]) -> str:
    """The JSON text of `to_json`'s dict (NaN is never written: it became null)."""
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def read_comparison_json(path: str | Path) -> dict[str, Any]:
    """A comparison JSON written by perfdiff; InputError (exit 2) for anything else, including a
    format version this perfdiff does not know."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"not a readable JSON file ({exc.__class__.__name__})", path=p) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a perfdiff comparison (no \"format\": \"{FORMAT}\")", path=p)
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"comparison format version {version!r} is not supported by this perfdiff "
                         f"(it reads version {FORMAT_VERSION})", path=p)
    return data
