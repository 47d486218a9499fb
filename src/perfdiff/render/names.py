"""Long names shortened for the report, apart from one another.

A kernel's C++ name can run to 1,000 characters; a report prints it in `width` characters.
The plain cut keeps the head (what the function is) and the tail (`head … tail`), but two
template instances that differ only in their middle then read alike, and a report that says
one "took 10 ms more" and the other "moved against the cycle" under one text misleads.  So a
report shortens all its names as one set (`shorten_set`; a report's `text.NameTable`): where
plain cuts coincide, the names keep a window around where they differ, and where even that
coincides, a tag (`name_tag`) that the report's list of names in full gives.  Unescaped text:
escaping, and the table a report words its names by, are text.py's.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["TAG_DIGITS", "flat", "name_tag", "shorten", "shorten_set"]

TAG_DIGITS = (4, 8, 16)  # a tag's hex digits: longer only where shorter tags of two names coincide
RENAME = " ⇄ "  # joins a function's name in the normal run to its name in the abnormal run (analyze.align)


def flat(name: str) -> str:
    """The name on one line, runs of white space as one space."""
    return " ".join(str(name).split())


def shorten(name: str, width: int = 96) -> str:
    """Shorten a long (C++ template) name, keeping its head and tail: `head … tail`; a renamed
    function (`A ⇄ B`) around what the rename changed (`_renamed`)."""
    s = flat(name)
    if len(s) <= width:
        return s
    if width < 8:  # no room for "head … tail"
        return s[:width]
    renamed = _renamed(s, width)
    if renamed is not None:
        return renamed
    tail = max(1, width - int(width * 0.7) - 3)
    head = width - tail - 3
    return s[:head].rstrip() + " … " + s[-tail:].lstrip()


def _renamed(s: str, width: int) -> str | None:
    """A renamed function, `A ⇄ B`, in at most `width` characters: what A and B share at either
    end written once around their differing middles, `P{a ⇄ b}S`, then P and S cut (P keeps
    its start, what the function is; S its start).  None when `s` is no rename, A and B share
    neither end, or the middles alone do not fit."""
    if s.count(RENAME) != 1:
        return None
    a, b = s.split(RENAME)
    i = _common_prefix(a, b)
    while i and not (_cuttable(a, i) and _cuttable(b, i)):
        i -= 1
    j = _common_prefix(a[i:][::-1], b[i:][::-1])
    while j and not (_cuttable(a, len(a) - j) and _cuttable(b, len(b) - j)):
        j -= 1
    p, q, am, bm = a[:i], a[len(a) - j:], a[i:len(a) - j], b[i:len(b) - j]
    if not (p or q) or not (am or bm):
        return None
    mid = "{" + am + RENAME + bm + "}"
    room = width - len(mid)
    if room < 4:  # the middles alone are too long: P's start, then each middle cut at its end
        p = p if len(p) <= width // 4 else p[:max(1, width // 4) - 1] + "…"
        k = (width - len(p) - 5) // 2
        if k < 4:
            return None
        am, bm = (x if len(x) <= k else x[:k - 1] + "…" for x in (am, bm))
        return p + "{" + am + RENAME + bm + "}"
    if len(p) + len(q) <= room:
        return p + mid + q
    keep_q = max(room // 3, room - len(p))
    q_cut = q if len(q) <= keep_q else q[:keep_q - 1] + "…"
    rest = room - len(q_cut)
    p_cut = p if len(p) <= rest else p[:rest - 1] + "…"
    return p_cut + mid + q_cut


def _cuttable(s: str, k: int) -> bool:
    """Whether a rename's braces may stand before s[k]: never inside a number or a word, so
    "kernel_{16 ⇄ 160}", not "kernel_16{ ⇄ 0}", and "{CloneBackward0 ⇄ CompiledFunction…}",
    not "C{loneBackward0 ⇄ ompiledFunction…}"; a capital after a small letter starts a word
    ("{Multi ⇄ Single}ProcessIter")."""
    if k <= 0 or k >= len(s):
        return True
    x, y = s[k - 1], s[k]
    return not (x.isalnum() and y.isalnum()) or (x.isalpha() != y.isalpha()) or (x.islower() and y.isupper())


def name_tag(name: str, digits: int = 4) -> str:
    """Hex digits that stand for a whole name, the same in every report and at every width."""
    return hashlib.blake2b(flat(name).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()[:digits]


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (bisection on slices: C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _around(s: str, width: int, lo: int) -> str:
    """`head … part from lo … tail` in at most `width` characters: the head (what the function
    is) as long as it can be, a window that begins near s[lo], and a short tail."""
    tail = max(6, width // 8)
    window = max(12, width // 4)
    head = width - window - tail - 6
    if head < 8:  # too narrow for a window: the plain cut
        return shorten(s, width)
    if lo < head + window // 2:  # the head nearly reaches the difference: a longer head instead
        return s[:lo + window // 2].rstrip() + " … " + s[-(width - lo - window // 2 - 3):].lstrip()
    start = _window_start(s, lo, head, window)
    if start + window >= len(s) - tail:
        return s[:head].rstrip() + " … " + s[len(s) - (width - head - 3):].lstrip()
    return s[:head].rstrip() + " … " + s[start:start + window].strip() + " … " + s[-tail:].lstrip()


def _window_start(s: str, lo: int, lower: int, window: int) -> int:
    """Where a window showing s[lo] begins: after a separator (" <,:(") shortly before lo where
    there is one, so that it starts with a token; never before `lower`."""
    cuts = [i for i in (s.find(sep, max(lower, lo - window // 2), lo) for sep in " <,:(") if i >= 0]
    return max(lower, min(cuts) + 1 if cuts else lo - window // 3)


def _around_two(s: str, width: int, lo1: int, lo2: int) -> str:
    """`head … part from lo1 … part from lo2 … tail` in at most `width` characters, for a name
    that needs two differences shown (lo1 < lo2): a longer head where it reaches lo1, one
    wider window where the two would touch."""
    tail = max(6, width // 8)
    window = max(10, width // 6)
    head = width - 2 * window - tail - 9
    if head < 8:
        return _around(s, width, lo2)
    if lo1 < head:
        pieces = [[0, head + window + 3]]
    else:
        start = _window_start(s, lo1, head, window)
        pieces = [[0, head], [start, start + window]]
    start = _window_start(s, lo2, pieces[-1][1], window)
    if start <= pieces[-1][1] + 3:  # it would touch the last piece: that piece, a window wider
        pieces[-1][1] += window + 3
    elif start + window < len(s) - tail:
        pieces.append([start, start + window])
    else:  # the second difference is in the tail
        return " … ".join(s[a:b].strip() for a, b in pieces) + " … " + s[len(s) - (window + tail + 3):].lstrip()
    return " … ".join(s[a:b].strip() for a, b in pieces) + " … " + s[-tail:].lstrip()


def _departs(members: list[str]) -> dict[str, int]:
    """For each of `members` (distinct), the first character where it departs from the member
    closest to it (the longest common prefix: a neighbour in sorted order)."""
    ordered = sorted(members)
    out = {}
    for k, s in enumerate(ordered):
        out[s] = max(_common_prefix(s, t) for t in ordered[max(0, k - 1):k] + ordered[k + 1:k + 2])
    return out


def _clashes(text: dict[str, str]) -> list[list[str]]:
    """Groups of two or more names (flat) that `text` gives one text."""
    by_text: dict[str, list[str]] = {}
    for s, t in text.items():
        by_text.setdefault(t, []).append(s)
    return [g for g in by_text.values() if len(g) > 1]


def shorten_set(names: Iterable[str], width: int = 96, *, tags: bool = True) -> dict[str, str]:
    """Each name shortened to at most `width` characters so that names shown together read
    apart: the plain `head … tail` cut, except for names whose cuts coincide (template
    arguments in the middle of a kernel name); those keep a window around where each departs
    from the closest of them, and where texts still coincide, the name's tag in brackets
    (`tags=False`: no tags, for titles that no list of names explains).  Names that fit are
    never changed, so a name that literally reads as another's shortened text may still
    share it; two names that differ only in white space stay one text."""
    raws = list(names)
    text = {s: shorten(s, width) for s in {flat(n) for n in raws}}
    # Where each clashing name departs from the names it still reads like: a first window, and
    # a second one where the first leaves names of a clash alike (template variants that differ
    # in two places).
    marks: dict[str, list[int]] = {}
    for _ in range(2):
        for group in _clashes(text):
            for s, at in _departs(group).items():
                if len(s) > width and at not in marks.setdefault(s, []):
                    marks[s] = sorted(marks[s] + [at])
                    text[s] = _shown(s, width, marks[s])
    for digits in TAG_DIGITS if tags else ():
        clashes = _clashes(text)
        if not clashes:
            break
        for group in clashes:
            for s in group:
                if len(s) > width:
                    tag = f" [{name_tag(s, digits)}]"
                    text[s] = _shown(s, width - len(tag), marks.get(s) or [len(s) // 2]) + tag
    return {n: text[flat(n)] for n in raws}


def _shown(s: str, width: int, marks: list[int]) -> str:
    """s cut to `width` around its first and last marked difference."""
    return _around(s, width, marks[0]) if len(marks) == 1 else _around_two(s, width, marks[0], marks[-1])
