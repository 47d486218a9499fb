"""Number formatting and escaping of user data for Markdown/HTML output.

Kernel and NVTX names are user data: they may hold `|`, backticks, `<`, `>`, newlines and
1,000-character C++ templates.  Everything that reaches the report goes through here: numbers,
escapes, and a report's names through its `NameTable`.
"""
from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable

from perfdiff.render.names import TAG_DIGITS, flat, name_tag, shorten, shorten_set

__all__ = ["NA", "NameTable", "fmt_beta", "fmt_calls", "fmt_num", "fmt_p", "fmt_pct", "fmt_score", "fmt_signed",
           "fmt_signed_time", "fmt_time_us", "fmt_value", "fmt_z", "full_name_line", "html_code", "md_escape",
           "shorten"]

NA = "n/a"
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~$])")
# What Markdown reads inside an inline HTML element; "_" only where it may open or close emphasis.
_CODE_SPECIAL = re.compile(r"[\\`*\[\]|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def _nozero(s: str) -> str:
    """Never print '-0' (or -0.00)."""
    if s.startswith("-") and not re.search(r"[1-9]", s):
        return s[1:]
    return s


def fmt_num(x: float | None, decimals: int = 2) -> str:
    """A number with thousands separators and fixed decimals; 'n/a' when not finite."""
    if x is None or not _finite(x):
        return NA
    return _nozero(f"{float(x):,.{decimals}f}")


def fmt_p(p: float | None) -> str:
    """p or q: '<0.001' below 0.001, else 3 decimals; 'n/a' when not computable."""
    if p is None or not _finite(p):
        return NA
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}"


def fmt_z(z: float | None) -> str:
    return fmt_num(z, 2)


def fmt_score(s: float | None) -> str:
    """Four significant digits."""
    if s is None or not _finite(s):
        return NA
    if s == 0:
        return "0"
    digits = max(0, 3 - int(math.floor(math.log10(abs(s)))))
    return _nozero(f"{s:,.{digits}f}")


def fmt_beta(b: float | None) -> str:
    """β, Δβ: 2 decimals, 4 when |value| < 0.01."""
    if b is None or not _finite(b):
        return NA
    return fmt_num(b, 4 if 0 < abs(b) < 0.01 else 2)


def fmt_signed(x: float | None, decimals: int = 2) -> str:
    if x is None or not _finite(x):
        return NA
    s = fmt_num(x, decimals)
    return s if s.startswith("-") or s == fmt_num(0, decimals) else "+" + s


def fmt_pct(x: float | None, decimals: int = 2) -> str:
    if x is None or not _finite(x):
        return NA
    return fmt_signed(x, decimals) + "%"


def fmt_time_us(us: float | None) -> str:
    """A duration given in µs, in the unit that reads best (ns, µs, ms, s)."""
    if us is None or not _finite(us):
        return NA
    if us == 0:
        return "0 µs"  # also -0.0
    # The unit follows what three significant digits show: 999.5 µs reads "1 ms", not "1e+03 µs".
    a = abs(float(f"{us:.3g}"))
    if a >= 1e6:
        return f"{us / 1e6:,.3g} s" if a < 1e8 else f"{us / 1e6:,.0f} s"
    if a >= 1e3:
        return f"{us / 1e3:,.3g} ms" if a < 1e5 else f"{us / 1e3:,.0f} ms"
    if a >= 1 or a == 0:
        return f"{us:,.3g} µs"
    return f"{us * 1e3:,.3g} ns"


def fmt_calls(x: float | None) -> str:
    """Calls per cycle: one decimal, whole numbers from 100 ("1,478"), and "<0.1" for a call
    that spans many cycles (a helper thread's poll)."""
    if x is None or not _finite(x):
        return NA
    if 0 < abs(x) < 0.05:
        return "<0.1"
    return f"{x:,.0f}" if abs(x) >= 100 else fmt_num(x, 1)


