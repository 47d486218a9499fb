"""The cycles stage: what each run offers as cycles (`offer`), the one plan a pair is cut by
(`plan`), the cut of one run by it (`cut`), and the preparation of a pair that runs them
(`prepare`).  The algorithms that cut live in perfdiff.segment; nothing outside this package
imports them (docs/ARCHITECTURE.md).
"""
from __future__ import annotations

from perfdiff.cycles.cut import ABNORMAL, NORMAL, CutSide, cut_cycles, cut_side, rename_devices
from perfdiff.cycles.offer import MARKER_SOURCES, CycleSummary, marker_counts, offered_sources, summarize_cycles
from perfdiff.cycles.plan import check_cycle_choice, marker_plan, match_devices, plan_pair
from perfdiff.cycles.prepare import Cut, Loaded, PairChoice, Prepared, plan_cycles, prepare_pair
from perfdiff.model.cycles import CyclePlan, Cycles, WindowReason
from perfdiff.segment import MIN_CYCLES, STEP_NAME, cycle_pattern, source_rows

__all__ = ["ABNORMAL", "MARKER_SOURCES", "MIN_CYCLES", "NORMAL", "STEP_NAME", "Cut", "CutSide", "CyclePlan",
           "CycleSummary", "Cycles", "Loaded", "PairChoice", "Prepared", "WindowReason", "check_cycle_choice",
           "cut_cycles", "cut_side", "cycle_pattern", "marker_counts", "marker_plan", "match_devices", "offered_sources",
           "plan_cycles", "plan_pair", "prepare_pair", "rename_devices", "source_rows", "summarize_cycles"]
