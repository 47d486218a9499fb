"""The Python API: `compare(normal, abnormal)` and `load(path)`, the pipeline behind the CLI.

    load + cycles (offer ──► plan ──► cut) ──► attribute (per run) ──► analyze ──► findings ──► render

Each stage is one call into its module; the work that can run at once (the two runs, the
per-function tests, the CSV) is handed to a perfdiff.parallel.Parallel, so this reads as
the serial pipeline it is.  docs/ARCHITECTURE.md draws it.
"""
from __future__ import annotations

import functools
import os
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from perfdiff.attribute import CallDurations, CycleMatrix, attribute_activity, call_durations, keep_rows_for_mu
from perfdiff.bundle import RunData, is_bundle
from perfdiff.cycles import Cut, CutSide, Cycles, Loaded, PairChoice, check_cycle_choice, prepare_pair
from perfdiff.errors import InputError
from perfdiff.inputs import check_pid, open_run, same_content
from perfdiff.launches import LaunchChains, launch_chains
from perfdiff.model.durations import parse_duration_ns
from perfdiff.nesting import Nesting, nesting_of
from perfdiff.parallel import Parallel, Standby
from perfdiff.rangetree import RangeNesting, RangeProfile, empty_profile, range_nesting, range_profile

if TYPE_CHECKING:  # the analysis is imported while the runs load: see _import_later_stages
    from perfdiff.analyze import Analysis, Finding, Notice, Thresholds
    from perfdiff.analyze.gate_records import GateDecision
    from perfdiff.analyze.result import ComparisonResult
    from perfdiff.analyze.tree_records import TreeDiff
    from perfdiff.analyze.verdict_records import VerdictClass

Run = RunData
"""One run in memory: its manifest and its activity, samples and markers tables."""

__all__ = ["Comparison", "ProcessComparison", "RangeTree", "RankComparison", "Run", "compare", "compare_processes",
           "compare_ranks", "load", "read_comparison", "tree"]


def load(path: str | os.PathLike[str], *, pid: int | None = None, group: str = "full") -> Run:
    """A run bundle, or a trace (nsys .sqlite / .nsys-rep, Kineto .json[.gz]) imported.

    `pid`: the process to read from an nsys export holding several; `group`: "short" groups
    kernels by their short name.  Raises perfdiff.errors.InputError for a bad input."""
    return open_run(path, pid=pid, group=group)


@dataclass(frozen=True)
class _Side:
    """One side of a comparison, cut and attributed: its run (rows µ needs no more dropped),
    cycles, per-(function, cycle) sums, CPU range nesting and range tree."""

    run: RunData
    cycles: Cycles
    matrix: CycleMatrix
    nesting: Nesting
    ranges: RangeProfile
    calls: CallDurations | None = None  # each call's duration, where the pair is compared by totals
    launches: LaunchChains | None = None  # each GPU function's launching ops


def _load_side(group: str, several: str, side: tuple[str | os.PathLike[str], int | None], cores: int) -> Loaded:
    """Load one side (`side`: its path, and the pid to read of an nsys export holding several
    processes; `several`: open_run's several_processes), nest its ranges (kept in its worker),
    and note whether its own ranges nest."""
    path, pid = side
    run = open_run(path, pid=pid, group=group, for_compare=True, cores=cores, several_processes=several)
    range_nest = range_nesting(run)
    return Loaded(run, keep=range_nest, note=range_nest.nested)


def _attribute_side(cut: CutSide, range_nest: RangeNesting, nested: tuple[bool, bool]) -> _Side:
    """Sum one cut side's activity per (function, cycle), note which CPU ranges run inside
    which, and build its range tree when either side's own ranges nest (else the report
    shows no tree, and the side gets an empty one)."""
    run, cycles = cut.run, cut.cycles
    assert cycles is not None  # a comparison always cuts
    trees = nested[0] or nested[1]
    if cut.renamed and trees:  # GPU-side ranges find their stream's work by its (renamed) device
        range_nest = range_nesting(run)
    matrix = attribute_activity(run, cycles)
    nesting = nesting_of(run, matrix)
    ranges = range_profile(run, cycles, range_nest) if trees else empty_profile(cycles)
    # Compared by totals (the plan's regime): each call is a sample, taken before the rows μ
    # needs no more are dropped.
    calls = call_durations(run, cycles) if cut.totals else None
    launches = launch_chains(run)  # kernels swapped under one op are found by them
    run, matrix = keep_rows_for_mu(run, matrix)
    return _Side(run, cycles, matrix, nesting, ranges, calls, launches)


