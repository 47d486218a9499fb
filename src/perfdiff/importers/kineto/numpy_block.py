"""The numpy block decoder of the fast Kineto reader (`scan`): one block of the trace's bytes in,
its events' columns out (`Block`), in a dozen whole-array passes: every object key (a ``"``
followed by ``:``) found and recognised from the 8 bytes before its colon (`_key_ids`), each
event anchored at its ``"ph"`` key, the first key of each id after it (`objects`), strings and
numbers decoded with word-at-a-time (SWAR) arithmetic (`swar`), the names gathered through
Arrow string views and dictionary-encoded, so no Python object is made per event.  About
150 MB/s of JSON on one core; the compiled decoder (`compiled`, ``_scan.c``) follows the same
rules in one pass and leaves the blocks it does not read to this one.  Any layout it does not
decode raises `NeedSlowPath` (the whole file goes to the general reader).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from perfdiff.importers.kineto.events import (CAT_NAMES, CATEGORIES, MAX_US, ROLES, NeedSlowPath,
                                              name_label)
from perfdiff.importers.kineto.objects import first_keys, keys_of_the_next_object, same_object
from perfdiff.importers.kineto.process_groups import COLLECTIVE, args_object, may_name_a_group, process_group
from perfdiff.importers.kineto.swar import (WHITESPACE, escaped_ends, int_or_string, last_non_separator,
                                            parse_numbers, string_ends)
from perfdiff.model.schema import MISSING

__all__ = ["Block", "CAT_HASHES", "ROLE_OF_CAT", "numpy_block", "read_process_groups"]

# Keys recognised from the bytes just before their closing quote: (id, text).
_KEYS = {"ph": 1, "cat": 2, "name": 3, "pid": 4, "tid": 5, "ts": 6, "dur": 7,
         "correlation": 8, "stream": 9, "device": 10, "bytes": 11, "args": 12}
_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _CORR, _STREAM, _DEVICE, _BYTES, _ARGS = range(1, 13)
_U = np.uint64


def _key_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per key: the last 3 bytes before the closing quote (24-bit), and the full check.

    A key ``"ts"`` is recognised when the 8 bytes ending at its closing quote end in the
    bytes ``"ts`` (opening quote included, so ``"cts"`` is not ``"ts"``).  Keys longer than
    7 characters are checked on their last 8 bytes plus the opening quote.
    """
    suffix, kid, shift, pattern = [], [], [], []
    for text, i in _KEYS.items():
        tail = ('"' + text).encode()[-8:]
        word = int.from_bytes(tail.rjust(8, b"\0"), "little")
        suffix.append(word >> 40)
        kid.append(i)
        shift.append(64 - 8 * len(tail))
        pattern.append(word >> (64 - 8 * len(tail)))
    order = np.argsort(suffix)
    return (np.array(suffix, dtype=np.uint64)[order], np.array(kid, dtype=np.int64)[order],
            np.array(shift, dtype=np.uint64)[order], np.array(pattern, dtype=np.uint64)[order])


_KEY_SUFFIX, _KEY_ID, _KEY_SHIFT, _KEY_PATTERN = _key_table()
# Lookup by the last three bytes before the closing quote: key id candidate (0 = none).
_KEY_LUT = np.zeros(1 << 24, dtype=np.uint8)
_KEY_LUT[_KEY_SUFFIX.astype(np.int64)] = _KEY_ID
_SHIFT_BY_ID = np.zeros(len(_KEYS) + 1, dtype=np.uint64)
_PATTERN_BY_ID = np.zeros(len(_KEYS) + 1, dtype=np.uint64)
_SHIFT_BY_ID[_KEY_ID] = _KEY_SHIFT
_PATTERN_BY_ID[_KEY_ID] = _KEY_PATTERN
_CORR_HEAD = int.from_bytes(b'"cor', "little")  # the 4 bytes before "relation" in "correlation"
_KEY_LEN = np.zeros(len(_KEYS) + 1, dtype=np.int64)
for _text, _i in _KEYS.items():
    _KEY_LEN[_i] = len(_text)


