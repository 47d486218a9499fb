"""Import a PyTorch-profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, as a RunData.

What is read (FORMATS.md):

- GPU work, complete events (``ph: X``) of category ``kernel`` / ``gpu_memcpy`` /
  ``gpu_memset`` (2021: ``Kernel`` / ``Memcpy`` / ``Memset``) → activity kinds ``kernel``,
  ``memcpy``, ``memset`` on ``GPU <pid>`` with stream = tid (legacy ``"stream 7"`` → 7;
  ``args.device`` / ``args.stream`` when pid / tid are not numbers), correlation and
  bytes from ``args``.  ``launch_ns`` and the launching ``tid`` come from the runtime event with
  the same ``args.correlation`` (no need for the ``ac2g``/``async`` flow events).
- ``cuda_runtime`` / ``cuda_driver`` (2021: ``Runtime``) → kind ``api`` on "Host".
- ``cpu_op`` / ``user_annotation`` (2021: ``Operator``) → kind ``cpu`` on "Host" with
  busy_ns = self time: the time of CPU ranges and runtime calls nested inside on the same
  thread is subtracted (`perfdiff.intervals`).  ``ProfilerStep#N`` ranges are not functions
  but markers (source "profiler_step"); other user annotations are also markers (source
  "annotation").  ``python_function`` events (Python stack samples, nested dozens deep and
  a large share of modern traces) are not imported: they would multiply the rows and the
  self-time work for little signal; they are counted in ``manifest["dropped"]``.
- ``deviceProperties`` → manifest GPUs; ``baseTimeNanoseconds`` (when present, wall ns =
  base + ts·1000, else ts is epoch µs); ``distributedInfo`` → manifest target.

Speed.  A 1 GB trace cannot go through ``json.loads`` (tens of seconds, several GB of Python
objects).  The reader streams the (decompressed) bytes in blocks and works on each block
with numpy only: it finds every object key (a ``"`` followed by ``:``), recognises the few
keys it needs from the 8 bytes before the colon, anchors each event at its ``"ph"`` key,
and decodes strings and numbers with word-at-a-time (SWAR) arithmetic.  The names are
gathered through Arrow string views and dictionary-encoded, so no Python object is made
per event.  A thread inflates the gzip stream and two threads decode blocks (zlib, numpy
and Arrow release the GIL in their loops).  It relies on what every Kineto writer (and
``json.dump`` of a Kineto trace) does: a complete event's first key is ``"ph"``, and keys
are written ``"key":`` with no space before the colon.  Any complete event that does not
follow this, or a number it cannot decode, switches the whole file to the slow path
(``json.loads`` and a Python loop over the events), which reads anything valid JSON; the
manifest (``source.reader``: "fast" or "json") says which path was used.  The fast path
checks the fields it reads and the document's start and end (a truncated file is an
error), not every byte of the fields it skips.
"""
from __future__ import annotations

import gzip
import json
import queue
import re
import threading
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from perfdiff.bundle import MISSING, RunData, base_manifest, empty_table
from perfdiff.errors import InputError
from perfdiff.importers.common import cores_per_run
from perfdiff.model.tables import Part, categorical, concat_parts, constant_categorical, dense_codes
from perfdiff.model.intervals import self_time_ns

__all__ = ["import_kineto", "short_kernel_name"]

# ---------------------------------------------------------------------------- categories

# category → (role); roles: kernel, memcpy, memset, api, cpu
CATEGORIES: dict[str, str] = {
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "cuda_runtime": "api", "cuda_driver": "api", "Runtime": "api", "hip_runtime": "api", "hip_driver": "api",
    "cpu_op": "cpu", "user_annotation": "cpu", "Operator": "cpu",
}
# Categories known and deliberately not imported (counted in manifest["dropped"]).
SKIPPED = ("python_function", "gpu_user_annotation", "cpu_instant_event", "ac2g", "async", "async_cpu_to_gpu",
           "Trace", "cuda_sync", "overhead", "fwdbwd", "Python", "memory", "cuda_profiler_range")
_ROLES = ("kernel", "memcpy", "memset", "api", "cpu")
_ANNOTATION_CATS = {"user_annotation"}
_STEP = re.compile(r"^ProfilerStep#\d+$")

_BLOCK = 8 << 20  # decompressed bytes scanned per block
_PAD = 64  # zero bytes after each block, so 8-byte reads never leave the buffer
_FRONT = b" " * 16  # spaces before each block, so reads before a key never leave it either
_ZEROS = b"\0" * _PAD


def import_kineto(path: str | Path, *, group: str = "full", skip: frozenset[str] = frozenset()) -> RunData:
    """Read the Kineto/Chrome trace at `path` (.json or .json.gz) into a RunData.

    Times are wall-clock ns.  `group="short"` names kernels by their base name (template
    arguments, parameters and namespaces removed); `skip`: activity columns left unknown (see
    concat_parts).  Bad input raises InputError naming the file: unreadable, truncated gzip,
    invalid JSON, JSON that is not a trace.
    """
    p = Path(path)
    if group not in ("full", "short"):
        raise ValueError(f"group must be 'full' or 'short', not {group!r}")
    if not p.exists():
        raise InputError("no such file", path=p)
    if not p.is_file():
        raise InputError("not a file", path=p)
    scan = _FastScan(p)
    try:
        events = scan.run()
    except _NeedSlowPath as why:
        events = _slow_events(p)
        events.notes.append(f"read with the general JSON parser ({why})")
    return _build(p, events, group, skip)