def _import_later_stages() -> None:
    """Import the analysis and rendering modules while the workers load the runs."""
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


def _side_pids(pid: int | tuple[int | None, int | None] | None) -> tuple[int | None, int | None]:
    """`pid` as (the normal run's, the abnormal run's)."""
    return tuple(pid) if isinstance(pid, tuple) else (pid, pid)  # type: ignore[return-value]


def compare(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
            cycle: str | None = None, window: str | int | None = None,
            pid: int | tuple[int | None, int | None] | None = None,
            group: str = "full", force: bool = False, parallel: Parallel | None = None,
            thresholds: Thresholds | None = None, pictures: bool = False,
            several_processes: str = "most") -> Comparison:
    """Compare an abnormal run against a normal one.

    `normal`, `abnormal`: run bundles or traces.  `alpha`: the false-discovery rate for
    "significant".  `cycle`: a regex naming the marker ranges (or kernels) that delimit
    cycles; `window`: fixed-window cycles instead (ns, or a duration such as "100ms").
    `pid`, `group`: as for `load` (`pid` may be a pair: the normal run's process, the abnormal
    run's; where it is None, an export holding several processes is read as its most active
    one, and `compare_processes` compares them all; with `several_processes="raise"` such an
    nsys SQLite export raises perfdiff.errors.SeveralProcesses instead, as soon as its kernel
    table shows a second process, for a caller that routes those to `compare_ranks` or
    `compare_processes` without reading every export's kernel table first).  `parallel`: how
    to use the cores (default: all of them; `Parallel.serial()` runs everything in this
    process).  Raises InputError for bad input,
    and for runs with nothing in common (no function in both, or median cycles more than
    ×50 apart) unless `force`.  Inputs with the same bytes give the one finding IDENTICAL.
    `thresholds`: the decision thresholds (perfdiff.analyze.Thresholds; default perfdiff's with
    `alpha`, which it replaces).  `pictures`: `write_plots` will be called; the process that
    draws them starts at once and readies matplotlib while this one compares."""
    painter = None
    if pictures:  # first: it imports matplotlib on another core while this process loads the runs
        from perfdiff.render.plots import start_painter

        painter = start_painter()
    try:
        comp = _compare(normal, abnormal, alpha=alpha, cycle=cycle, window=window, pid=pid, group=group, force=force,
                        parallel=parallel, thresholds=thresholds, while_waiting=_import_later_stages,
                        several=several_processes)
    except BaseException:
        if painter is not None:
            painter.close()
        raise
    comp._painter = _painter_kept(comp, painter)
    return comp


def _painter_kept(owner: object, painter: Standby | None) -> Standby | None:
    """`painter`, closed when `owner` is dropped without having asked it for the pictures."""
    if painter is not None:
        weakref.finalize(owner, painter.close)
    return painter


