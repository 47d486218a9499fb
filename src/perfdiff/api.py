"""The Python API: `compare(normal, abnormal)` and `load(path)`, the pipeline behind the CLI.

    load ──► plan the pair's cycles ──► segment + attribute (per run) ──► analyze ──► findings ──► render

Each stage is one call into its module; the work that can run at once (the two runs, the
per-function tests, the CSV) is handed to a perfdiff.parallel.Parallel, so this reads as
the serial pipeline it is.  docs/ARCHITECTURE.md draws it.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perfdiff.attribute import CycleMatrix, attribute_activity, keep_rows_for_mu
from perfdiff.bundle import RunData, is_bundle
from perfdiff.errors import InputError
from perfdiff.inputs import check_pid, open_run, same_content
from perfdiff.model.cycles import CyclePlan
from perfdiff.model.durations import parse_duration_ns
from perfdiff.nesting import Nesting, nesting_of
from perfdiff.parallel import Background, Parallel
from perfdiff.plan import CycleSummary, check_cycle_choice, plan_pair, summarize_cycles
from perfdiff.rangetree import RangeNesting, RangeProfile, empty_profile, range_nesting, range_profile
from perfdiff.segment import Cycles, cut_cycles, rename_devices

if TYPE_CHECKING:  # the analysis (scipy) is imported while the runs load: see _import_later_stages
    from perfdiff.analyze import Analysis, Finding, Notice, Thresholds
    from perfdiff.analyze.tree import TreeDiff
    from perfdiff.analyze.verdict import VerdictClass

Run = RunData
"""One run in memory: its manifest and its activity, samples and markers tables."""

__all__ = ["Comparison", "RangeTree", "RankComparison", "Run", "compare", "compare_ranks", "load", "tree"]


def load(path: str | os.PathLike[str], *, pid: int | None = None, group: str = "full") -> Run:
    """A run bundle, or a trace (nsys .sqlite / .nsys-rep, Kineto .json[.gz]) imported.

    `pid`: the process to read from an nsys export holding several; `group`: "short" groups
    kernels by their short name.  Raises perfdiff.errors.InputError for a bad input."""
    return open_run(path, pid=pid, group=group)


@dataclass(frozen=True)
class _Options:
    pid: int | None
    group: str
    cycle: str | None
    window_ns: int | None


def _load_side(opts: _Options, side: tuple[int, str | os.PathLike[str]],
               cores: int) -> tuple[tuple[int, RunData, RangeNesting], tuple[CycleSummary, bool]]:
    """Load one side (0 normal, 1 abnormal), nest its ranges, and summarise what it offers
    as cycles and whether its own ranges nest."""
    index, path = side
    run = open_run(path, pid=opts.pid, group=opts.group, for_compare=True, cores=cores)
    range_nest = range_nesting(run)
    return (index, run, range_nest), (summarize_cycles(run), range_nest.nested)


def _cut_side(state: tuple[int, RunData, RangeNesting], decision: tuple[CyclePlan, bool]
              ) -> tuple[RunData, Cycles, CycleMatrix, Nesting, RangeProfile]:
    """Cut one side into the pair's cycles (the abnormal one's GPUs renamed to their
    counterparts first), sum its activity per (function, cycle), note which CPU ranges
    run inside which, and build its range tree when either side's own ranges nest (else
    the report shows no tree, and the side gets an empty one)."""
    index, run, range_nest = state
    plan, trees = decision
    if index == 1 and plan.device_map:
        run = rename_devices(run, plan.device_map)
        if trees:  # GPU-side ranges find their stream's work by its (renamed) device
            range_nest = range_nesting(run)
    cycles = cut_cycles(run, plan)
    matrix = attribute_activity(run, cycles)
    nesting = nesting_of(run, matrix)
    ranges = range_profile(run, cycles, range_nest) if trees else empty_profile(cycles)
    run, matrix = keep_rows_for_mu(run, matrix)
    return run, cycles, matrix, nesting, ranges


def _import_later_stages() -> None:
    """Import the analysis and rendering modules (scipy among them: ~0.5 s) while the
    workers load the runs."""
    import perfdiff.analyze.compare  # noqa: F401  (perfdiff.analyze imports its modules on first use)
    import perfdiff.render  # noqa: F401


def _thresholds(alpha: float, thresholds: Thresholds | None) -> Thresholds:
    """The thresholds given, else perfdiff's with `alpha` (validated: InputError, one line)."""
    from perfdiff.analyze.thresholds import Thresholds

    return thresholds if thresholds is not None else Thresholds(alpha=alpha)


