"""Word-at-a-time (SWAR) decoding of JSON numbers and strings for the fast Kineto scanner.

The functions take a padded block of the trace's bytes as two numpy views, ``u8`` (one byte per
element) and ``le8`` (the little-endian uint64 that starts at each byte), and arrays of
positions in it; each reads 8 bytes at a time with integer arithmetic, for all positions at
once, with no Python object per value.  The padding (`scan`) lets 8-byte reads run past a
block's end and before its start.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdiff.model.schema import MISSING

__all__ = ["WHITESPACE", "Numbers", "escaped_ends", "int_or_string", "last_non_separator",
           "parse_numbers", "string_ends"]

_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGH = _U(0x8080808080808080)
_SEPARATORS = [_U(c * 0x0101010101010101) for c in b", \n\r\t"]  # ',' and whitespace, one byte per lane
WHITESPACE = _SEPARATORS[1:]
_MOVEMASK = _U(0x0102040810204080)
_HIGHEST_BIT = np.array([max(i.bit_length() - 1, -1) for i in range(256)], dtype=np.int64)


def _first_byte(t: np.ndarray) -> np.ndarray:
    """Index (0..7) of the lowest non-zero byte of each non-zero uint64 (little-endian order)."""
    low = t & (~t + _U(1))
    return (np.bitwise_count(low - _U(1)).astype(np.int64)) >> 3


def _zero_bytes(w: np.ndarray) -> np.ndarray:
    """High bit set in the lowest zero byte of each word (and possibly in later bytes)."""
    return (w - _ONES) & ~w & _HIGH


def _eight_digits(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Integer value of the first `n` (0..8) digits of words `x` (bytes already minus '0')."""
    # Move the n digits to the top bytes (the low bytes become 0, i.e. leading zeros); two
    # shifts of at most 32 bits each, because a 64-bit shift is undefined for n == 0.
    s = ((8 - n) * 4).astype(np.uint64)
    y = (x << s) << s
    y = (y * _U(10)) + (y >> _U(8))
    y = (((y & _U(0x000000FF000000FF)) * _U(100 + (1000000 << 32)))
         + (((y >> _U(16)) & _U(0x000000FF000000FF)) * _U(1 + (10000 << 32)))) >> _U(32)
    return (y & _U(0xFFFFFFFF)).astype(np.int64)


_POW10 = np.array([10 ** i for i in range(19)], dtype=np.int64)