def _compare(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float,
             cycle: str | None, window: str | int | None, pid: int | tuple[int | None, int | None] | None,
             group: str, force: bool, parallel: Parallel | None, thresholds: Thresholds | None,
             while_waiting: Callable[[], None], several: str) -> Comparison:
    """`compare`, with `while_waiting` run while the runs load (the imports of the analysis)."""
    if several not in ("most", "raise"):
        raise ValueError(f"several_processes must be 'most' or 'raise', not {several!r}")
    th = _thresholds(alpha, thresholds)
    pids = _side_pids(pid)
    for p in dict.fromkeys(pids):
        check_pid([normal, abnormal], p)
    check_cycle_choice(cycle, window)
    par = parallel or Parallel()
    window_ns = parse_duration_ns(window) if isinstance(window, str) else window
    # Each side loads and offers its cycles; one plan for both; each side is cut by it and attributed.
    pair = prepare_pair(((normal, pids[0]), (abnormal, pids[1])), PairChoice(cycle, window_ns),
                        functools.partial(_load_side, group, several),
                        _attribute_side, parallel=par, sizes=(_input_bytes(normal), _input_bytes(abnormal)),
                        while_waiting=while_waiting)
    from perfdiff.analyze.compare import compare_runs
    from perfdiff.analyze.findings import build_findings
    from perfdiff.analyze.load import cycle_load
    from perfdiff.analyze.verdict import build_verdict

    n, a = pair.normal, pair.abnormal
    cyc_n, cyc_a = n.cycles, a.cycles
    # What each cycle carried (the framework's step load), when the runs recorded it.
    loads = cycle_load(n.run, cyc_n), cycle_load(a.run, cyc_a)
    analysis = compare_runs(n.run, a.run, cyc_n, cyc_a, thresholds=th, matrices=(n.matrix, a.matrix), parallel=par,
                            plan=pair.plan, nesting=(n.nesting, a.nesting), loads=loads,
                            calls=(n.calls, a.calls) if n.calls is not None and a.calls is not None else None,
                            chains=(n.launches or {}, a.launches or {}))
    if not force:
        _check_in_common(analysis, normal, abnormal)
    identical = same_content(normal, abnormal)
    findings = build_findings(analysis, identical=identical)
    tree_diff = None
    if n.ranges.nested or a.ranges.nested:  # only where the process's own ranges nest
        from perfdiff.analyze.tree import diff_trees

        tree_diff = diff_trees(n.ranges, a.ranges, alpha=th.alpha, cycle_ns=(cyc_n.dur_ns, cyc_a.dur_ns),
                               matched=analysis.matched)
    from perfdiff.analyze.order import order_details
    from perfdiff.analyze.result import ComparisonResult, CycleTimes

    verdict = build_verdict(analysis, findings)
    # Host states below the functions unless the verdict names them (perfdiff.analyze.order).
    analysis = order_details(analysis, findings, verdict)
    return Comparison(ComparisonResult(
        analysis=analysis, findings=tuple(findings), verdict=tuple(verdict),
        manifests=(n.run.manifest, a.run.manifest), tree=tree_diff,
        cycle_times=tuple(CycleTimes(start_ns=c.start_ns, end_ns=c.end_ns) for c in (cyc_n, cyc_a))))


MAX_CYCLE_RATIO = 50.0  # median cycles further apart than this: nothing in common


def gate_threshold(pct: float) -> float:
    """A gate's threshold (%), at least 0 and finite; InputError otherwise."""
    if not (isinstance(pct, (int, float)) and 0 <= pct < float("inf")):
        raise InputError(f"--fail-on: must be a percentage of at least 0, not {pct}")
    return float(pct)