def fmt_signed_time(us: float | None) -> str:
    """A difference of durations (µs) with its sign ("+1.2 ms", "-40 ns", "0 µs"), to the
    nearest 10 ns: differences of sums keep float residue below that ("+0.5 ns" where nothing
    differs)."""
    if us is None or not _finite(us):
        return NA
    us = round(float(us), 2) + 0.0  # + 0.0: no "-0"
    return ("+" if us > 0 else "") + fmt_time_us(us)


def fmt_value(x: float | None, unit: str = "") -> str:
    """A metric value with its unit, scaled for bytes."""
    if x is None or not _finite(x):
        return NA
    if unit in ("bytes", "B/s"):
        a = abs(x)
        for scale, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if a >= scale:
                return f"{x / scale:,.2f} {name}" + ("/s" if unit == "B/s" else "")
        return f"{x:,.0f} B" + ("/s" if unit == "B/s" else "")
    s = fmt_num(x, 2)
    return f"{s} {unit}".rstrip() if unit else s


def md_escape(text: str) -> str:
    """Escape a user string for a Markdown table cell or paragraph: no markup, one line."""
    s = str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    s = html.escape(s, quote=False)  # & < >
    # After html.escape, '<' is '&lt;': escape the remaining Markdown specials.
    return _MD_SPECIAL.sub(r"\\\1", s)


def full_name_line(name: str, tags: Iterable[str] = ()) -> str:
    """A whole name for the list of names in full, after the tags it carried in the report."""
    return "".join(f"\\[{t}\\] " for t in tags) + html_code(name)


class NameTable:
    """The names one report shows, each shortened apart from all the others (`shorten_set`
    over all of them, per width), and the names it has shortened so far, for the report's list
    of names in full.  Built once per report from every name it shows and handed to whatever
    words a name; a name it does not hold gets the plain cut (`shorten`), and is not listed.
    What a name reads as depends on the table alone, never on who asks or when; `plain()` is
    the table of no names, for text outside a report."""

    def __init__(self, names: Iterable[str]):
        self._names = frozenset(str(n) for n in names)
        self._by_width: dict[int, dict[str, str]] = {}  # each width's shortening, on first use
        self._shortened: dict[str, set[str]] = {}  # name -> the tags it carried

    @classmethod
    def plain(cls) -> NameTable:
        """A table of no names: every name its plain cut (`shorten`), none listed in full."""
        return cls(())

    def short(self, name: str, width: int = 96) -> str:
        """`name` in at most `width` characters, apart from the table's other names (unescaped);
        a name not in the table, its plain cut."""
        if name not in self._names:
            return shorten(name, width)
        if width not in self._by_width:
            self._by_width[width] = shorten_set(self._names, width)
        text = self._by_width[width][name]
        if text != flat(name):
            tags = self._shortened.setdefault(name, set())
            tags.update(name_tag(name, d) for d in TAG_DIGITS if text.endswith(f" [{name_tag(name, d)}]"))
        return text

    def md(self, name: str, width: int = 96) -> str:
        """A function name for a table cell or a sentence: shortened (`short`), then escaped."""
        return md_escape(self.short(name, width))

    def shortened(self) -> list[tuple[str, list[str]]]:
        """The names `short` has shortened so far, sorted, each with the tags it carried: what
        the report's list of names in full gives."""
        tags: dict[str, set[str]] = {}  # names that differ only in white space read, and list, as one
        for n, t in self._shortened.items():
            tags.setdefault(flat(n), set()).update(t)
        return [(n, sorted(tags[n], key=len)) for n in sorted(tags)]

    def full(self) -> list[str]:
        """The report's list of names in full: every name shortened so far, with its tags."""
        return [full_name_line(n, tags) for n, tags in self.shortened()]


def html_code(name: str) -> str:
    """A whole name inside an HTML <code> element (used in collapsed blocks).  Markdown is
    still parsed inside an inline HTML element ("__next__" turned bold), so what it reads is a
    character reference there; an underscore inside a word ("ampere_bf16_gemm") opens no
    emphasis and stays as it is, for the raw text's sake."""
    s = _CODE_SPECIAL.sub(lambda m: f"&#{ord(m.group(0))};", html.escape(flat(name), quote=True))
    return "<code>" + s + "</code>"