def _digit_run(le8: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(digit values word, number of leading ASCII digits 0..8) of the 8 bytes at `pos`."""
    x = le8[pos] ^ _U(0x3030303030303030)
    # A byte is a digit iff (x ^ '0') < 10: adding 0x76 sets its high bit otherwise.
    t = ((x + _U(0x7676767676767676)) | x) & _HIGH
    # bytes before the first non-digit: popcount of the bits below its high bit, / 8;
    # t == 0 (eight digits) gives (0 - 1) = all ones: 64 bits, 8 digits.
    n = np.bitwise_count((t & (~t + _U(1))) - _U(1)).astype(np.int64) >> 3
    return x, n


@dataclass
class Numbers:
    value: np.ndarray  # integer part (signed)
    frac_ns: np.ndarray  # first three decimals as ns (0..999), for µs timestamps
    ok: np.ndarray
    whole: np.ndarray  # written without a decimal point: an integer to JSON readers


def parse_numbers(le8: np.ndarray, u8: np.ndarray, v: np.ndarray) -> Numbers:
    """Decode the JSON numbers starting at positions `v` (int or decimal, no exponent)."""
    neg = u8[v] == 45
    p = v + neg
    value = np.zeros(len(v), dtype=np.int64)
    ndig = np.zeros(len(v), dtype=np.int64)
    going = np.ones(len(v), dtype=bool)
    for _ in range(3):  # up to 24 integer digits (int64 holds 18)
        idx = np.flatnonzero(going)
        if len(idx) == 0:
            break
        x, n = _digit_run(le8, p[idx] + ndig[idx])
        value[idx] = value[idx] * _POW10[n] + _eight_digits(x, n)
        ndig[idx] += n
        going[idx] = n == 8
    end = p + ndig
    after = u8[end]
    frac = np.zeros(len(v), dtype=np.int64)
    dot = np.flatnonzero(after == 46)
    if len(dot):
        x, n = _digit_run(le8, end[dot] + 1)
        n3 = np.minimum(n, 3)
        frac[dot] = _eight_digits(x, n3) * _POW10[3 - n3]
        # skip the remaining decimals (there may be more than 8)
        e2 = end[dot] + 1 + n
        more = n == 8
        while more.any():
            x2, n2 = _digit_run(le8, e2[more])
            e2[more] += n2
            more[more] = n2 == 8
        after[dot] = u8[e2]
    ok = (ndig > 0) & (ndig <= 18) & (after != 101) & (after != 69)  # no exponent
    value = np.where(neg, -value, value)
    frac = np.where(neg, -frac, frac)
    whole = np.ones(len(v), dtype=bool)
    whole[dot] = False
    return Numbers(value, frac, ok, whole)


def _exact_zero_bytes(x: np.ndarray) -> np.ndarray:
    """High bit set in exactly the zero bytes of each word (no false positives)."""
    return ~(((x & _U(0x7F7F7F7F7F7F7F7F)) + _U(0x7F7F7F7F7F7F7F7F)) | x) & _HIGH


def last_non_separator(le8: np.ndarray, before: np.ndarray, chars: list[np.uint64] = _SEPARATORS) -> np.ndarray:
    """Position of the last byte before `before` not among `chars` (default ',' and
    whitespace; -1 when more than 15 bytes back)."""
    out = np.full(len(before), -1, dtype=np.int64)
    todo = np.arange(len(before))
    for back in (8, 16):
        if len(todo) == 0:
            break
        w = le8[before[todo] - back]
        sep = _exact_zero_bytes(w ^ chars[0])
        for c in chars[1:]:
            sep |= _exact_zero_bytes(w ^ c)
        keep = ~sep & _HIGH  # high bit of each byte that is not a separator
        mask8 = (((keep >> _U(7)) * _MOVEMASK) >> _U(56)).astype(np.intp)  # bit k: byte k kept
        hb = _HIGHEST_BIT[mask8]
        found = hb >= 0
        out[todo[found]] = before[todo[found]] - back + hb[found]
        todo = todo[~found]
    return out


def string_ends(le8: np.ndarray, u8: np.ndarray, start: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(end, escaped): position of the first '"' or '\\' at or after each start.

    `escaped` marks strings where a backslash came first (the caller resolves those).
    Positions at or beyond `limit` mean the string is not closed inside the block.
    """
    n = len(start)
    end = np.full(n, limit, dtype=np.int64)
    pos = start.copy()
    active = np.arange(n)
    q = _U(0x2222222222222222)
    b = _U(0x5C5C5C5C5C5C5C5C)
    while len(active):
        w = le8[pos[active]]
        t = _zero_bytes(w ^ q) | _zero_bytes(w ^ b)
        found = t != 0
        if found.any():
            fi = active[found]
            end[fi] = pos[fi] + _first_byte(t[found])
        active = active[~found]
        pos[active] += 8
        active = active[pos[active] < limit]
    escaped = u8[np.minimum(end, len(u8) - 1)] == 92
    return end, escaped


def escaped_ends(padded: bytes, s0: np.ndarray, s1: np.ndarray, esc: np.ndarray, n: int) -> np.ndarray:
    """True closing quotes of the (rare) strings that contain a backslash escape."""
    s1 = s1.copy()
    for i in np.flatnonzero(esc):
        j = int(s1[i])
        while j < n:
            if padded[j] == 92:
                j += 2
                continue
            if padded[j] == 34:
                break
            j += 1
        s1[i] = j
    return s1


def int_or_string(le8: np.ndarray, u8: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """A pid/tid: a JSON integer, or the number at the first digit of a string ("stream 7")."""
    out = np.full(len(v), MISSING, dtype=np.int64)
    quoted = u8[v] == 34
    num = np.flatnonzero(~quoted)
    if len(num):
        got = parse_numbers(le8, u8, v[num])
        good = got.ok & got.whole
        out[num[good]] = got.value[good]
    qi = np.flatnonzero(quoted)
    if len(qi):
        s0 = v[qi] + 1
        s1, _ = string_ends(le8, u8, s0, n)
        first = _first_digit(u8, s0, s1)
        hi = np.flatnonzero(first >= 0)
        if len(hi):
            got = parse_numbers(le8, u8, first[hi])
            out[qi[hi[got.ok]]] = got.value[got.ok]
    return out


def _first_digit(u8: np.ndarray, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """The position of the first digit in each string [s0, s1), -1 where it has none: 16 bytes
    a step, each step over the strings not yet settled (most have their number in the first)."""
    first = np.full(len(s0), -1, dtype=np.int64)
    left = np.flatnonzero(s1 > s0)
    offset = 0
    while len(left):
        at = s0[left] + offset
        win = u8[at[:, None] + np.arange(16)]  # the block is padded: 16 bytes past a string's end read
        digit = (win >= 48) & (win <= 57) & (np.arange(16)[None, :] < (s1[left] - at)[:, None])
        has = digit.any(axis=1)
        first[left[has]] = at[has] + np.argmax(digit[has], axis=1)
        offset += 16
        left = left[~has & (s1[left] > s0[left] + offset)]
    return first