def parse_gates(texts: tuple[str, ...] | list[str]) -> tuple[Any, ...]:
    """The gates named by `--gate-on` values (perfdiff.analyze.gate.parse_gate), each once, in
    their order; InputError naming the bad one."""
    from perfdiff.analyze.gate import parse_gate

    out = []
    for t in texts:
        try:
            g = parse_gate(t)
        except ValueError as exc:
            raise InputError(f"--gate-on: {exc}") from None
        if g not in out:
            out.append(g)
    return tuple(out)


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
    """The result of `compare`: `result`, the serialisable record of everything the report
    shows (perfdiff.analyze.result.ComparisonResult), its parts and tables, and its renderings."""

    def __init__(self, result: ComparisonResult, painter: Standby | None = None):
        self.result = result
        self._painter = _painter_kept(self, painter)  # compare(pictures=True): the process that draws them

    @property
    def analysis(self) -> Analysis:
        """Every statistic, unformatted (perfdiff.analyze.records.Analysis)."""
        return self.result.analysis

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The Key Findings as records, in the report's order."""
        return self.result.findings

    @property
    def verdict(self) -> tuple[VerdictClass, ...]:
        """What changed, as VerdictClass records, the largest first."""
        return self.result.verdict

    @property
    def tree(self) -> TreeDiff | None:
        """The range-tree diff when either run's own ranges nest, else None."""
        return self.result.tree

    @property
    def manifests(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.result.manifests

    @property
    def warnings(self) -> tuple[Notice, ...]:
        """Warnings about the comparison itself (typed records; see NoticeCode)."""
        return self.result.warnings

    @property
    def comparability(self) -> tuple[Notice, ...]:
        """Differences between the runs that can explain a change by themselves."""
        return self.result.comparability

    @property
    def functions(self) -> pd.DataFrame:
        """One row per (function, device, kind) (ComparisonResult.functions)."""
        return self.result.functions

    @property
    def categories(self) -> pd.DataFrame:
        """GPU time per op category, both runs (ComparisonResult.categories)."""
        return self.result.categories

    @property
    def metrics(self) -> pd.DataFrame:
        """One row per metric test (ComparisonResult.metrics)."""
        return self.result.metrics

    @property
    def cycles(self) -> pd.DataFrame:
        """Every cycle of both runs (ComparisonResult.cycles)."""
        return self.result.cycles

    @property
    def cycle_time_change_pct(self) -> float:
        """How much the median cycle time grew, % (negative: it fell)."""
        return self.result.cycle_time_change_pct

    @property
    def gate(self) -> GateDecision | None:
        """The CI gate's decision, once `judge` made it (else None)."""
        return self.result.gate

    def judge(self, fail_on_pct: float, *, gate_on: tuple[str, ...] | list[str] | None = None,
              allow_inconclusive: bool = False) -> GateDecision:
        """The CI gate (perfdiff.analyze.gate; docs/CI.md): PASS, REGRESSION or CANNOT_JUDGE,
        with a stable reason per gate.  `fail_on_pct`: the growth (%) that is a regression when
        significant; `gate_on`: what to judge, each "median", "mean", "p95" or
        "function:REGEX" (default: the mean cycle and the P95, as the report's headline);
        `allow_inconclusive`: cannot-judge passes, and the outputs say so.  The decision is kept
        on the result, so the report and the JSON state it.  InputError for a bad `gate_on`
        or threshold."""
        from perfdiff.analyze.gate import judge
        from perfdiff.analyze.gate_records import DEFAULT_GATES, GateSpec

        spec = GateSpec(gate_threshold(fail_on_pct), parse_gates(gate_on) if gate_on else DEFAULT_GATES,
                        allow_inconclusive)
        r = self.result
        decision = judge(r.analysis, r.findings, r.verdict, spec)
        self.result = replace(r, gate=decision)
        return decision

    def to_markdown(self, *, top: int = 25, cycles_csv: str | None = None, plots: list[str] | None = None,
                    plots_note: str | None = None) -> str:
        """The Markdown report; `cycles_csv` and `plots` name the files written beside it (see
        `write_plots`), `plots_note` says why there are none."""
        from perfdiff.render import render_markdown

        return render_markdown(self.result, top=top, cycles_csv=cycles_csv, plots=plots or [], plots_note=plots_note)

    def write_plots(self, folder: str | os.PathLike[str], stem: str) -> list[str]:
        """Write the report's pictures (PNG) into `folder` as `stem`.*.png and return their
        names; perfdiff.render.plots.PlotsUnavailable without matplotlib."""
        from perfdiff.render.plots import write_plots

        painter, self._painter = self._painter, None
        return write_plots(self.result, Path(folder), stem, painter=painter)

    def to_html(self, *, top: int = 25, plots: bool = True) -> str:
        """The report as one self-contained HTML file (perfdiff.render.html): the Markdown's
        text, its pictures embedded (`plots`; none, with the reason, without matplotlib).
        InputError without markdown-it-py (perfdiff[html])."""
        from perfdiff.render.html import render_html
        from perfdiff.render.plots import PlotsUnavailable, plot_pngs

        pngs: dict[str, bytes] = {}
        note = None
        if plots:
            try:
                pngs = plot_pngs(self.result)
            except PlotsUnavailable as exc:
                note = str(exc)
        return render_html(self.result, top=top, plots=pngs, plots_note=note)

    def to_json(self) -> dict[str, Any]:
        """Every number, finding and notice as JSON-ready data (format "perfdiff-comparison",
        docs/FORMAT.md); `read_comparison` reads it back."""
        from perfdiff.render import to_json

        return to_json(self.result)

    def cycles_csv(self) -> bytes:
        """Both runs' cycle durations (µs), rank by rank, as CSV."""
        from perfdiff.render.cycles_csv import render_csv

        return render_csv(self.result)


def read_comparison(path: str | os.PathLike[str]) -> Comparison:
    """The comparison a `--json` file holds (written by `Comparison.to_json`), to render again;
    InputError where the file is no comparison of this perfdiff's format version."""
    from perfdiff.render.json_report import read_comparison as read

    return Comparison(read(path))


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
    pair = prepare_pair((normal, abnormal), PairChoice(cycle, cut=Cut.NEVER if total else Cut.MARKED),
                        lambda p, cores: Loaded(open_run(p, pid=pid, group=group, for_compare=True)),
                        lambda cut, keep, notes: cut)
    from perfdiff.render.cycles_words import cycle_detail

    runs = [pair.normal.run, pair.abnormal.run]
    cycles = [s.cycles for s in (pair.normal, pair.abnormal)]
    if total:
        detail = "no cycles asked for (--total)"
    elif cycles[0] is None:
        detail = "the runs share no cycles the process marked"
    else:
        detail = cycle_detail(cycles[0])  # the tree report's words
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
                  progress: bool = False, thresholds: Thresholds | None = None,
                  pictures: bool = False) -> RankComparison:
    """Compare two runs of many ranks: each a directory of rank traces or bundles (or, with
    `ranks`, one nsys export holding one process per rank).  Each rank's load, segmentation
    and attribution runs as a task of a worker process (`scheduler`: an existing Dask cluster's
    address; else a pool of `workers` processes started here).  `ranks`: which ranks to pair ("all",
    "0-3", "0:4,1:5"), needed when the world sizes differ.  A scheduler needs the extra
    perfdiff[ranks] (InputError without it); InputError for bad input.  `pictures`:
    `write_plots` will be called; the process that draws it starts now and imports matplotlib
    while the ranks are compared."""
    from perfdiff.ranks import compare_ranks as run

    check_cycle_choice(cycle, window)
    th = _thresholds(alpha, thresholds)
    painter = None
    if pictures:
        from perfdiff.render.plots import start_painter

        painter = start_painter()
    try:
        analysis = run(normal, abnormal, thresholds=th, cycle=cycle, window=window, group=group, ranks=ranks,
                       scheduler=scheduler, workers=workers, progress=progress)
    except BaseException:
        if painter is not None:
            painter.close()
        raise
    return RankComparison(analysis, (str(normal), str(abnormal)), painter)