# ------------------------------------------------------------------------- byte reading

def _blocks(p: Path) -> Iterator[list[bytes]]:
    """Decompressed content of `p` as lists of pieces totalling about _BLOCK bytes.

    A gzip file is inflated in a background thread (zlib releases the GIL), so inflating
    the next block overlaps scanning this one.
    """
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
    with fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        source = _inflate(fh, p) if gz else _plain(fh, p)
        yield from _prefetch(source)


def _plain(fh: Any, p: Path) -> Iterator[list[bytes]]:
    while True:
        try:
            data = fh.read(_BLOCK)
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
        if not data:
            return
        yield [data]


def _inflate(fh: Any, p: Path) -> Iterator[list[bytes]]:
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    pending: list[bytes] = []
    size = 0
    while True:
        try:
            raw = fh.read(1 << 18)
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
        try:
            out = d.decompress(raw) if raw else d.flush()
            while d.eof and d.unused_data:  # concatenated gzip members
                rest = d.unused_data
                d = zlib.decompressobj(wbits=47)
                out += d.decompress(rest)
        except zlib.error as exc:
            raise InputError(f"corrupt gzip data ({exc})", path=p) from None
        if out:
            pending.append(out)
            size += len(out)
        if size >= _BLOCK or (not raw and pending):
            yield pending
            pending, size = [], 0
        if not raw:
            if not d.eof:
                raise InputError("truncated gzip file (the compressed stream ends early)", path=p)
            return


