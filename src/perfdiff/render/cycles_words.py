"""The words of a run's cycles: how they were cut, why fixed windows, and which sources the
plan passed over (plain text; the report escapes it)."""
from __future__ import annotations

from perfdiff.analyze.records import RunSummary
from perfdiff.model.cycles import Cycles, WindowReason

__all__ = ["WINDOW_REASON_WORDS", "cycle_detail", "run_cycle_detail"]

WINDOW_REASON_WORDS = {
    WindowReason.CHOSEN: "chosen with --window",
    WindowReason.NO_SOURCE: "no markers, no repeating kernel sequence, no clear GPU idle gaps",
}


def cycle_detail(c: Cycles) -> str:
    """How `c` was cut, in words: its detail, why windows, and the sources passed over."""
    return _words(c.detail, c.window_reason, c.passed_over)


def run_cycle_detail(r: RunSummary) -> str:
    """How a compared run's cycles were cut, in words (as `cycle_detail`)."""
    return _words(r.cycle_detail, r.window_reason, r.passed_over)


def _words(detail: str, window_reason: WindowReason | None, passed_over: tuple[tuple[str, int, int], ...]) -> str:
    text = detail
    if window_reason is not None:
        text += f" ({WINDOW_REASON_WORDS[window_reason]})"
    if passed_over:
        few = ", ".join(f"{n_n}/{n_a} {src} cycle(s)" for src, n_n, n_a in passed_over)
        text += f" (only {few} in the normal/abnormal run: too few to compare)"
    return text