def _cat_hash(w0: np.ndarray, w1: np.ndarray, w2: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Hash of a string of at most 24 bytes from its three little-endian words and length."""
    h = (w0 * _U(0x9E3779B97F4A7C15)) ^ (w1 * _U(0xC2B2AE3D27D4EB4F)) ^ (w2 * _U(0x165667B19E3779F9))
    return h ^ (length.astype(np.uint64) * _U(0x27D4EB2F165667C5))


def _masked_words(le8: np.ndarray, start: np.ndarray, length: np.ndarray) -> list[np.ndarray]:
    out = []
    for k in range(3):
        n = np.clip(length - 8 * k, 0, 8).astype(np.uint64)
        w = le8[start + 8 * k]
        mask = np.where(n >= 8, _U(0xFFFFFFFFFFFFFFFF), (_U(1) << (n * _U(8))) - _U(1))
        out.append(w & mask)
    return out


def _cat_hashes() -> np.ndarray:
    hashes = []
    for nm in CAT_NAMES:
        b = nm.encode().ljust(24, b"\0")
        ws = [np.array([int.from_bytes(b[8 * k:8 * k + 8], "little")], dtype=np.uint64) for k in range(3)]
        hashes.append(int(_cat_hash(ws[0], ws[1], ws[2], np.array([len(nm)]))[0]))
    return np.array(hashes, dtype=np.uint64)


CAT_HASHES = _cat_hashes()
ROLE_OF_CAT = np.array([ROLES.index(CATEGORIES[c]) if c in CATEGORIES else -1 for c in CAT_NAMES] + [-1],
                        dtype=np.int64)
_CAT_ORDER = np.argsort(CAT_HASHES)
_CAT_SORTED = CAT_HASHES[_CAT_ORDER]


@dataclass
class Block:
    """What one block decodes to (pure data, so blocks can be decoded in parallel)."""

    cols: dict[str, np.ndarray] = field(default_factory=dict)
    names: list[bytes] = field(default_factory=list)  # local dictionary of the name codes
    # NCCL kernels naming a process group: row in cols, index into process_groups
    pg_event: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pg_code: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    process_groups: list[tuple[str, str | None]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    cat_seen: np.ndarray = field(default_factory=lambda: np.zeros(len(CAT_NAMES) + 1, dtype=np.int64))
    head: bytes | None = None  # first block: the text before the first event
    tail: bytes = b""  # last block: the last event and what follows the event list

    def drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + int(n)


def numpy_block(padded: bytes, begin: int, end: int, first: bool, final: bool) -> Block:
    """Decode the events in padded[begin:end] (whole events, or the file's end when final) with
    numpy (see the module docstring)."""
    res = Block()
    if end <= begin:
        if first:
            res.head = b""
        return res
    u8 = np.frombuffer(padded, dtype=np.uint8)
    le8 = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, offset=0, strides=(1,))
    colon = np.flatnonzero(u8[1:end] == 58)  # ':' ...
    spaced = colon[(u8[colon] <= 32) & (colon >= begin)]
    if len(spaced):  # a key written '"key" :' is not seen below: leave the file to the general reader
        prev = last_non_separator(le8, spaced + 1, WHITESPACE)
        if (u8[np.maximum(prev, 0)] == 34).any():
            raise NeedSlowPath("a key with whitespace before its colon")
    colon = colon[(u8[colon] == 34) & (colon >= begin)]  # ... right after '"': the end of a key
    kid = _key_ids(le8[colon - 8], le8, colon)
    ph_keys = np.flatnonzero(kid == _PH)
    if first:
        res.head = padded[begin:int(colon[ph_keys[0]]) - 3] if len(ph_keys) else padded[begin:end]
    if len(ph_keys) == 0:
        return res
    if final:
        last_open = int(colon[ph_keys[-1]]) - 3
        brace = int(last_non_separator(le8, np.array([last_open]), WHITESPACE)[0])
        res.tail = padded[brace if brace >= begin and u8[brace] == 123 else last_open:end]
    # Every key from the first "ph" on; in the last block they may run into the trailer.
    sel = slice(int(ph_keys[0]), len(kid))
    _decode(res, u8, le8, colon[sel], kid[sel], end, padded)
    return res


def _key_ids(w: np.ndarray, le8: np.ndarray, colon: np.ndarray) -> np.ndarray:
    """Id of each key (0: a key not read) from the 8 bytes before its closing quote."""
    kid = _KEY_LUT[(w >> _U(40)).astype(np.intp)]
    ci = np.flatnonzero(kid)
    j = kid[ci]
    ok = (w[ci] >> _SHIFT_BY_ID[j]) == _PATTERN_BY_ID[j]
    is_corr = np.flatnonzero(j == _CORR)
    if len(is_corr):  # "correlation" is longer than 7: check its first bytes too
        head = le8[colon[ci[is_corr]] - 12] & _U(0xFFFFFFFF)
        ok[is_corr] &= head == _U(_CORR_HEAD)
    kid[ci[~ok]] = 0
    return kid

def _decode(res: Block, u8: np.ndarray, le8: np.ndarray, colon: np.ndarray, kid: np.ndarray, n: int,
            padded: bytes) -> None:
    """Decode the events whose keys are `colon`/`kid` into `res` (see the module docstring)."""
    is_ph = kid == _PH
    nev_all = int(is_ph.sum())
    event_of = np.cumsum(is_ph) - 1  # every key belongs to the last "ph" before it

    def string_end(key_index: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(end, escaped) of the string values of keys `key_index` starting at `start`.

        Usually from the next key of the same object: the value's closing quote is the
        last byte before that key that is not ',' or whitespace.  Otherwise a scan.
        """
        nxt = np.minimum(key_index + 1, len(kid) - 1)
        known = (key_index + 1 < len(kid)) & (kid[nxt] > 0) & (event_of[nxt] == event_of[key_index])
        end = np.full(len(key_index), -1, dtype=np.int64)
        ki = np.flatnonzero(known)
        if len(ki):
            open_next = colon[nxt[ki]] - _KEY_LEN[kid[nxt[ki]]] - 1
            close = last_non_separator(le8, open_next)
            good = (close >= start[ki]) & (u8[np.maximum(close, 0)] == 34)
            end[ki[good]] = close[good]
        esc = np.zeros(len(key_index), dtype=bool)
        rest = np.flatnonzero(end < 0)
        if len(rest):
            e2, esc2 = string_ends(le8, u8, start[rest], n)
            end[rest], esc[rest] = e2, esc2
        return end, esc

    def value_pos(key_index: np.ndarray) -> np.ndarray:
        v = colon[key_index] + 2
        for _ in range(8):  # whitespace after the colon (bytes <= 32 outside strings)
            ws = u8[v] <= 32
            if not ws.any():
                break
            v += ws
        return v

    ph_k = np.flatnonzero(kid == _PH)
    vph = value_pos(ph_k)
    ph_char = np.where(u8[vph] == 34, u8[vph + 1], 0)
    for ch in (66, 69):  # 'B' / 'E' begin/end pairs are not Kineto output
        res.drop(f"ph {chr(ch)} events (begin/end pairs are not read)", int((ph_char == ch).sum()))
    xe = np.flatnonzero(ph_char == 88)  # event numbers of complete ('X') events
    if len(xe) == 0:
        return
    # Keys are given to the "ph" before them, so a complete event must open with "ph".
    before = last_non_separator(le8, colon[ph_k[xe]] - 3, WHITESPACE)
    if (u8[np.maximum(before, 0)] != 123).any() or (before < 0).any():
        raise NeedSlowPath('events whose first key is not "ph"')
    # A "ph" after a complete event's that opens no object: in the same object (a second "ph",
    # which JSON readers keep), or in one written with other keys first (metadata is written
    # name first), whose keys before its "ph" are not the complete event's.
    nxt = xe[xe + 1 < nev_all] + 1
    if len(nxt):
        opens = last_non_separator(le8, colon[ph_k[nxt]] - 3, WHITESPACE)
        odd = nxt[u8[np.maximum(opens, 0)] != 123]
        if len(odd):
            kid = keys_of_the_next_object(padded, colon, kid, ph_k, odd)
    is_x = np.zeros(nev_all + 1, dtype=bool)
    is_x[xe] = True
    table, pairs = first_keys(kid, event_of, nev_all, is_x, len(_KEYS) + 1)
    if len(pairs) and same_object(padded, colon[pairs]):
        # A key twice in one event (or nested under another): JSON readers keep the last.
        raise NeedSlowPath("an event with a key read twice")
    cat_k = table[xe, _CAT]
    has_cat = cat_k >= 0
    res.drop("complete events without a category", int((~has_cat).sum()))
    xe, cat_k = xe[has_cat], cat_k[has_cat]
    vc = value_pos(cat_k)
    if (u8[vc] != 34).any():
        raise NeedSlowPath("a category that is not a string")
    c0 = vc + 1
    c1, esc = string_end(cat_k, c0)
    clen = c1 - c0
    w0, w1, w2 = _masked_words(le8, c0, np.minimum(clen, 24))
    h = _cat_hash(w0, w1, w2, clen)
    pos = np.minimum(np.searchsorted(_CAT_SORTED, h), len(_CAT_SORTED) - 1)
    known = (_CAT_SORTED[pos] == h) & (clen <= 24) & ~esc
    cat_id = np.where(known, _CAT_ORDER[pos], len(CAT_NAMES))
    res.cat_seen += np.bincount(cat_id, minlength=len(CAT_NAMES) + 1)
    role = ROLE_OF_CAT[cat_id]
    keep = role >= 0
    if not keep.any():
        return
    xe, role, cat_id = xe[keep], role[keep], cat_id[keep]
    t = table[xe]  # per imported event: index of its first key of each id (-1: none)
    for k, label in ((_NAME, "name"), (_TS, "ts"), (_DUR, "dur"), (_PID, "pid"), (_TID, "tid")):
        if (t[:, k] < 0).any():
            raise NeedSlowPath(f"an event without \"{label}\" after its \"ph\"")
    # name
    vn = value_pos(t[:, _NAME])
    if (u8[vn] != 34).any():
        raise NeedSlowPath("a name that is not a string")
    s0 = vn + 1
    s1, esc = string_end(t[:, _NAME], s0)
    if esc.any():
        s1 = escaped_ends(padded, s0, s1, esc, n)
    if (s1 >= n).any():
        raise NeedSlowPath("a string that the scanner could not close")
    name_code = _name_codes(res, padded, s0, s1)
    # numbers
    ts = parse_numbers(le8, u8, value_pos(t[:, _TS]))
    dur = parse_numbers(le8, u8, value_pos(t[:, _DUR]))
    if not (ts.ok.all() and dur.ok.all()) or (np.abs(ts.value) > MAX_US).any() or (np.abs(dur.value) > MAX_US).any():
        raise NeedSlowPath("a ts/dur number in a form or range the fast reader does not decode")
    pid = int_or_string(le8, u8, value_pos(t[:, _PID]), n)
    tid = int_or_string(le8, u8, value_pos(t[:, _TID]), n)

    def optional_int(key: int, rows: np.ndarray | None = None) -> np.ndarray:
        """args integer `key` of the events `rows` (all when None), MISSING when absent."""
        col = t[:, key] if rows is None else t[rows, key]
        vals = np.full(len(col), MISSING, dtype=np.int64)
        has = np.flatnonzero(col >= 0)
        if len(has):
            num = parse_numbers(le8, u8, value_pos(col[has]))
            good = num.ok & num.whole
            vals[has[good]] = num.value[good]
        if rows is None:
            return vals
        out = np.full(len(t), MISSING, dtype=np.int64)
        out[rows] = vals
        return out

    gpu = role <= ROLES.index("memset")
    corr = optional_int(_CORR)
    nbytes = optional_int(_BYTES, np.flatnonzero(gpu & (role != ROLES.index("kernel"))))
    # A GPU event's (and a GPU-side range's) pid is its device and its tid its stream; args
    # say so too, but are read only when pid/tid are not numbers (saves two numbers per event).
    on_gpu = gpu | (role == ROLES.index("gpu_range"))
    device = optional_int(_DEVICE, np.flatnonzero(on_gpu & (pid < 0)))
    stream = optional_int(_STREAM, np.flatnonzero(on_gpu & (tid < 0)))
    # The process groups of NCCL kernels: only their args objects are decoded (a few events).
    with_args = np.flatnonzero((role == ROLES.index("kernel")) & (t[:, _ARGS] >= 0))

    def args_of(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nxt = xe[rows] + 1  # the next event's "ph" bounds the args object
        return value_pos(t[rows, _ARGS]), np.where(nxt < nev_all, colon[ph_k[np.minimum(nxt, nev_all - 1)]], n)

    read_process_groups(res, padded, name_code, with_args, args_of)
    res.cols = dict(role=role, cat=cat_id, name=name_code, pid=pid, tid=tid,
                    ts_ns=ts.value * 1000 + ts.frac_ns, dur_ns=dur.value * 1000 + dur.frac_ns,
                    corr=corr, stream=stream, device=device, nbytes=nbytes)


@functools.lru_cache(maxsize=1 << 16)
def _collective(raw: bytes) -> bool:
    """Whether the kernel name written `raw` names an NCCL collective (asked once per name and
    block: a 1 GB trace asks 500 k times about a few thousand names)."""
    return COLLECTIVE.match(name_label(raw)) is not None


def read_process_groups(res: Block, padded: bytes, name_code: np.ndarray, with_args: np.ndarray,
                         args_of: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> None:
    """The process groups named by the args of the NCCL kernels among the kernel rows `with_args`
    (those with an args key) into `res`; `args_of(rows)`: (where each row's args value starts,
    the position its object must end before)."""
    if len(with_args) == 0:
        return
    nccl = np.zeros(len(res.names), dtype=bool)
    for c in np.flatnonzero(np.bincount(name_code[with_args], minlength=len(res.names))).tolist():
        nccl[c] = _collective(res.names[c])
    rows = with_args[nccl[name_code[with_args]]]
    if len(rows) == 0:
        return
    found, named, codes = {}, [], []
    starts, limits = args_of(rows)
    for r, v, lim in zip(rows.tolist(), starts.tolist(), limits.tolist(), strict=True):
        g = process_group(args_object(padded, v, lim)) if may_name_a_group(padded, v, lim) else None
        if g is not None:
            named.append(r)
            codes.append(found.setdefault(g, len(found)))
    res.process_groups = list(found)
    res.pg_event, res.pg_code = np.array(named, dtype=np.int64), np.array(codes, dtype=np.int64)


def _name_codes(res: Block, padded: bytes, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Global codes of the strings [s0, s1) of the block (dictionary-encoded by Arrow)."""
    length = (s1 - s0).astype(np.int32)
    m = len(length)
    views = np.zeros((m, 4), dtype=np.int32)
    views[:, 0] = length
    # Arrow string views: strings of 12 bytes or less are stored inline in the view, longer
    # ones by (4-byte prefix, buffer 0, offset).
    u8 = np.frombuffer(padded, dtype=np.uint8)
    le4 = np.ndarray(shape=(len(padded) - 3,), dtype="<i4", buffer=padded, offset=0, strides=(1,))
    short = length <= 12
    long_ = ~short
    views[long_, 1] = le4[s0[long_]]
    views[long_, 3] = s0[long_].astype(np.int32)
    if short.any():
        si = np.flatnonzero(short)
        inline = u8[s0[si, None] + np.arange(12)]
        inline[np.arange(12)[None, :] >= length[si, None]] = 0
        views[si, 1:] = inline.view(np.int32).reshape(len(si), 3)
    arr = pa.Array.from_buffers(pa.binary_view(), m, [None, pa.py_buffer(views), pa.py_buffer(padded)])
    enc = arr.dictionary_encode()
    local = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    res.names = enc.dictionary.to_pylist()
    return local