def _prefetch(source: Iterator[list[bytes]], depth: int = 2) -> Iterator[list[bytes]]:
    """Run `source` in a thread, `depth` items ahead; its exceptions re-raise here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as exc:  # handed to the consumer, which raises it
            q.put(exc)

    t = threading.Thread(target=work, name="perfdiff-inflate", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join(timeout=5)


# ------------------------------------------------------------------------- the fast scan

class _NeedSlowPath(Exception):
    """The fast scanner met a layout it does not decode; the general parser takes over."""


def _pack(s: bytes) -> int:
    return int.from_bytes(s.ljust(8, b"\0")[:8], "little")


# Keys recognised from the bytes just before their closing quote: (id, text).
_KEYS = {"ph": 1, "cat": 2, "name": 3, "pid": 4, "tid": 5, "ts": 6, "dur": 7,
         "correlation": 8, "stream": 9, "device": 10, "bytes": 11}
_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _CORR, _STREAM, _DEVICE, _BYTES = range(1, 12)
_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGH = _U(0x8080808080808080)


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
_SEPARATORS = [_U(c * 0x0101010101010101) for c in b", \n\r\t"]
_WHITESPACE = _SEPARATORS[1:]
_MOVEMASK = _U(0x0102040810204080)
_HIGHEST_BIT = np.array([max(i.bit_length() - 1, -1) for i in range(256)], dtype=np.int64)


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


def _cat_table() -> tuple[np.ndarray, list[str]]:
    names = list(CATEGORIES) + list(SKIPPED)
    hashes = []
    for nm in names:
        b = nm.encode().ljust(24, b"\0")
        ws = [np.array([int.from_bytes(b[8 * k:8 * k + 8], "little")], dtype=np.uint64) for k in range(3)]
        hashes.append(int(_cat_hash(ws[0], ws[1], ws[2], np.array([len(nm)]))[0]))
    return np.array(hashes, dtype=np.uint64), names


_CAT_HASHES, _CAT_NAMES = _cat_table()
_ROLE_OF_CAT = np.array([_ROLES.index(CATEGORIES[c]) if c in CATEGORIES else -1 for c in _CAT_NAMES] + [-1],
                        dtype=np.int64)
_CAT_ORDER = np.argsort(_CAT_HASHES)
_CAT_SORTED = _CAT_HASHES[_CAT_ORDER]


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
class _Numbers:
    value: np.ndarray  # integer part (signed)
    frac_ns: np.ndarray  # first three decimals as ns (0..999), for µs timestamps
    ok: np.ndarray


def _parse_numbers(le8: np.ndarray, u8: np.ndarray, v: np.ndarray) -> _Numbers:
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
    return _Numbers(value, frac, ok)


def _exact_zero_bytes(x: np.ndarray) -> np.ndarray:
    """High bit set in exactly the zero bytes of each word (no false positives)."""
    return ~(((x & _U(0x7F7F7F7F7F7F7F7F)) + _U(0x7F7F7F7F7F7F7F7F)) | x) & _HIGH


def _last_non_separator(le8: np.ndarray, before: np.ndarray, chars: list[np.uint64] = _SEPARATORS) -> np.ndarray:
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


def _string_ends(le8: np.ndarray, u8: np.ndarray, start: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
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


@dataclass
class _Events:
    """Columns of the imported events (all of them, from every block)."""

    role: list[np.ndarray] = field(default_factory=list)  # index into _ROLES
    cat: list[np.ndarray] = field(default_factory=list)  # index into _CAT_NAMES
    name: list[np.ndarray] = field(default_factory=list)  # global name codes
    pid: list[np.ndarray] = field(default_factory=list)
    tid: list[np.ndarray] = field(default_factory=list)
    ts_ns: list[np.ndarray] = field(default_factory=list)  # µs·1000 + decimals, before the base
    dur_ns: list[np.ndarray] = field(default_factory=list)
    corr: list[np.ndarray] = field(default_factory=list)
    stream: list[np.ndarray] = field(default_factory=list)
    device: list[np.ndarray] = field(default_factory=list)
    nbytes: list[np.ndarray] = field(default_factory=list)
    names: dict[bytes, int] = field(default_factory=dict)  # raw (escaped) name → code
    header: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    path_used: str = "fast"
    decoded_bytes: int = 0

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            getattr(self, k).append(v)

    def column(self, key: str) -> np.ndarray:
        parts = getattr(self, key)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + int(n)

    def name_labels(self) -> list[str]:
        labels = [""] * len(self.names)
        for raw, code in self.names.items():
            if b"\\" in raw:
                try:
                    labels[code] = json.loads(b'"' + raw + b'"')
                except ValueError:
                    labels[code] = raw.decode("utf-8", "replace")
            else:
                labels[code] = raw.decode("utf-8", "replace")
        return labels


@dataclass
class _Block:
    """What one block decodes to (pure data, so blocks can be decoded in parallel)."""

    cols: dict[str, np.ndarray] = field(default_factory=dict)
    names: list[bytes] = field(default_factory=list)  # local dictionary of the name codes
    dropped: dict[str, int] = field(default_factory=dict)
    cat_seen: np.ndarray = field(default_factory=lambda: np.zeros(len(_CAT_NAMES) + 1, dtype=np.int64))
    head: bytes | None = None  # first block: the text before the first event
    tail: bytes = b""  # last block: the last event and what follows the event list

    def drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + int(n)


_WORKERS = 2  # blocks decoded at once (numpy and Arrow release the GIL in their loops)


class _FastScan:
    """The numpy scanner: blocks in, event columns out (see the module docstring).

    The main thread cuts the text into blocks that end just before an event's "{" (found
    with bytes.rfind), two worker threads decode blocks, and results are merged in order.
    """

    def __init__(self, path: Path):
        self.path = path
        self.ev = _Events()
        self.cat_seen = np.zeros(len(_CAT_NAMES) + 1, dtype=np.int64)

    def run(self) -> _Events:
        carry = b""
        total = 0
        first = True
        head: bytes | None = None
        tail = b""
        # Blocks decoded at once: fewer where another run loads beside this one (on two cores
        # the extra thread only competed with it).
        workers = min(_WORKERS, cores_per_run())
        with ThreadPoolExecutor(max_workers=workers) as pool:
            inflight: deque = deque()
            for pieces in _blocks(self.path):
                total += sum(len(x) for x in pieces)
                buf = b"".join((_FRONT, carry, *pieces, _ZEROS))  # the block's one copy
                begin, end = len(_FRONT), len(buf) - len(_ZEROS)
                cut = _find_cut(buf, begin, end)
                if cut < 0 and not (first and end - begin > (64 << 20)):
                    carry = buf[begin:end]  # no complete event yet: read more
                    continue
                if cut < 0:  # 64 MB without an event: let the decoder explain the file
                    cut = end
                inflight.append(pool.submit(_scan_block, buf, begin, cut, first, False))
                first = False
                carry = buf[cut:end]
                while len(inflight) > workers:
                    head = self._merge(inflight.popleft().result(), head)
            buf = b"".join((_FRONT, carry, _ZEROS))
            inflight.append(pool.submit(_scan_block, buf, len(_FRONT), len(buf) - len(_ZEROS), first, True))
            while inflight:
                result = inflight.popleft().result()
                head = self._merge(result, head)
                tail = result.tail or tail
        self._finish(head or b"", tail, total)
        return self.ev

    def _merge(self, block: _Block, head: bytes | None) -> bytes | None:
        ev = self.ev
        if block.head is not None and head is None:
            head = block.head
        for why, n in block.dropped.items():
            ev.drop(why, n)
        self.cat_seen += block.cat_seen
        if block.cols:
            names = ev.names
            mapping = np.array([names.setdefault(v, len(names)) for v in block.names], dtype=np.int64)
            cols = dict(block.cols)
            cols["name"] = mapping[cols["name"]] if len(mapping) else cols["name"]
            ev.add(**cols)
        return head


    def _finish(self, head: bytes, tail: bytes, total: int) -> None:
        ev = self.ev
        ev.decoded_bytes = total
        if not ev.role and not tail.strip():
            _explain_not_a_trace(self.path, head)
        ev.header.update(_parse_header(head))
        ev.header.update(_parse_trailer(tail, self.path))
        for i, nm in enumerate(_CAT_NAMES):
            if nm in SKIPPED and self.cat_seen[i]:
                ev.drop(f"category {nm} (not imported)", int(self.cat_seen[i]))
        if self.cat_seen[len(_CAT_NAMES)]:
            ev.drop("complete events of other categories", int(self.cat_seen[len(_CAT_NAMES)]))


def _find_cut(buf: bytes, begin: int, end: int) -> int:
    """Start ("{" or the "ph" key) of the last event in buf[begin:end] that has one before it.

    -1 when the text holds no complete event yet.  A "ph" key is the bytes '"ph"' followed
    by ':' (a string value "ph" is not followed by ':', an escaped one has a backslash).
    """
    pos = buf.rfind(b'"ph"', begin, end)
    while pos > begin:
        j = pos + 4
        while j < end and buf[j] in b" \t\r\n":
            j += 1
        if j < end and buf[j] == 58 and buf[pos - 1] != 92:
            k = pos - 1
            while k > begin and buf[k] in b" \t\r\n":
                k -= 1
            cut = k if buf[k] == 123 else pos
            return cut if buf.find(b'"ph"', begin, cut) >= 0 else -1
        pos = buf.rfind(b'"ph"', begin, pos)
    return -1


def _scan_block(padded: bytes, begin: int, end: int, first: bool, final: bool) -> _Block:
    """Decode the events in padded[begin:end] (whole events, or the file's end when final)."""
    res = _Block()
    if end <= begin:
        if first:
            res.head = b""
        return res
    u8 = np.frombuffer(padded, dtype=np.uint8)
    le8 = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, offset=0, strides=(1,))
    colon = np.flatnonzero(u8[1:end] == 58)  # ':' ...
    colon = colon[(u8[colon] == 34) & (colon >= begin)]  # ... right after '"': the end of a key
    kid = _key_ids(le8[colon - 8], le8, colon)
    ph_keys = np.flatnonzero(kid == _PH)
    if first:
        res.head = padded[begin:int(colon[ph_keys[0]]) - 3] if len(ph_keys) else padded[begin:end]
    if len(ph_keys) == 0:
        return res
    if final:
        last_open = int(colon[ph_keys[-1]]) - 3
        brace = int(_last_non_separator(le8, np.array([last_open]), _WHITESPACE)[0])
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