class RankComparison:
    """The result of `compare_ranks`: the rank table, stragglers, findings and verdict as data
    (`analysis`, a perfdiff.ranks.RankAnalysis), and the report."""

    def __init__(self, analysis: Any, labels: tuple[str, str], painter: Standby | None = None):
        self.analysis = analysis
        self._painter = _painter_kept(self, painter)  # compare_ranks(pictures=True): the process that draws it
        self.findings = analysis.findings
        self.verdict = analysis.verdict
        self.labels = labels
        self.gate: GateDecision | None = None  # the CI gate's decision, once `judge` made it

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

    def judge(self, fail_on_pct: float, *, gate_on: tuple[str, ...] | list[str] | None = None,
              allow_inconclusive: bool = False) -> GateDecision:
        """The CI gate over the job's iteration time (per iteration the median over ranks), as
        `Comparison.judge`: its median, mean or P95 (default: the mean and the P95); a
        function:REGEX gate is the single pair's (InputError here).  Kept as `gate`, which
        the report states."""
        from perfdiff.analyze.gate import judge_job
        from perfdiff.analyze.gate_records import DEFAULT_GATES, GateMetric, GateSpec

        gates = parse_gates(gate_on) if gate_on else DEFAULT_GATES
        if any(g.metric is GateMetric.FUNCTION for g in gates):
            raise InputError("--gate-on function:REGEX judges a single pair; runs of many ranks are gated on the "
                             "job's iteration time (median, mean, p95)")
        c = self.analysis.cycle
        self.gate = judge_job(c.stats if c is not None else None, GateSpec(gate_threshold(fail_on_pct), gates,
                                                                           allow_inconclusive), self.analysis.alpha)
        return self.gate

    def to_markdown(self, *, plots: list[str] | None = None, plots_note: str | None = None) -> str:
        """The Markdown report; `plots`: picture files beside it (write_plots), linked by
        relative path; `plots_note`: why there are none."""
        from perfdiff.render.ranks import rank_markdown

        return rank_markdown(self.analysis, self.labels, plots, plots_note, gate=self.gate)

    def write_plots(self, folder: str | os.PathLike[str], stem: str) -> list[str]:
        """Write the report's picture (PNG) into `folder` as `stem`.ranks.png and return its
        name; perfdiff.render.plots.PlotsUnavailable without matplotlib."""
        from perfdiff.render.plots import write_rank_plots

        painter, self._painter = self._painter, None
        if painter is not None:
            return painter.call(write_rank_plots, self.analysis, Path(folder), stem)
        return write_rank_plots(self.analysis, Path(folder), stem)

    def to_json(self) -> dict[str, Any]:
        from perfdiff.render.ranks import rank_json

        return rank_json(self.analysis)


