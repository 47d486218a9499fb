"""The fast Kineto reader: the trace's bytes in, event columns (`Events`) out.

A 1 GB trace cannot go through ``json.loads`` (tens of seconds, several GB of Python
objects).  The reader streams the (decompressed) bytes in blocks (`blocks`) and decodes each
block: it finds every object key (a ``"`` followed by ``:``), recognises the few keys it
needs from the 8 bytes before the colon, anchors each event at its ``"ph"`` key, and decodes
strings and numbers.  Two decoders give the same result: the compiled one (`compiled`, a C
extension, about 1 GB/s of JSON on one core) where it is built, for every block but the
file's last and any block it does not read as numpy does; and numpy's (`numpy_block`, about
150 MB/s), which reads the rest, or everything when the extension is absent or
``PERFDIFF_PURE=1``.  No Python object is made per event.
Two threads decode blocks (both decoders release the GIL in their loops) where the core
budget allows.  The args objects of NCCL kernels, a few among many events, are decoded with
``json`` for their process group.

It relies on what every Kineto writer (and ``json.dump`` of a Kineto trace) does: a complete
event's first key is ``"ph"``, and keys are written ``"key":`` with no space before the colon.
Any complete event that does not follow this, or a number it cannot decode, raises
`NeedSlowPath` and the whole file goes to the general reader (`general`).  It checks the
fields it reads and the document's start and end (`document`; a truncated file is an error),
not every byte of the fields it skips.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import numpy as np

from perfdiff.importers.common import resolve_cores
from perfdiff.importers.kineto import compiled
from perfdiff.importers.kineto.blocks import block_size, blocks
from perfdiff.importers.kineto.document import explain_not_a_trace, parse_header, parse_trailer
from perfdiff.importers.kineto.events import CAT_NAMES, SKIPPED, Events
from perfdiff.importers.kineto.numpy_block import Block as _Block
from perfdiff.importers.kineto.numpy_block import CAT_HASHES as _CAT_HASHES
from perfdiff.importers.kineto.numpy_block import ROLE_OF_CAT as _ROLE_OF_CAT
from perfdiff.importers.kineto.numpy_block import numpy_block, read_process_groups

__all__ = ["FastScan"]

_PAD = 64  # zero bytes after each block, so 8-byte reads never leave the buffer
_FRONT = b" " * 16  # spaces before each block, so reads before a key never leave it either
_ZEROS = b"\0" * _PAD

_WORKERS = 2  # blocks decoded at once (the decoders release the GIL in their loops)


class FastScan:
    """The fast scanner: blocks in, event columns out (see the module docstring).

    The main thread cuts the text into blocks that end just before an event's "{" (found
    with bytes.rfind), two worker threads decode blocks, and results are merged in order.
    """

    def __init__(self, path: Path, cores: int | None = None):
        self.path = path
        self.cores = resolve_cores(cores)
        self.ev = Events()
        self.cat_seen = np.zeros(len(CAT_NAMES) + 1, dtype=np.int64)
        self.rows = 0  # event rows merged so far
        self.compiled = compiled.decoder(_CAT_HASHES, _ROLE_OF_CAT)  # None: numpy only

    def run(self) -> Events:
        carry = b""
        total = 0
        first = True
        head: bytes | None = None
        tail = b""
        # Blocks decoded at once: one on a budget of one core (another run loads beside this
        # one, and a second thread would only compete with it).
        workers = min(_WORKERS, self.cores)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            inflight: deque = deque()
            for pieces in blocks(self.path, block_size(workers)):
                total += sum(len(x) for x in pieces)
                buf = b"".join((_FRONT, carry, *pieces, _ZEROS))  # the block's one copy
                begin, end = len(_FRONT), len(buf) - len(_ZEROS)
                cut = _find_cut(buf, begin, end)
                if cut < 0 and not (first and end - begin > (64 << 20)):
                    carry = buf[begin:end]  # no complete event yet: read more
                    continue
                if cut < 0:  # 64 MB without an event: let the decoder explain the file
                    cut = end
                inflight.append(pool.submit(_scan_block, buf, begin, cut, first, False, self.compiled))
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
            if block.process_groups:
                groups = ev.process_groups
                code = np.array([groups.setdefault(g, len(groups)) for g in block.process_groups], dtype=np.int64)
                ev.add(pg_event=block.pg_event + self.rows, pg_code=code[block.pg_code])
            ev.add(**cols)
            self.rows += len(cols["role"])
        return head


    def _finish(self, head: bytes, tail: bytes, total: int) -> None:
        ev = self.ev
        ev.decoded_bytes = total
        if not ev.role and not tail.strip():
            explain_not_a_trace(self.path, head)
        ev.header.update(parse_header(head))
        ev.header.update(parse_trailer(tail, self.path))
        for i, nm in enumerate(CAT_NAMES):
            if nm in SKIPPED and self.cat_seen[i]:
                ev.drop(f"category {nm} (not imported)", int(self.cat_seen[i]))
        if self.cat_seen[len(CAT_NAMES)]:
            ev.drop("complete events of other categories", int(self.cat_seen[len(CAT_NAMES)]))


def _find_cut(buf: bytes, begin: int, end: int) -> int:
    """Start ("{" or the "ph" key) of the last event in buf[begin:end] that has one before it.

    -1 when the text holds no complete event yet.  A "ph" key is the bytes '"ph"' followed
    by ':' (a string value "ph" is not followed by ':', an escaped one has a backslash).
    """
    pos = buf.rfind(b'"ph"', begin, end)
    fallback = -1  # the last "ph" key, when no "ph" key opens an object
    tries = 0
    while pos > begin:
        j = pos + 4
        while j < end and buf[j] in b" \t\r\n":
            j += 1
        if j < end and buf[j] == 58 and buf[pos - 1] != 92:
            k = pos - 1
            while k > begin and buf[k] in b" \t\r\n":
                k -= 1
            if buf[k] == 123:  # an object's first key: cut before its "{"
                return k if buf.find(b'"ph"', begin, k) >= 0 else -1
            if fallback < 0:  # a "ph" after other keys (a second "ph", metadata): look further
                fallback = pos
            tries += 1
            if tries > 64:  # objects written without "ph" first: the decoder sends them to the general reader
                break
        pos = buf.rfind(b'"ph"', begin, pos)
    return fallback if fallback >= 0 and buf.find(b'"ph"', begin, fallback) >= 0 else -1


def _scan_block(padded: bytes, begin: int, end: int, first: bool, final: bool,
                fast: ModuleType | None = None) -> _Block:
    """Decode the events in padded[begin:end] (whole events, or the file's end when final), by
    the compiled decoder `fast` where given and it reads the block, else with numpy."""
    if fast is not None and not final:
        got = _compiled_block(fast, padded, begin, end, first)
        if got is not None:
            return got
    return numpy_block(padded, begin, end, first, final)


def _compiled_block(fast: ModuleType, padded: bytes, begin: int, end: int, first: bool) -> _Block | None:
    """The block decoded by the compiled decoder (`compiled`); None when it leaves it to numpy."""
    got = fast.scan_block(padded, begin, end)
    if got is None:
        return None
    first_ph, columns, names, seen, n_begin, n_end, no_cat = got
    res = _Block()
    if first:
        res.head = padded[begin:first_ph - 3]
    res.drop("ph B events (begin/end pairs are not read)", n_begin)
    res.drop("ph E events (begin/end pairs are not read)", n_end)
    res.drop("complete events without a category", no_cat)
    res.cat_seen += np.frombuffer(seen, dtype=np.int64)
    cols = {k: np.frombuffer(c, dtype=np.int64) for k, c in zip(compiled.COLUMNS, columns, strict=True)}
    if len(cols["role"]) == 0:
        return res
    res.names = names
    args_at, args_limit = cols.pop("args_at"), cols.pop("args_limit")
    with_args = np.flatnonzero(args_at >= 0)
    read_process_groups(res, padded, cols["name"], with_args, lambda rows: (args_at[rows], args_limit[rows]))
    res.cols = cols
    return res
