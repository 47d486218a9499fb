"""The decompressed bytes of a trace file, in blocks of about BLOCK bytes, read ahead in a thread.

A gzip file is inflated in that thread (the inflater releases the GIL), so inflating the next
block overlaps scanning this one, by the fastest zlib-compatible inflater installed
(`inflater`: ISA-L's from perfdiff[fast], else zlib-ng's, else zlib).  A decoder on one thread
takes smaller blocks (`block_size`)."""
from __future__ import annotations

import functools
import importlib
import queue
import threading
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from perfdiff.errors import InputError

__all__ = ["BLOCK", "BLOCK_ONE_THREAD", "INFLATERS", "block_size", "blocks", "inflater"]

# zlib-compatible inflaters (decompressobj with max_length, unconsumed_tail, eof), fastest first:
# ISA-L inflates a trace in about half zlib's time (docs/PERFORMANCE.md).
INFLATERS = (("isal", "isal.isal_zlib"), ("zlib-ng", "zlib_ng.zlib_ng"), ("zlib", "zlib"))


@functools.lru_cache(maxsize=None)
def inflater(choice: str | None = None) -> tuple[str, ModuleType]:
    """(name, module) of the inflater to use: `choice` ("isal", "zlib-ng", "zlib") where it is
    installed, else the fastest installed."""
    for name, module in INFLATERS:
        if choice is not None and name != choice:
            continue
        try:
            return name, importlib.import_module(module)
        except ImportError:
            continue
    return "zlib", zlib

BLOCK = 8 << 20  # decompressed bytes per block
# A decoder on one thread runs beside another process loading (a pair's other side, another
# rank): a block and its temporaries then stay in the caches the two share, where 8 MB blocks
# spill to memory and slow both (docs/PERFORMANCE.md).  Two decoder threads keep BLOCK: there
# smaller blocks were no faster.
BLOCK_ONE_THREAD = 2 << 20


def block_size(threads: int) -> int:
    """Decompressed bytes per block for a decoder of `threads` threads."""
    return BLOCK if threads > 1 else min(BLOCK, BLOCK_ONE_THREAD)


def blocks(p: Path, size: int | None = None, inflate: ModuleType | None = None) -> Iterator[list[bytes]]:
    """Decompressed content of `p` as lists of pieces totalling about `size` bytes (BLOCK).

    A gzip file is inflated in a background thread by `inflate` (default: `inflater()`), so
    inflating the next block overlaps scanning this one.
    """
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
    with fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        size = size or BLOCK
        source = _inflate(fh, p, size, inflate or inflater()[1]) if gz else _plain(fh, p, size)
        yield from _prefetch(source)


def _plain(fh: Any, p: Path, size: int) -> Iterator[list[bytes]]:
    while True:
        try:
            data = fh.read(size)
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
        if not data:
            return
        yield [data]


def _inflate(fh: Any, p: Path, block: int, z: ModuleType) -> Iterator[list[bytes]]:
    """Inflated pieces in blocks of exactly `block` bytes (the last shorter): the inflater `z`
    is asked for no more than fills the block, the input it leaves is fed again."""
    d = z.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    pending: list[bytes] = []
    size = 0
    raw = b""
    while True:
        at_end = False
        if not raw:
            try:
                raw = fh.read(1 << 18)
            except OSError as exc:
                raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
            at_end = not raw
        try:
            if at_end:
                out = d.flush()
            else:
                out = d.decompress(raw, block - size)
                raw = d.unconsumed_tail
                if d.eof and d.unused_data:  # concatenated gzip members: the next one starts
                    raw = d.unused_data
                    d = z.decompressobj(wbits=47)
        except (zlib.error, z.error) as exc:
            raise InputError(f"corrupt gzip data ({exc})", path=p) from None
        if out:
            pending.append(out)
            size += len(out)
        if size >= block or (at_end and pending):
            yield pending
            pending, size = [], 0
        if at_end:
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
        while True:  # a reader that stopped early: free the producer's put at once
            try:
                q.get_nowait()
            except queue.Empty:
                break
        t.join(timeout=5)

