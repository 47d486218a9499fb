"""The words of a run's cycles: how they were cut, why fixed windows, and which sources the
plan passed over (plain text; the report escapes it)."""
from __future__ import annotations

import dataclasses

from perfdiff.model.cycles import Cycles, WindowReason

__all__ = ["WINDOW_REASON_WORDS", "cycle_detail", "worded"]

WINDOW_REASON_WORDS = {
    WindowReason.CHOSEN: "chosen with --window",
    WindowReason.NO_SOURCE: "no markers, no repeating kernel sequence, no clear GPU idle gaps",
}


def cycle_detail(c: Cycles) -> str:
    """How `c` was cut, in words: its detail, why windows, and the sources passed over."""
    text = c.detail
    if c.window_reason is not None:
        text += f" ({WINDOW_REASON_WORDS[c.window_reason]})"
    if c.passed_over:
        few = ", ".join(f"{n_n}/{n_a} {src} cycle(s)" for src, n_n, n_a in c.passed_over)
        text += f" (only {few} in the normal/abnormal run: too few to compare)"
    return text


def worded(c: Cycles) -> Cycles:
    """`c` with its detail in words (`cycle_detail`), for the analysis that carries it into the
    report as text."""
    return dataclasses.replace(c, detail=cycle_detail(c), window_reason=None, passed_over=())