def _decode(res: _Block, u8: np.ndarray, le8: np.ndarray, colon: np.ndarray, kid: np.ndarray, n: int,
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
            close = _last_non_separator(le8, open_next)
            good = (close >= start[ki]) & (u8[np.maximum(close, 0)] == 34)
            end[ki[good]] = close[good]
        esc = np.zeros(len(key_index), dtype=bool)
        rest = np.flatnonzero(end < 0)
        if len(rest):
            e2, esc2 = _string_ends(le8, u8, start[rest], n)
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
    before = _last_non_separator(le8, colon[ph_k[xe]] - 3, _WHITESPACE)
    if (u8[np.maximum(before, 0)] != 123).any() or (before < 0).any():
        raise _NeedSlowPath('events whose first key is not "ph"')
    is_x = np.zeros(nev_all + 1, dtype=bool)
    is_x[xe] = True
    table = _first_keys(kid, event_of, nev_all, is_x)
    cat_k = table[xe, _CAT]
    has_cat = cat_k >= 0
    res.drop("complete events without a category", int((~has_cat).sum()))
    xe, cat_k = xe[has_cat], cat_k[has_cat]
    vc = value_pos(cat_k)
    if (u8[vc] != 34).any():
        raise _NeedSlowPath("a category that is not a string")
    c0 = vc + 1
    c1, esc = string_end(cat_k, c0)
    clen = c1 - c0
    w0, w1, w2 = _masked_words(le8, c0, np.minimum(clen, 24))
    h = _cat_hash(w0, w1, w2, clen)
    pos = np.minimum(np.searchsorted(_CAT_SORTED, h), len(_CAT_SORTED) - 1)
    known = (_CAT_SORTED[pos] == h) & (clen <= 24) & ~esc
    cat_id = np.where(known, _CAT_ORDER[pos], len(_CAT_NAMES))
    res.cat_seen += np.bincount(cat_id, minlength=len(_CAT_NAMES) + 1)
    role = _ROLE_OF_CAT[cat_id]
    keep = role >= 0
    if not keep.any():
        return
    xe, role, cat_id = xe[keep], role[keep], cat_id[keep]
    t = table[xe]  # per imported event: index of its first key of each id (-1: none)
    for k, label in ((_NAME, "name"), (_TS, "ts"), (_DUR, "dur"), (_PID, "pid"), (_TID, "tid")):
        if (t[:, k] < 0).any():
            raise _NeedSlowPath(f"an event without \"{label}\" after its \"ph\"")
    # name
    vn = value_pos(t[:, _NAME])
    if (u8[vn] != 34).any():
        raise _NeedSlowPath("a name that is not a string")
    s0 = vn + 1
    s1, esc = string_end(t[:, _NAME], s0)
    if esc.any():
        s1 = _escaped_ends(padded, s0, s1, esc, n)
    if (s1 >= n).any():
        raise _NeedSlowPath("a string that the scanner could not close")
    name_code = _name_codes(res, padded, s0, s1)
    # numbers
    ts = _parse_numbers(le8, u8, value_pos(t[:, _TS]))
    dur = _parse_numbers(le8, u8, value_pos(t[:, _DUR]))
    if not (ts.ok.all() and dur.ok.all()):
        raise _NeedSlowPath("a ts/dur number in a form the fast reader does not decode")
    pid = _int_or_string(le8, u8, value_pos(t[:, _PID]), n)
    tid = _int_or_string(le8, u8, value_pos(t[:, _TID]), n)

    def optional_int(key: int, rows: np.ndarray | None = None) -> np.ndarray:
        """args integer `key` of the events `rows` (all when None), MISSING when absent."""
        col = t[:, key] if rows is None else t[rows, key]
        vals = np.full(len(col), MISSING, dtype=np.int64)
        has = np.flatnonzero(col >= 0)
        if len(has):
            num = _parse_numbers(le8, u8, value_pos(col[has]))
            good = num.ok & (num.frac_ns == 0)
            vals[has[good]] = num.value[good]
        if rows is None:
            return vals
        out = np.full(len(t), MISSING, dtype=np.int64)
        out[rows] = vals
        return out

    gpu = role <= _ROLES.index("memset")
    corr = optional_int(_CORR)
    nbytes = optional_int(_BYTES, np.flatnonzero(gpu & (role != _ROLES.index("kernel"))))
    # A GPU event's pid is its device and its tid its stream; args say so too, but are
    # read only when pid/tid are not numbers (saves two numbers per event).
    device = optional_int(_DEVICE, np.flatnonzero(gpu & (pid < 0)))
    stream = optional_int(_STREAM, np.flatnonzero(gpu & (tid < 0)))
    res.cols = dict(role=role, cat=cat_id, name=name_code, pid=pid, tid=tid,
                    ts_ns=ts.value * 1000 + ts.frac_ns, dur_ns=dur.value * 1000 + dur.frac_ns,
                    corr=corr, stream=stream, device=device, nbytes=nbytes)

def _first_keys(kid: np.ndarray, event_of: np.ndarray, nev: int, wanted: np.ndarray) -> np.ndarray:
    """(events x key ids) table: index of the first key of each id in each event, or -1.

    Only events with `wanted[event]` are filled (flows and metadata are half the keys).
    """
    ki = np.flatnonzero((kid > 0) & wanted[event_of])  # event_of == -1 reads wanted[-1]: False
    kk = kid[ki].astype(np.uint8)
    by_id = np.argsort(kk, kind="stable")  # radix sort; keeps key order within an id
    ki, kk = ki[by_id], kk[by_id]
    ee = event_of[ki]
    # within one id the events are non-decreasing: keep the first key of each event
    first = np.r_[True, (ee[1:] != ee[:-1]) | (kk[1:] != kk[:-1])]
    table = np.full((nev, len(_KEYS) + 1), -1, dtype=np.int64)
    table[ee[first], kk[first]] = ki[first]
    return table


def _escaped_ends(padded: bytes, s0: np.ndarray, s1: np.ndarray, esc: np.ndarray, n: int) -> np.ndarray:
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

def _name_codes(res: _Block, padded: bytes, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
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

def _int_or_string(le8: np.ndarray, u8: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """A pid/tid: a JSON integer, or the last number inside a string ("stream 7")."""
    out = np.full(len(v), MISSING, dtype=np.int64)
    quoted = u8[v] == 34
    num = np.flatnonzero(~quoted)
    if len(num):
        got = _parse_numbers(le8, u8, v[num])
        good = got.ok & (got.frac_ns == 0)
        out[num[good]] = got.value[good]
    qi = np.flatnonzero(quoted)
    if len(qi):
        s0 = v[qi] + 1
        s1, _ = _string_ends(le8, u8, s0, n)
        # first digit inside the first 16 bytes of the string
        win = u8[s0[:, None] + np.arange(16)]
        inside = np.arange(16)[None, :] < (s1 - s0)[:, None]
        digit = (win >= 48) & (win <= 57) & inside
        has = digit.any(axis=1)
        at = np.argmax(digit, axis=1)
        hi = np.flatnonzero(has)
        if len(hi):
            got = _parse_numbers(le8, u8, s0[hi] + at[hi])
            out[qi[hi[got.ok]]] = got.value[got.ok]
    return out

# -- the document's start and end
def _parse_header(head: bytes) -> dict[str, Any]:
    """Top-level keys written before "traceEvents" (deviceProperties, schemaVersion ...)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return {}
    at = text.find(b'"traceEvents"')
    if at < 0:
        return {}
    body = text[:at].rstrip()
    if body.endswith(b","):
        body = body[:-1]
    try:
        obj = json.loads(body + b"}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _parse_trailer(tail: bytes, path: Path) -> dict[str, Any]:
    """Top-level keys written after the event list; the last event must close the list."""
    if not tail.strip():
        return {}
    dec = json.JSONDecoder()
    text = tail.decode("utf-8", "replace").lstrip()
    if not text.startswith("{"):  # the tail starts at the last event's "ph" key
        text = "{" + text
    try:
        _, end = dec.raw_decode(text)
    except ValueError as exc:
        raise InputError(f"invalid JSON near the end of the trace ({exc.msg}); truncated file?", path=path) from None
    rest = text[end:].lstrip()
    if rest.startswith(","):  # more events after an incomplete last one cannot happen; tolerate
        rest = rest[1:].lstrip()
        if rest.startswith("{"):
            raise InputError("invalid JSON near the end of the trace", path=path)
    if not rest.startswith("]"):
        raise InputError("invalid JSON: the event list is not closed (truncated file?)", path=path)
    rest = rest[1:].lstrip()
    if not rest:
        return {}
    if rest.startswith("}"):
        return {}
    if rest.startswith(","):
        try:
            obj = json.loads("{" + rest[1:])
        except ValueError as exc:
            raise InputError(f"invalid JSON after the event list ({exc.msg})", path=path) from None
        return obj if isinstance(obj, dict) else {}
    raise InputError("invalid JSON after the event list", path=path)


def _explain_not_a_trace(path: Path, head: bytes) -> None:
    """Raise the most precise InputError for a file in which no event was found."""
    text = head.strip()
    if not text:
        raise InputError("empty file: not a trace", path=path)
    if len(text) < (64 << 20):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise InputError(f"invalid JSON ({exc})", path=path) from None
        if isinstance(obj, dict) and "traceEvents" not in obj:
            raise InputError("JSON is not a Chrome/Kineto trace (no \"traceEvents\")", path=path)
        events = obj.get("traceEvents") if isinstance(obj, dict) else obj
        if isinstance(events, list) and not events:
            raise InputError("trace has no events", path=path)
    raise InputError("JSON is not a Chrome/Kineto trace (no events with a \"ph\" field)", path=path)


# ------------------------------------------------------------------------- the slow path

def _slow_events(p: Path) -> _Events:
    """Read any valid trace with json.loads and a Python loop (for layouts the scanner skips)."""
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except EOFError:
        raise InputError("truncated gzip file (the compressed stream ends early)", path=p) from None
    except (OSError, zlib.error) as exc:
        raise InputError(f"cannot read the trace ({exc})", path=p) from None
    try:
        # Decimals stay text so that "1623142623460111.123" µs converts to ns exactly.
        doc = json.loads(raw, parse_float=str)
    except ValueError as exc:
        raise InputError(f"invalid JSON ({exc})", path=p) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc})", path=p) from None
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise InputError("JSON is not a Chrome/Kineto trace (no \"traceEvents\")", path=p)
        events = doc.get("traceEvents")
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        events, header = doc, {}
    if not isinstance(events, list):
        raise InputError("JSON is not a Chrome/Kineto trace (traceEvents is not a list)", path=p)
    ev = _Events(header=header, path_used="json")
    ev.decoded_bytes = len(raw)
    cols: dict[str, list] = {k: [] for k in ("role", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "corr", "stream",
                                             "device", "nbytes")}
    cat_index = {nm: i for i, nm in enumerate(_CAT_NAMES)}
    for e in events:
        if not isinstance(e, dict):
            ev.drop("entries of traceEvents that are not objects", 1)
            continue
        if e.get("ph") != "X":
            if e.get("ph") in ("B", "E"):
                ev.drop(f"ph {e['ph']} events (begin/end pairs are not read)", 1)
            continue
        cat = e.get("cat")
        if not isinstance(cat, str):
            ev.drop("complete events without a category", 1)
            continue
        role = CATEGORIES.get(cat)
        if role is None:
            ev.drop(f"category {cat} (not imported)" if cat in SKIPPED else "complete events of other categories", 1)
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        try:
            ts_ns = _us_to_ns(e["ts"])
            dur_ns = _us_to_ns(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            ev.drop("events with a missing or bad ts/dur", 1)
            continue
        raw_name = json.dumps(str(e.get("name", "")), ensure_ascii=False)[1:-1].encode()
        cols["role"].append(_ROLES.index(role))
        cols["cat"].append(cat_index[cat])
        cols["name"].append(ev.names.setdefault(raw_name, len(ev.names)))
        cols["pid"].append(_loose_int(e.get("pid")))
        cols["tid"].append(_loose_int(e.get("tid")))
        cols["ts_ns"].append(ts_ns)
        cols["dur_ns"].append(dur_ns)
        for key, col in (("correlation", "corr"), ("stream", "stream"), ("device", "device"), ("bytes", "nbytes")):
            v = args.get(key)
            cols[col].append(int(v) if isinstance(v, int) and not isinstance(v, bool) else MISSING)
    for k, v in cols.items():
        getattr(ev, k).append(np.array(v, dtype=np.int64))
    return ev


def _us_to_ns(v: Any) -> int:
    """µs (int, or decimal text as json.loads(parse_float=str) gives it) → ns, truncated."""
    if isinstance(v, bool):
        raise TypeError
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, str):
        if "e" in v or "E" in v:
            return int(round(float(v) * 1000))
        whole, _, frac = v.partition(".")
        neg = whole.startswith("-")
        ns = abs(int(whole or "0")) * 1000 + int((frac + "000")[:3])
        return -ns if neg else ns
    if isinstance(v, float):
        return int(round(v * 1000))
    raise TypeError


def _loose_int(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        m = re.search(r"\d+", v)
        return int(m.group()) if m else MISSING
    return MISSING


# ------------------------------------------------------------------------- the RunData

_SHORT_STRIP = re.compile(r"^(?:void|static|__global__|\s)+\s")


def short_kernel_name(name: str) -> str:
    """Base name of a demangled kernel name: no return type, template args, params, namespaces.

    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` →
    ``vectorized_elementwise_kernel`` (what nsys calls the short name).
    """
    s = _SHORT_STRIP.sub("", name.strip())
    depth = 0
    cut = len(s)
    for i, ch in enumerate(s):
        if ch in "<(":
            if depth == 0:
                cut = i
                break
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    base = s[:cut].strip() or s
    # the last namespace component (not inside brackets)
    return base.split("::")[-1] or base


def _build(p: Path, ev: _Events, group: str, skip: frozenset[str] = frozenset()) -> RunData:
    role = ev.column("role")
    n = len(role)
    header = ev.header
    base = header.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else None
    ts = ev.column("ts_ns")
    dur = ev.column("dur_ns")
    backwards = dur < 0
    if backwards.any():  # the bundle holds no interval that ends before it starts
        ev.drop("events with a negative duration", int(backwards.sum()))
        role = np.where(backwards, -1, role)
    start = ts + (base_ns or 0)
    end = start + dur
    names = ev.name_labels()
    name_code = ev.column("name")
    pid, tid = ev.column("pid"), ev.column("tid")
    corr, stream, device, nbytes = ev.column("corr"), ev.column("stream"), ev.column("device"), ev.column("nbytes")
    cat = ev.column("cat")
    notes = list(ev.notes)
    if base_ns is None and n and int(np.median(ts)) < 10 ** 17:  # before 1973: not epoch µs
        notes.append("no baseTimeNanoseconds and timestamps are not epoch µs: times are relative")
    is_step = np.zeros(n, dtype=bool)
    step_names = np.array([bool(_STEP.match(x)) for x in names], dtype=bool)
    if len(names):
        is_step = step_names[name_code] & (role == _ROLES.index("cpu"))

    parts: list[Part] = []
    # GPU work
    api_rows = np.flatnonzero(role == _ROLES.index("api"))
    launch_row = _correlate(corr, api_rows, corr)
    for r_name in ("kernel", "memcpy", "memset"):
        rows = np.flatnonzero(role == _ROLES.index(r_name))
        if len(rows) == 0:
            continue
        lr = launch_row[rows]
        hit = lr >= 0
        launch = np.where(hit, start[np.where(hit, lr, 0)], MISSING)
        ltid = np.where(hit, tid[np.where(hit, lr, 0)], MISSING)
        # A GPU event's pid is its device and its tid its stream; args.device / args.stream
        # stand in when they are not numbers.
        dev = np.where(pid[rows] >= 0, pid[rows], device[rows])
        dcodes, duniq = dense_codes(np.where(dev >= 0, dev, 0))
        dev_labels = [f"GPU {int(d)}" for d in duniq]
        if (dev < 0).any():
            notes.append(f"{int((dev < 0).sum())} {r_name} events without a device: put on GPU 0")
        strm = np.where(tid[rows] >= 0, tid[rows], stream[rows])
        fn_codes, fn_labels = _function_codes(name_code[rows], names, short=(group == "short" and r_name == "kernel"))
        s, e = start[rows], end[rows]
        cols = {"function": categorical(fn_codes, fn_labels), "kind": constant_categorical(r_name, len(rows)),
                "device": categorical(dcodes, dev_labels), "start_ns": s, "end_ns": e, "busy_ns": e - s,
                "launch_ns": launch, "tid": ltid, "stream": strm, "correlation": corr[rows]}
        if r_name != "kernel":
            cols["bytes"] = nbytes[rows]
        parts.append(Part("activity", cols))
        ev.counts[r_name] = len(rows)
        ev.counts[f"{r_name}_launch_joined"] = int(hit.sum())
    # CPU side: runtime calls and CPU ranges, self time over both on each thread
    cpu_rows = np.flatnonzero((role == _ROLES.index("cpu")) & ~is_step)
    host_rows = np.concatenate((api_rows, cpu_rows))
    if len(host_rows):
        busy = self_time_ns(tid[host_rows], start[host_rows], end[host_rows])
        k = len(api_rows)
        for rows, b, kind in ((api_rows, end[api_rows] - start[api_rows], "api"), (cpu_rows, busy[k:], "cpu")):
            if len(rows) == 0:
                continue
            fn_codes, fn_labels = _function_codes(name_code[rows], names, short=False)
            parts.append(Part("activity", {
                "function": categorical(fn_codes, fn_labels), "kind": constant_categorical(kind, len(rows)),
                "device": constant_categorical("Host", len(rows)), "start_ns": start[rows], "end_ns": end[rows],
                "busy_ns": b, "tid": tid[rows], "correlation": corr[rows]}))
            ev.counts[kind] = len(rows)
    activity = concat_parts("activity", parts, skip)
    if len(activity) == 0:
        found = ", ".join(f"{k}: {v}" for k, v in ev.dropped.items()) or "none"
        raise InputError(f"trace has no GPU kernels, memcpys, runtime calls or CPU ops (skipped: {found})", path=p)
    # markers: ProfilerStep#N and user annotations (host side)
    step_rows = np.flatnonzero(is_step)
    ann_rows = np.flatnonzero((role == _ROLES.index("cpu")) & ~is_step
                              & np.isin(cat, [_CAT_NAMES.index(c) for c in _ANNOTATION_CATS]))
    mparts = []
    for rows, source in ((step_rows, "profiler_step"), (ann_rows, "annotation")):
        if len(rows):
            fn_codes, fn_labels = _function_codes(name_code[rows], names, short=False)
            mparts.append(Part("markers", {"name": categorical(fn_codes, fn_labels), "start_ns": start[rows],
                                           "end_ns": end[rows], "tid": tid[rows],
                                           "source": constant_categorical(source, len(rows))}))
            ev.counts[f"markers_{source}"] = len(rows)
    markers = concat_parts("markers", mparts)
    cat_counts = {_CAT_NAMES[int(c)]: int(k) for c, k in zip(*np.unique(cat, return_counts=True), strict=True) if c < len(_CAT_NAMES)}
    manifest = _manifest(p, ev, header, base_ns, pid, role, tid, activity, notes, cat_counts)
    return RunData(manifest=manifest, activity=activity, samples=empty_table("samples"), markers=markers,
                   path=str(p), notes=notes)


def _function_codes(codes: np.ndarray, names: list[str], short: bool) -> tuple[np.ndarray, list[str]]:
    local, uniq = dense_codes(codes)
    labels = [names[int(u)] for u in uniq]
    if short:
        labels = [short_kernel_name(x) for x in labels]
    return local, labels


def _correlate(corr_all: np.ndarray, api_rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row (into the event columns) of the runtime call with each correlation id, or -1."""
    out = np.full(len(query), -1, dtype=np.int64)
    if len(api_rows) == 0:
        return out
    rc = corr_all[api_rows]
    ok = rc >= 0
    rows, rc = api_rows[ok], rc[ok]
    order = np.argsort(rc, kind="stable")  # the first call of an id wins
    rs = rc[order]
    pos = np.searchsorted(rs, query, side="left")
    pos_c = np.minimum(pos, len(rs) - 1) if len(rs) else pos
    if len(rs):
        hit = (pos < len(rs)) & (rs[pos_c] == query) & (query >= 0)
        out[hit] = rows[order[pos_c[hit]]]
    return out


def _category_era(cat_counts: dict[str, int]) -> str:
    """Which generation of Kineto category names the trace uses (for the manifest)."""
    if any(cat_counts.get(c) for c in ("Kernel", "Runtime", "Operator", "Memcpy", "Memset")):
        return "2021 (Kernel/Runtime/Operator)"
    return "2022+ (kernel/cuda_runtime/cpu_op)"


def _manifest(p: Path, ev: _Events, header: dict[str, Any], base_ns: int | None, pid: np.ndarray, role: np.ndarray,
              tid: np.ndarray, activity: pd.DataFrame, notes: list[str], cat_counts: dict[str, int]) -> dict[str, Any]:
    host = np.isin(role, [_ROLES.index("api"), _ROLES.index("cpu")])
    hp = pid[host]
    hp = hp[hp >= 0]
    pids = sorted(int(x) for x in pd.unique(hp)) if len(hp) else []
    main_pid = None
    if len(hp):
        codes, uniq = dense_codes(hp)
        main_pid = int(uniq[np.argmax(np.bincount(codes))])
    ht = tid[host & (pid == (main_pid if main_pid is not None else -2))]
    tids = sorted(int(x) for x in pd.unique(ht[ht >= 0])) if len(ht) else []
    used = {int(str(d).split()[-1]) for d in activity["device"].unique() if str(d).startswith("GPU ")}
    gpus = []
    for d in header.get("deviceProperties") or []:
        if not isinstance(d, dict):
            continue
        g = {"index": d.get("id"), "name": d.get("name"), "sm_count": d.get("numSms"),
             "memory_total_bytes": d.get("totalGlobalMem"),
             "compute_capability": (f"{d['computeMajor']}.{d['computeMinor']}"
                                    if "computeMajor" in d and "computeMinor" in d else None),
             "uuid": d.get("uuid"), "used": d.get("id") in used}
        gpus.append({k: v for k, v in g.items() if v is not None})
    source = {"kind": "kineto", "path": str(p), "format": "json.gz" if p.suffix == ".gz" else "json",
              "schema_version": header.get("schemaVersion"), "categories": _category_era(cat_counts),
              "reader": ev.path_used, "decoded_bytes": ev.decoded_bytes}
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version"):
        if key in header and isinstance(header[key], (int, float, str)):
            source[key] = header[key]
    target: dict[str, Any] = {"pid": main_pid, "pids": pids, "tids": tids}
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        target["distributed"] = {k: v for k, v in dist.items() if isinstance(v, (int, float, str))}
    relative = any("times are relative" in n for n in notes)
    if base_ns is not None:
        anchors = [{"source": "baseTimeNanoseconds", "base_ns": base_ns}]
    else:
        anchors = [] if relative else [{"source": "ts is epoch µs (no baseTimeNanoseconds)"}]
    clock = {"domain": "trace-relative" if relative else "CLOCK_REALTIME", "anchors": anchors}
    imported = dict(ev.counts)
    imported["notes"] = notes
    return base_manifest(run_name=_run_name(p), source=source, target=target, gpus=gpus, clock=clock,
                         dropped=dict(ev.dropped), **{"import": imported})


def _run_name(p: Path) -> str:
    name = p.name
    for suffix in (".gz", ".json", ".pt.trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or p.stem