def compare_processes(normal: str | os.PathLike[str], abnormal: str | os.PathLike[str], *, alpha: float = 0.05,
                      cycle: str | None = None, window: str | int | None = None, group: str = "full",
                      force: bool = False, parallel: Parallel | None = None,
                      thresholds: Thresholds | None = None) -> ProcessComparison:
    """Compare two runs process by process: each an nsys export (or a directory holding one
    alone) whose processes are not the ranks of one job (a server and its workers, processes
    sharing a GPU; perfdiff.ranks.processes).  Each run's processes are listed with their
    roles and paired; each pair is compared as `compare` compares two runs, on cycles of its
    own (`cycle`, `window`, `group`, `force`, `thresholds` apply to every pair; each pair
    imports both exports again, its process alone).  A pair the comparison refuses is said,
    with its reason; InputError where none could be compared, or for a bad input."""
    from perfdiff.ranks.discover import not_ranks
    from perfdiff.ranks.processes import (PairCode, ProcessReport, export_of, finish_pairs, list_processes,
                                          pair_processes)

    th = _thresholds(alpha, thresholds)
    check_cycle_choice(cycle, window)
    par = parallel or Parallel()
    pairs = pair_processes(list_processes(normal), list_processes(abnormal))
    results: dict[int, Any] = {}
    for p in pairs:
        if p.code is not PairCode.COMPARED:
            continue
        try:
            results[p.label] = compare(normal, abnormal, cycle=cycle, window=window, pid=p.pids, group=group,
                                       force=force, parallel=par, thresholds=th).result
        except InputError as exc:  # this pair is said not compared, with the comparison's own line
            results[p.label] = str(exc)
    done = {k: v for k, v in results.items() if not isinstance(v, str)}
    if not done:
        first = next((f"P{k} (pids {pairs[k - 1].pids[0]} → {pairs[k - 1].pids[1]}): {v}"
                      for k, v in results.items()), "no process has a counterpart in the other run")
        raise InputError(f"{normal} and {abnormal}: no pair of processes could be compared; {first}")
    exports = export_of(normal), export_of(abnormal)
    why = tuple(not_ranks(x) if x is not None else None for x in exports)  # each run's: said in the report
    return ProcessComparison(ProcessReport(finish_pairs(pairs, results), done, (str(normal), str(abnormal)),
                                           th.alpha, (why[0], why[1])))


class ProcessComparison:
    """The result of `compare_processes`: the pairs of processes with their roles and each
    compared pair's comparison as data (`report`, a perfdiff.ranks.processes.ProcessReport),
    and the report."""

    def __init__(self, report: Any):
        self.report = report

    @property
    def pairs(self) -> tuple[Any, ...]:
        """The pairs of processes (ProcessPair records), in the report's order: those that
        changed first."""
        return self.report.pairs

    def comparison(self, label: int) -> Comparison:
        """The comparison of pair P`label` (KeyError where it was not compared)."""
        return Comparison(self.report.results[label])

    def to_markdown(self, *, top: int = 25, plots: dict[int, list[str]] | None = None,
                    cycles_csv: dict[int, str] | None = None) -> str:
        """The Markdown report; `plots`, `cycles_csv`: per pair label, the files written beside
        it (`write_plots`, `cycles_csvs`)."""
        from perfdiff.render.processes import process_markdown

        return process_markdown(self.report, top=top, plots=plots, cycles_csv=cycles_csv)

    def write_plots(self, folder: str | os.PathLike[str], stem: str) -> dict[int, list[str]]:
        """Write each compared pair's pictures (PNG) into `folder` as `stem`.P<label>.*.png;
        their names per label.  perfdiff.render.plots.PlotsUnavailable without matplotlib."""
        from perfdiff.render.plots import write_plots

        return {k: write_plots(r, Path(folder), f"{stem}.P{k}") for k, r in self.report.results.items()}

    def cycles_csvs(self) -> dict[int, bytes]:
        """Each compared pair's cycles CSV (as `Comparison.cycles_csv`), per label."""
        from perfdiff.render.cycles_csv import render_csv

        return {k: render_csv(r) for k, r in self.report.results.items()}

    def to_json(self) -> dict[str, Any]:
        """The pairs and each one's whole comparison as JSON-ready data (format
        "perfdiff-process-comparison", docs/FORMAT.md)."""
        from perfdiff.render.processes import process_json

        return process_json(self.report)
