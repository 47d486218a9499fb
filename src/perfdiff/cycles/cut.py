"""Cut one run into cycles by the pair's plan: its GPU devices renamed to their counterparts
first where the plan matched them (the abnormal run's), then the plan's source cut with the
algorithms of perfdiff.segment."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.errors import InputError
from perfdiff.model.cycles import CyclePlan, Cycles, NoCycles, NoCyclesCode, Regime, WindowReason
from perfdiff.model.schema import CycleSource
from perfdiff.segment import (DEFAULT_WINDOW_NS, MIN_CYCLES, cut_at_gaps, cut_at_kernel, empty_cycles, fixed_windows,
                              marker_cycles, range_rows, regex_cycles, short_name, source_rows, whole_run)

__all__ = ["ABNORMAL", "NORMAL", "CutSide", "cut_cycles", "cut_side", "rename_devices"]

NORMAL, ABNORMAL = 0, 1  # the sides of a pair


@dataclass(frozen=True)
class CutSide:
    """One side of a pair cut by its plan: the run (devices renamed where the plan matched
    them; `renamed` says so), and its cycles (None where the pair is not cut); `totals`: the
    plan compares the pair by totals (Regime.TOTALS), so each call is a sample."""

    run: RunData
    cycles: Cycles | None
    renamed: bool = False
    totals: bool = False


def cut_side(run: RunData, plan: CyclePlan, side: int) -> CutSide:
    """Side `side` (NORMAL, ABNORMAL) of a pair cut by `plan`: the abnormal run's devices are
    renamed by the plan's device map first.  InputError as for `cut_cycles`."""
    renamed = side == ABNORMAL and bool(plan.device_map)
    if renamed:
        run = rename_devices(run, plan.device_map)
    return CutSide(run, cut_cycles(run, plan), renamed, totals=plan.regime is Regime.TOTALS)


def cut_cycles(run: RunData, plan: CyclePlan) -> Cycles:
    """Cut `run` into cycles by `plan` (its devices as they are).  Raises InputError when
    fewer than MIN_CYCLES cycles result."""
    cycles = _cut(run, plan)
    if cycles.n == 0:
        raise InputError(f"no cycles found: {_said(cycles)}", path=run.path)
    if cycles.n < MIN_CYCLES and plan.regime is not Regime.TOTALS:
        raise InputError(
            f"only {cycles.n} cycle found ({_said(cycles)}): comparing needs at least "
            f"{MIN_CYCLES}; collect longer or choose cycles with --cycle REGEX / --window DURATION",
            path=run.path)
    return cycles


def _said(c: Cycles) -> str:
    """The cycles' detail (or why there are none), why windows and what was passed over, for
    an error message (a report words them in perfdiff.render.cycles_words)."""
    text = c.detail if c.none_found is None else _none_found(c.none_found)
    if c.window_reason is WindowReason.CHOSEN:
        text += " (chosen with --window)"
    elif c.window_reason is WindowReason.NO_SOURCE:
        text += " (no markers, no repeating kernel sequence, no clear GPU idle gaps)"
    if c.passed_over:
        few = ", ".join(f"{n_n}/{n_a} {src} cycle(s)" for src, n_n, n_a in c.passed_over)
        text += f" (only {few} in the normal/abnormal run: too few to compare)"
    return text


def _none_found(why: NoCycles) -> str:
    """Why a cut found no cycles, for an error message."""
    if why.code is NoCyclesCode.UNDER_HALF_WINDOW:
        return f"its activity spans {_ms(why.span_ns)}, under half a window of {_ms(why.window_ns)}"
    if why.code is NoCyclesCode.FEW_BURSTS:
        return (f"GPU idle gaps longer than {why.threshold_ns / 1e3:.1f} µs split the timeline into only "
                f"{why.count} burst(s)")
    if why.code is NoCyclesCode.FEW_ANCHOR_STARTS:
        launches = f"{why.launches} launch(es)" + (f", one in {why.every}" if why.every > 1 else "")
        return f"the anchor kernel {short_name(why.name)} gives {why.count} cycle start(s) ({launches})"
    return "no activity"