def _input_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of a trace to import (a file, or everything under a directory holding one); a
    run bundle counts 0: it loads in about a second, and handing its rows back from a worker
    costs about as much as loading it."""
    p = Path(path)
    try:
        if is_bundle(p):
            return 0
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    except OSError:
        return 0


def compare(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
            cycle: str | None = None, window: str | int | None = None, pid: int | None = None,
            group: str = "full", force: bool = False, parallel: Parallel | None = None,
            thresholds: Thresholds | None = None) -> Comparison:
    """Compare an abnormal run against a normal one.

    `normal`, `abnormal`: run bundles or traces.  `alpha`: the false-discovery rate for
    "significant".  `cycle`: a regex naming the marker ranges (or kernels) that delimit
    cycles; `window`: fixed-window cycles instead (ns, or a duration such as "100ms").
    `pid`, `group`: as for `load`.  `parallel`: how to use the cores (default: all of them;
    `Parallel.serial()` runs everything in this process).  Raises InputError for bad input,
    and for runs with nothing in common (no function in both, or median cycles more than
    ×50 apart) unless `force`.  Inputs with the same bytes give the one finding IDENTICAL.
    `thresholds`: the decision thresholds (perfdiff.analyze.Thresholds; default perfdiff's with
    `alpha`, which it replaces)."""
    th = _thresholds(alpha, thresholds)
    check_pid([normal, abnormal], pid)
    check_cycle_choice(cycle, window)
    par = parallel or Parallel()
    window_ns = parse_duration_ns(window) if isinstance(window, str) else window
    opts = _Options(pid=pid, group=group, cycle=cycle, window_ns=window_ns)
    paths = ((0, normal), (1, abnormal))
    plans: list[CyclePlan] = []

    def meet(summaries: list[tuple[CycleSummary, bool]]) -> tuple[CyclePlan, bool]:
        plans.append(plan_pair(summaries[0][0], summaries[1][0], cycle_regex=cycle, window_ns=window_ns))
        # The range trees are built only when the report shows them: a run's own ranges nest.
        return plans[0], summaries[0][1] or summaries[1][1]

    # Each side loads and summarises its cycle sources; one plan for both; each side is cut by it.
    (run_n, cyc_n, mat_n, nest_n, tree_n), (run_a, cyc_a, mat_a, nest_a, tree_a) = par.meet_pair(
        functools.partial(_load_side, opts), meet, _cut_side, paths, (_input_bytes(normal), _input_bytes(abnormal)),
        while_waiting=_import_later_stages)
    from perfdiff.analyze import build_findings, compare_runs
    from perfdiff.analyze.load import cycle_load
    from perfdiff.analyze.verdict import build_verdict
    from perfdiff.render import cycles_csv

    # What each cycle carried (the framework's step load), when the runs recorded it.
    loads = cycle_load(run_n, cyc_n), cycle_load(run_a, cyc_a)
    csv_load = _load_columns(loads) if any(x.recorded for x in loads) else (None, None)
    # Built in a thread while the runs are compared (numpy's sort and Arrow's CSV writer
    # release the GIL), once the tests' pool has forked.
    csv_job = par.background(cycles_csv, cyc_n.dur_ns, cyc_a.dur_ns, *csv_load)
    analysis = compare_runs(run_n, run_a, cyc_n, cyc_a, thresholds=th, matrices=(mat_n, mat_a), parallel=par,
                            plan=plans[0], nesting=(nest_n, nest_a), loads=loads)
    if not force:
        _check_in_common(analysis, normal, abnormal)
    identical = same_content(normal, abnormal)
    findings = build_findings(analysis, identical=identical)
    tree_diff = None
    if tree_n.nested or tree_a.nested:  # only where the process's own ranges nest
        from perfdiff.analyze.tree import diff_trees

        tree_diff = diff_trees(tree_n, tree_a, alpha=th.alpha, cycle_ns=(cyc_n.dur_ns, cyc_a.dur_ns),
                               matched=analysis.matched)
    return Comparison(analysis, tuple(findings), (run_n.manifest, run_a.manifest), (cyc_n, cyc_a), csv_job,
                      verdict=tuple(build_verdict(analysis, findings)), tree=tree_diff)


def _load_dict(x: Any) -> dict[str, np.ndarray]:
    """One run's per-cycle load (perfdiff.analyze.records.CycleLoad) as named columns."""
    return {"tokens": x.tokens, "requests": x.requests, "prefill_tokens": x.prefill_tokens,
            "decode_tokens": x.decode_tokens}


