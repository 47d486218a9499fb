"""Text read from an input made valid where it is read: what a name may hold that UTF-8 cannot
encode or a report must not show, replaced by U+FFFD and counted for the run's notes.
Standard library only."""
from __future__ import annotations

import re
from typing import Any

__all__ = ["TextRepairs", "valid_text"]

# What a name read from an input may hold but a report must not: lone surrogates (JSON's
# "\\ud800", text Python read from invalid UTF-8 with surrogateescape; UTF-8 cannot encode them
# and every writer fails on them), control characters but tab, newline and carriage return
# (C0, DEL, C1: they drive terminals, not text), and noncharacters (U+FDD0–U+FDEF and the last
# two code points of every plane, for a process's internal use only).  Each is replaced by
# U+FFFD where the string is read, and counted (`TextRepairs`).
_KINDS = (
    ("lone surrogates", "\ud800-\udfff"),
    ("control characters", "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"),
    ("noncharacters", "\ufdd0-\ufdef" + "".join(f"{chr(p + 0xFFFE)}{chr(p + 0xFFFF)}" for p in range(0, 0x110000, 0x10000))),
)
_INVALID = re.compile("[" + "".join(chars for _, chars in _KINDS) + "]")
_KIND_RES = [(kind, re.compile(f"[{chars}]")) for kind, chars in _KINDS]


def valid_text(text: str) -> str:
    """`text` with each lone surrogate, control character (but tab, LF, CR) and noncharacter
    replaced by U+FFFD: text that UTF-8 encodes and a report can show."""
    return _INVALID.sub("\ufffd", text)


class TextRepairs:
    """The strings of one input made valid text (`valid_text`) as they are read, counted by
    what they are ("names", "fields") and by what was wrong, for the run's notes."""

    def __init__(self, unencodable_only: bool = False) -> None:
        """`unencodable_only`: replace lone surrogates only (what UTF-8 cannot encode), for
        perfdiff's own run bundle, whose strings load back as they were written (a control
        character included); a trace's importer replaces all three kinds."""
        self._seen: dict[str, set[object]] = {}
        self._kinds: dict[str, set[str]] = {}
        self._res = _KIND_RES[:1] if unencodable_only else _KIND_RES
        self._invalid = self._res[0][1] if unencodable_only else _INVALID

    def fix(self, text: str, what: str = "names") -> str:
        """`text` as valid text; a string that needed it is counted once under `what`."""
        if self._invalid.search(text) is None:
            return text
        self._seen.setdefault(what, set()).add(text)
        self._kinds.setdefault(what, set()).update(kind for kind, rx in self._res if rx.search(text))
        return self._invalid.sub("\ufffd", text)

    def invalid_utf8(self, what: str = "names", key: object = None) -> None:
        """Count a string whose bytes were not UTF-8 (decoded with U+FFFD by its reader)."""
        self._seen.setdefault(what, set()).add(repr(key))
        self._kinds.setdefault(what, set()).add("bytes that are not UTF-8")

    def fix_json(self, value: Any, what: str = "fields") -> Any:
        """A decoded JSON value with every string in it (keys too) made valid text."""
        if isinstance(value, str):
            return self.fix(value, what)
        if isinstance(value, dict):
            return {self.fix(k, what) if isinstance(k, str) else k: self.fix_json(v, what) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fix_json(v, what) for v in value]
        return value

    def count(self, what: str | None = None) -> int:
        return sum(len(v) for k, v in self._seen.items() if what is None or k == what)

    def lines(self) -> list[str]:
        """A line per kind of string repaired: "3 names held invalid text (lone surrogates),
        replaced by U+FFFD"."""
        order = ("lone surrogates", "control characters", "noncharacters", "bytes that are not UTF-8")
        return [f"{len(seen)} {what if len(seen) != 1 else what.rstrip('s')} held invalid text "
                f"({', '.join(k for k in order if k in self._kinds[what])}), replaced by U+FFFD"
                for what, seen in self._seen.items() if seen]