def _ms(ns: int) -> str:
    """A duration given in ns, as ms for a message (four significant digits)."""
    return f"{ns / 1e6:,.4g} ms"


def _cut(run: RunData, plan: CyclePlan) -> Cycles:
    src = plan.source
    if plan.regime is Regime.TOTALS:
        return _passed_over(_totals_pieces(run, plan), plan)
    if src == CycleSource.WINDOW:
        reason = WindowReason.CHOSEN if plan.chosen_by_user else WindowReason.NO_SOURCE
        return _passed_over(fixed_windows(run, int(plan.window_ns or DEFAULT_WINDOW_NS), reason), plan)
    if src == CycleSource.REGEX:
        return regex_cycles(run, str(plan.name))
    if src in (CycleSource.PERFDIFF_MARKERS, CycleSource.PROFILER_STEP, CycleSource.ANNOTATION):
        rows = source_rows(run.markers, src)
        if src == CycleSource.ANNOTATION:
            rows = range_rows(rows, str(plan.name))
        return _passed_over(marker_cycles(rows, src, plan.name, plan.to_next_start), plan)
    if src == CycleSource.KERNEL_SEQUENCE:
        cyc = cut_at_kernel(run, str(plan.name), plan.period, plan.anchor_every)
    else:
        cyc = cut_at_gaps(run, float(plan.threshold_ns or 0.0))
    return _passed_over(cyc if cyc is not None else empty_cycles(src, NoCycles(NoCyclesCode.NO_ACTIVITY)), plan)


def _totals_pieces(run: RunData, plan: CyclePlan) -> Cycles:
    """The pieces of a run compared by totals (Regime.TOTALS): its steps, where the plan cuts
    at them, else the whole run as one piece."""
    if plan.source == CycleSource.PROFILER_STEP:
        steps = marker_cycles(source_rows(run.markers, CycleSource.PROFILER_STEP), CycleSource.PROFILER_STEP)
        if steps.n:
            return steps
    return whole_run(run)


def _passed_over(cyc: Cycles, plan: CyclePlan) -> Cycles:
    """`cyc` with the sources the plan passed over for having too few cycles in one run
    (repeating ranges aside: the plan says those)."""
    # (compared by totals, the steps the plan cuts at are not passed over)
    used = plan.source.value if plan.regime is Regime.TOTALS else None
    few = tuple(s for s in plan.one_sided if s[0] not in (CycleSource.ANNOTATION.value, used))
    return dataclasses.replace(cyc, passed_over=few) if few else cyc


def rename_devices(run: RunData, device_map: tuple[tuple[str, str], ...]) -> RunData:
    """`run` with its devices renamed (old, new) in the activity, samples and GPU-side range
    tables (a GPU-side range keeps finding its stream's work on the renamed GPU)."""
    if not device_map:
        return run
    mapping = dict(device_map)
    tables = {}
    for name in ("activity", "samples", "gpu_ranges"):
        df = getattr(run, name)
        if df is None or len(df) == 0:
            continue
        if not isinstance(df["device"].dtype, pd.CategoricalDtype):
            df = df.assign(device=pd.Categorical(df["device"].astype(str)))
        cats = [str(c) for c in df["device"].cat.categories]
        # A new name may already be a category (another device's): rebuild from the codes.
        renamed = [mapping.get(c, c) for c in cats]
        uniq = list(dict.fromkeys(renamed))
        lookup = np.array([uniq.index(r) for r in renamed], dtype=np.int64)
        codes = df["device"].cat.codes.to_numpy()
        new = pd.Categorical.from_codes(np.where(codes >= 0, lookup[np.maximum(codes, 0)], -1),
                                        categories=pd.Index(pd.array(uniq, dtype=str)))
        tables[name] = df.assign(device=new)
    return dataclasses.replace(run, **tables)