def _load_columns(loads: tuple[Any, Any]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return _load_dict(loads[0]), _load_dict(loads[1])


MAX_CYCLE_RATIO = 50.0  # median cycles further apart than this: nothing in common


def _check_in_common(a: Analysis, normal: Any, abnormal: Any) -> None:
    """InputError when the two runs share no function or their median cycles are more than
    ×50 apart: such runs are not two runs of one process, and a report would mislead."""
    ratio = a.abnormal.median_us / a.normal.median_us if a.normal.median_us > 0 else float("inf")
    why = None
    if not any(f.presence == "both" for f in a.functions):
        why = "no function runs in both"
    elif not 1.0 / MAX_CYCLE_RATIO <= ratio <= MAX_CYCLE_RATIO:
        why = f"their median cycles are ×{ratio:.3g} apart"
    if why:
        raise InputError(f"{normal} and {abnormal} have nothing in common ({why}): not compared; "
                         "--force compares them anyway")


class Comparison:
    """The result of `compare`: tables, findings and warnings as data, and the report."""

    def __init__(self, analysis: Analysis, findings: tuple[Finding, ...], manifests: tuple[dict, dict],
                 cycles: tuple[Cycles, Cycles], csv_job: Background | None = None, *,
                 verdict: tuple[VerdictClass, ...] = (), tree: TreeDiff | None = None):
        self.analysis = analysis
        self.tree = tree  # the range-tree diff (TreeDiff) when either run's own ranges nest, else None
        self.findings = findings
        self.verdict = verdict  # what changed, as VerdictClass records, the largest first
        self.manifests = manifests
        self._cycles = cycles
        self._csv_job = csv_job

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
        """One row per (function, device, kind): own time per cycle (µs), τ (pp), β (%), calls,
        q-values, effect sizes, flags."""
        rows = []
        for f in self.analysis.functions:
            d = {k: getattr(f, k) for k in f.__dataclass_fields__ if k not in ("t", "beta")}
            for prefix, res in (("t", f.t), ("beta", f.beta)):
                for k in ("z", "p_welch", "p_mwu", "hl", "cliffs_delta"):
                    d[f"{prefix}_{k}"] = getattr(res, k) if res is not None else float("nan")
            rows.append(d)
        return pd.DataFrame(rows)

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
        for side, (label, c) in enumerate(zip(("normal", "abnormal"), self._cycles, strict=True)):
            df = pd.DataFrame({"run": label, "index": np.arange(c.n), "start_ns": c.start_ns, "end_ns": c.end_ns,
                               "dur_us": c.dur_ns / 1e3})
            if load is not None:
                from perfdiff.analyze.load import NO_SAMPLE

                cl = load.abnormal if side else load.normal
                for name, values in _load_dict(cl).items():
                    df[name] = values
                df["load_note"] = np.where(np.isfinite(cl.tokens), "", cl.reason or NO_SAMPLE)
            parts.append(df)
        return pd.concat(parts, ignore_index=True)

    @property
    def cycle_time_change_pct(self) -> float:
        """How much the median cycle time grew, % (negative: it fell)."""
        n, a = self.analysis.normal.median_us, self.analysis.abnormal.median_us
        return 100.0 * (a / n - 1.0) if n else float("nan")

    def to_markdown(self, *, top: int = 25, cycles_csv: str | None = None, plots: list[str] | None = None,
                    plots_note: str | None = None) -> str:
        """The Markdown report; `cycles_csv` and `plots` name the files written beside it (see
        `write_plots`), `plots_note` says why there are none."""
        from perfdiff.render import render_markdown

        return render_markdown(self.analysis, list(self.findings), list(self.verdict), self.manifests, top=top,
                               cycles_csv=cycles_csv,
                               plots=plots or [], plots_note=plots_note, tree=self.tree)

    def write_plots(self, folder: str | os.PathLike[str], stem: str) -> list[str]:
        """Write the report's pictures (PNG) into `folder` as `stem`.*.png and return their
        names; perfdiff.render.plots.PlotsUnavailable without matplotlib."""
        from perfdiff.render.plots import write_plots

        return write_plots(self.analysis, Path(folder), stem)

    def to_json(self) -> dict[str, Any]:
        """Every number, finding and notice as JSON-ready data (format "perfdiff-comparison")."""
        from perfdiff.render import to_json

        return to_json(self.analysis, list(self.findings), list(self.verdict), self.tree)

    def cycles_csv(self) -> bytes:
        """Both runs' cycle durations (µs), rank by rank, as CSV."""
        if self._csv_job is not None:
            return self._csv_job.result()
        from perfdiff.render import cycles_csv

        load = self.analysis.load
        columns = _load_columns((load.normal, load.abnormal)) if load is not None else (None, None)
        return cycles_csv(self._cycles[0].dur_ns, self._cycles[1].dur_ns, *columns)


def tree(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
         cycle: str | None = None, total: bool = False, pid: int | None = None, group: str = "full",
         thresholds: Thresholds | None = None) -> RangeTree:
    """The range-tree diff of two runs: both runs' ranges nested by containment, matched by
    name path, each path's change (perfdiff.analyze.tree).

    Per cycle, with tests, when the pair can be cut into cycles marked by the process
    (perfdiff markers, ProfilerStep#N, a repeating range, `cycle`: a regex as for `compare`);
    in total otherwise, or with `total`.  Raises InputError for a bad input or when neither
    run has ranges."""
    from perfdiff.analyze.tree import diff_trees

    alpha = _thresholds(alpha, thresholds).alpha
    check_pid([normal, abnormal], pid)
    runs = [open_run(p, pid=pid, group=group, for_compare=True) for p in (normal, abnormal)]
    cycles: list[Cycles | None] = [None, None]
    detail = "no cycles asked for (--total)" if total else ""
    if not total:
        plan = plan_pair(summarize_cycles(runs[0]), summarize_cycles(runs[1]), cycle_regex=cycle)
        if plan.source.marked:
            runs[1] = rename_devices(runs[1], plan.device_map)
            cycles = [cut_cycles(r, plan) for r in runs]
            detail = cycles[0].detail if cycles[0] is not None else ""
        else:
            detail = "the runs share no cycles the process marked"
    profiles = [range_profile(r, c) for r, c in zip(runs, cycles, strict=True)]
    if not profiles[0].n_paths and not profiles[1].n_paths:
        raise InputError(f"{normal} and {abnormal} hold no ranges (NVTX, profiler annotations or operators, "
                         "perfdiff cycle ranges): no tree to compare")
    cn, ca = cycles
    matched = False
    if cn is not None and ca is not None:
        from perfdiff import stats

        matched = stats.cycles_match(cn.dur_ns.astype(np.float64), ca.dur_ns.astype(np.float64))[0]
    diff = diff_trees(profiles[0], profiles[1], alpha=alpha, matched=matched,
                      cycle_ns=(cn.dur_ns, ca.dur_ns) if cn is not None and ca is not None else None)
    return RangeTree(diff, tuple(runs), detail)


class RangeTree:
    """The result of `tree`: the diff as records (`diff`, a TreeDiff), as a DataFrame
    (`paths`), and rendered (`to_markdown`, `to_csv`)."""

    def __init__(self, diff: TreeDiff, runs: tuple[RunData, ...], cycles_detail: str):
        self.diff = diff
        self._labels = (runs[0].name, runs[1].name, runs[0].path, runs[1].path, cycles_detail)

    @property
    def paths(self) -> pd.DataFrame:
        """One row per range path (pre-order, children by |Δ|): its names, presence, inclusive,
        self and GPU time (µs, per cycle or total), calls, q, Cliff's δ, material, and whether
        it is a GPU-side range's path (`gpu_side`)."""
        rows = []
        for n in self.diff.nodes:
            rows.append({"path": n.path, "leaf": n.name, "depth": n.depth, "presence": n.presence,
                         "renamed_to": n.name_a, "incl_n_us": n.incl_n_us, "incl_a_us": n.incl_a_us,
                         "delta_us": n.delta_us, "ratio": n.ratio, "self_n_us": n.self_n_us,
                         "self_a_us": n.self_a_us, "gpu_n_us": n.gpu_n_us, "gpu_a_us": n.gpu_a_us,
                         "calls_n": n.calls_n, "calls_a": n.calls_a, "q": n.q,
                         "cliffs_delta": n.test.cliffs_delta if n.test else float("nan"),
                         "material": n.material, "gpu_side": n.gpu_side})
        return pd.DataFrame(rows)

    def _labels_for(self, csv_name: str | None):
        from perfdiff.render.tree import TreeLabels

        return TreeLabels(*self._labels, csv_name=csv_name)

    def to_markdown(self, *, csv_name: str | None = None) -> str:
        """The Markdown report; `csv_name`: the CSV written beside it, to name."""
        from perfdiff.render.tree import tree_report

        return tree_report(self.diff, self._labels_for(csv_name))

    def to_csv(self) -> bytes:
        """Every path, every column (docs/TREE.md)."""
        from perfdiff.render.tree import tree_csv

        return tree_csv(self.diff)


def compare_ranks(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
                  cycle: str | None = None, window: str | int | None = None, group: str = "full",
                  ranks: str | None = None, scheduler: str | None = None, workers: int | None = None,
                  progress: bool = False, thresholds: Thresholds | None = None) -> RankComparison:
    """Compare two runs of many ranks: each a directory of rank traces or bundles (or, with
    `ranks`, one nsys export holding one process per rank).  Each rank's load, segmentation
    and attribution runs as a Dask task (`scheduler`: an existing cluster's address; else a
    local cluster of `workers` processes started here).  `ranks`: which ranks to pair ("all",
    "0-3", "0:4,1:5"), needed when the world sizes differ.  Needs the extra perfdiff[ranks];
    raises InputError without it, and for bad input."""
    from perfdiff.ranks import compare_ranks as run

    check_cycle_choice(cycle, window)
    # The rank pipeline takes α; the other thresholds across ranks are perfdiff's.
    analysis = run(normal, abnormal, alpha=_thresholds(alpha, thresholds).alpha, cycle=cycle, window=window, group=group, ranks=ranks,
                   scheduler=scheduler, workers=workers, progress=progress)
    return RankComparison(analysis, (str(normal), str(abnormal)))


class RankComparison:
    """The result of `compare_ranks`: the rank table, stragglers, findings and verdict as data
    (`analysis`, a perfdiff.ranks.RankAnalysis), and the report."""

    def __init__(self, analysis: Any, labels: tuple[str, str]):
        self.analysis = analysis
        self.findings = analysis.findings
        self.verdict = analysis.verdict
        self.labels = labels

    @property
    def ranks(self) -> pd.DataFrame:
        """One row per rank: median cycle of each run (µs), top cause, wait in collectives (µs)."""
        return pd.DataFrame([{**{f: getattr(r, f) for f in r.__dataclass_fields__}, "delta_us": r.delta_us}
                             for r in self.analysis.rows])

    @property
    def cycle_time_change_pct(self) -> float:
        """How much the job's median cycle time grew, % (per iteration the median over ranks;
        negative: it fell)."""
        c = self.analysis.cycle
        return c.change_pct if c is not None else float("nan")

    def to_markdown(self, *, plots: list[str] | None = None, plots_note: str | None = None) -> str:
        """The Markdown report; `plots`: picture files beside it (write_plots), linked by
        relative path; `plots_note`: why there are none."""
        from perfdiff.render.ranks import rank_markdown

        return rank_markdown(self.analysis, self.labels, plots, plots_note)

    def write_plots(self, folder: str | os.PathLike[str], stem: str) -> list[str]:
        """Write the report's picture (PNG) into `folder` as `stem`.ranks.png and return its
        name; perfdiff.render.plots.PlotsUnavailable without matplotlib."""
        from perfdiff.render.plots import write_rank_plots

        return write_rank_plots(self.analysis, Path(folder), stem)

    def to_json(self) -> dict[str, Any]:
        from perfdiff.render.ranks import rank_json

        return rank_json(self.analysis)
