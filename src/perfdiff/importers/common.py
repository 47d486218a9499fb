"""What the trace importers share beyond perfdiff.model: the core budget of one import, the
clock domains a trace's times can be in, the activity columns a comparison never reads, and
the name of what a trace names not at all."""
from __future__ import annotations

import enum
import os

import pandas as pd

from perfdiff.model.text import TextRepairs, valid_text

__all__ = ["COMPARE_UNUSED", "UNNAMED", "ClockDomain", "Note", "TextRepairs", "canonical", "event_name",
           "resolve_cores", "text_notes", "valid_text"]

# A null, absent or empty name: one label that no real kernel, op or range carries (a null
# read "None", an empty one left a blank row).
UNNAMED = "<unnamed>"


def event_name(value: object) -> str:
    """A trace's name field as the name perfdiff shows: UNNAMED when null, absent or empty."""
    return UNNAMED if value is None or value == "" else str(value)


def text_notes(text: TextRepairs) -> list["Note"]:
    """The run's notes of the strings `text` made valid: "3 names held invalid text (lone
    surrogates), replaced by U+FFFD"."""
    return [Note("invalid-text", line) for line in text.lines()]


def resolve_cores(cores: int | None) -> int:
    """CPU cores one import may keep busy: `cores`, or all of this machine's when None.

    Importers start helper threads only where this is ≥ 2: on two cores shared with another
    run's import, a helper thread only competes with it (docs/PERFORMANCE.md)."""
    return max(1, (os.cpu_count() or 1) if cores is None else int(cores))


class ClockDomain(str, enum.Enum):
    """The clock an imported run's times are in (manifest["clock"]["domain"] holds the value)."""

    REALTIME = "CLOCK_REALTIME"  # wall clock, ns since the epoch
    TRACE_RELATIVE = "trace-relative"  # a Kineto trace with no epoch anchor: ns from its own origin
    NSYS_SESSION = "nsys session time"  # an nsys export without its session start: ns from it


class Note(str):
    """An import note: its text (what the report shows) with a stable short `code`.

    A str, so everything that handles notes as text keeps working; code says what the note
    is about without reading the text."""

    code: str

    def __new__(cls, code: str, text: str) -> "Note":
        self = super().__new__(cls, text)
        self.code = code
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __reduce__(self):  # pickled with its code (perfdiff.pair hands runs between processes)
        return (Note, (self.code, self.text))


# Activity columns a comparison never reads: `perfdiff compare` imports traces without
# writing them out (each is a copy of 8 bytes a row: 48 MB at 6 M rows).
COMPARE_UNUSED = frozenset({"stream", "correlation", "bytes"})


def canonical(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its string columns as plain text and its rows sorted by every column: two
    tables holding the same rows in any order give equal results (to compare importers)."""
    out = pd.DataFrame({c: table[c].astype(str) if not pd.api.types.is_numeric_dtype(table[c]) else table[c]
                        for c in table.columns})
    return out.sort_values(list(out.columns), kind="stable").reset_index(drop=True)
