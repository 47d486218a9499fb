"""Number formatting and escaping of user data for Markdown/HTML output.

Kernel and NVTX names are user data: they may hold `|`, backticks, `<`, `>`, newlines and
1,000-character C++ templates.  Everything that reaches the report goes through here.
"""
from __future__ import annotations

import hashlib
import html
import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

NA = "n/a"
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~])")


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


def shorten(name: str, width: int = 96) -> str:
    """Shorten a long (C++ template) name, keeping its head and tail: `head … tail`."""
    s = " ".join(str(name).split())
    if len(s) <= width:
        return s
    head = int(width * 0.7)
    tail = width - head - 3
    return s[:head].rstrip() + " … " + s[-tail:].lstrip()


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _around(s: str, width: int, lo: int) -> str:
    """`head … part from lo … tail` in `width` characters: the head (what the function is)
    as long as it can be, a window that begins near s[lo], and a short tail."""
    tail = max(6, width // 8)
    window = max(12, width // 4)
    head = width - window - tail - 6
    cuts = [i for i in (s.find(sep, max(head, lo - window // 2), lo) for sep in " <,:(") if i >= 0]
    start = max(head, min(cuts) + 1 if cuts else lo - window // 3)  # begin at a token where one is near
    if start + window >= len(s) - tail:
        start = len(s) - (width - head - 3)
        return s[:head].rstrip() + " … " + s[start:].lstrip()
    return s[:head].rstrip() + " … " + s[start:start + window].strip() + " … " + s[-tail:].lstrip()


TAG_DIGITS = (4, 8, 16)


def name_tag(name: str, digits: int = 4) -> str:
    """Hex digits that stand for a whole name (the same in every report and at every width):
    what tells apart names that read alike even when shortened around their difference; the
    full names' list gives each its tag."""
    flat = " ".join(str(name).split()).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(flat, digest_size=8).hexdigest()[:digits]


def shorten_set(names: list[str] | set[str] | frozenset[str], width: int = 96) -> dict[str, str]:
    """Each name shortened to at most `width` characters so that names shown together read
    apart: the plain `head … tail` cut, except where it gives two names one text (template
    arguments in the middle of a kernel name); those keep a window around the first
    character where each differs from the others, and where even that is one text, their
    `name_tag` in brackets."""
    flat = {n: " ".join(str(n).split()) for n in names}
    out = {raw: shorten(s, width) for raw, s in flat.items()}
    groups: dict[str, set[str]] = {}
    for raw, s in flat.items():
        if len(s) > width:
            groups.setdefault(out[raw], set()).add(s)
    redone: dict[str, str] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        ordered = sorted(group)
        # The first character where a name departs from its closest name: a neighbour in order.
        for k, s in enumerate(ordered):
            lo = max(_common_prefix(s, t) for t in ordered[max(0, k - 1):k] + ordered[k + 1:k + 2])
            redone[s] = _around(s, width, lo)
        texts = [redone[s] for s in ordered]
        for digits in TAG_DIGITS:  # longer tags only where two short ones coincide
            if len(set(texts)) == len(texts):
                break
            tags = [f" [{name_tag(s, digits)}]" for s in ordered]
            texts = [shorten(s, width - len(tag)) + tag for s, tag in zip(ordered, tags, strict=True)]
            redone.update(zip(ordered, texts, strict=True))
    return {raw: redone.get(s, out[raw]) for raw, s in flat.items()}


# The names of the report being rendered (see `shown_names`), shortened per width on demand.
_SHOWN: ContextVar[_NameSet | None] = ContextVar("perfdiff_shown_names", default=None)


class _NameSet:
    def __init__(self, names: Iterable[str]):
        self.names = frozenset(str(n) for n in names)
        self.by_width: dict[int, dict[str, str]] = {}

    def short(self, name: str, width: int) -> str | None:
        if name not in self.names:
            return None
        if width not in self.by_width:
            self.by_width[width] = shorten_set(self.names, width)
        return self.by_width[width][name]

    def tag(self, name: str) -> str | None:
        """The tag the report's shortenings gave `name`, if any."""
        for digits in TAG_DIGITS:
            tag = name_tag(name, digits)
            if any(short[name].endswith(f" [{tag}]") for short in self.by_width.values() if name in short):
                return tag
        return None


@contextmanager
def shown_names(names: Iterable[str]) -> Iterator[None]:
    """Within: `short_name` and `md_name` shorten each of `names` as `shorten_set` does over
    all of them, so that no two of a report's names read alike wherever they appear."""
    token = _SHOWN.set(_NameSet(names))
    try:
        yield
    finally:
        _SHOWN.reset(token)


def short_name(name: str, width: int = 96) -> str:
    """A name shortened to at most `width` characters, apart from the other names of the
    report being rendered (`shown_names`); unescaped."""
    names = _SHOWN.get()
    short = names.short(name, width) if names is not None else None
    return short if short is not None else shorten(name, width)


def full_name_line(name: str) -> str:
    """A whole name for the list of names in full: its tag first where the report shortened
    it to its tag (`shown_names`)."""
    names = _SHOWN.get()
    tag = names.tag(name) if names is not None else None
    return (f"\\[{tag}\\] " if tag else "") + html_code(name)


def md_name(name: str, width: int = 96) -> str:
    """A function name for a table cell or a sentence: shortened, then escaped."""
    return md_escape(short_name(name, width))


def html_code(name: str) -> str:
    """A whole name inside an HTML <code> element (used in collapsed blocks)."""
    return "<code>" + html.escape(" ".join(str(name).split()), quote=True).replace("|", "&#124;") + "</code>"
