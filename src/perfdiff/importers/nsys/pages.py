"""Integer columns of a SQLite table decoded straight from the file's B-tree pages with numpy.

SQLite's row-by-row engine with a Python tuple per row is slow at millions of rows; this
reads an export's integer tables (kernels, runtime calls, memcpy, OSRT, scheduling) a whole
column at a time (docs/PERFORMANCE.md has the figures).  Anything it does not handle (a live WAL file,
overflow pages, non-integer values, corrupt pages) raises `Unsupported` and the caller
falls back to a plain SELECT, which also reports a damaged file.  The file is mapped
read-only, never written.

The rows' records are decoded by ``_pages`` (``_pages.c``, an optional C extension built at
install where a compiler is present) a block of rows at a time; a block it does not read the
way this module does comes back to numpy, which decides, so both give the same columns.
``PERFDIFF_PURE=1`` in the environment makes the reader use numpy only.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from types import ModuleType

import numpy as np

from perfdiff.model import native
from perfdiff.model.schema import MISSING

__all__ = ["PageReader", "Unsupported", "compiled"]


def compiled() -> ModuleType | None:
    """The compiled record decoder (`_pages`); None where it is not built or PERFDIFF_PURE is set."""
    return native.compiled("perfdiff.importers.nsys._pages")


class Unsupported(Exception):
    """The page reader met something it does not decode; the caller falls back to SQL."""


_SERIAL_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)


class PageReader:
    """Decodes integer columns of a SQLite table straight from its B-tree pages with numpy.

    SQLite file format (sqlite.org/fileformat2.html): the table's root page leads through
    interior pages (type 5: child page numbers) to leaf pages (type 13) whose cells hold
    (payload length varint, rowid varint, record).  A record is a header of serial-type
    varints then the values, big-endian.  Every step is done for all pages or all rows at
    once.  Tables whose rows spill to overflow pages, non-integer values in a requested
    column, and databases with a live WAL file raise `Unsupported`.
    """

    def __init__(self, buf: mmap.mmap, size: int):
        self.buf = buf
        self.u8 = np.frombuffer(buf, dtype=np.uint8)
        self.size = size
        hdr = bytes(self.u8[:100])
        ps = int.from_bytes(hdr[16:18], "big")
        self.page_size = 65536 if ps == 1 else ps
        self.usable = self.page_size - hdr[20]
        # Big-endian 8-byte words starting at every byte (unaligned view, no copy).
        self.be8 = np.ndarray(shape=(max(size - 7, 0),), dtype=">i8", buffer=buf, offset=0, strides=(1,))
        self.le8 = np.ndarray(shape=(max(size - 7, 0),), dtype="<u8", buffer=buf, offset=0, strides=(1,))
        self.be2 = np.ndarray(shape=(max(size - 1, 0),), dtype=">u2", buffer=buf, offset=0, strides=(1,))
        self.be4 = np.ndarray(shape=(max(size - 3, 0),), dtype=">u4", buffer=buf, offset=0, strides=(1,))

    @classmethod
    def open(cls, path: Path) -> "PageReader | None":
        wal = Path(str(path) + "-wal")
        try:
            if wal.exists() and wal.stat().st_size > 0:
                return None  # rows may live in the WAL: let SQLite read them
            size = os.path.getsize(path)
            if size < 512:
                return None
            with open(path, "rb") as fh:
                # MAP_POPULATE maps every page in one call: the reader touches most of the
                # file, and one fault per 4 KiB page costs more than the reading itself.
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                buf = mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
            return cls(buf, size)
        except (OSError, ValueError):
            return None

    # -- primitive readers (vectorised over positions)
    def _be(self, pos: np.ndarray, nbytes: int) -> np.ndarray:
        """Unsigned big-endian integers of 2 or 4 bytes at each position (page headers)."""
        view = self.be2 if nbytes == 2 else self.be4
        return view[pos].astype(np.int64)

    def _word(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each position as a little-endian uint64 (zero-padded past the end)."""
        if len(pos) == 0 or int(pos.max()) <= self.size - 8:
            return self.le8[pos]
        tail = pos > self.size - 8
        w = self.le8[np.where(tail, 0, pos)]
        i = np.flatnonzero(tail)
        w[i] = self._padded(pos[i], big_endian=False)
        return w

    def _varint_len(self, pos: np.ndarray) -> np.ndarray:
        """Length in bytes of the SQLite varint at each position (1..9)."""
        z = ~self._word(pos) & np.uint64(0x8080808080808080)  # bytes whose high bit is clear
        low = z & (~z + np.uint64(1))  # lowest such byte (little-endian: the first one)
        n = (np.bitwise_count(low - np.uint64(1)).astype(np.int64) + 1) >> 3
        return np.where(z == 0, 9, n)

    def _varint(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, length in bytes) of the SQLite varint at each position."""
        b = self.u8[pos].astype(np.int64)
        if not (b & 0x80).any():
            return b, np.ones(len(pos), dtype=np.int64)
        val = b & 0x7F
        length = np.ones(len(pos), dtype=np.int64)
        going = (b & 0x80) != 0
        for k in range(1, 9):
            idx = np.flatnonzero(going)
            if len(idx) == 0:
                break
            nb = self.u8[pos[idx] + k].astype(np.int64)
            if k == 8:  # the ninth byte contributes all 8 bits
                val[idx] = (val[idx] << 8) | nb
                going[idx] = False
            else:
                val[idx] = (val[idx] << 7) | (nb & 0x7F)
                going[idx] = (nb & 0x80) != 0
            length[idx] += 1
        return val, length

    def _check_pages(self, pages: np.ndarray) -> None:
        if len(pages) and (pages.min() < 1 or (pages.max()) * self.page_size > self.size):
            raise Unsupported("page number outside the file")

    # -- B-tree walk
    def leaf_cells(self, root: int) -> np.ndarray:
        """File offsets of every cell of the table rooted at `root`, in rowid order."""
        pages = np.array([root], dtype=np.int64)
        for _ in range(64):  # a B-tree deeper than 64 levels is not a SQLite file
            self._check_pages(pages)
            base = (pages - 1) * self.page_size
            hoff = base + np.where(pages == 1, 100, 0)
            typ = self.u8[hoff]
            ncell = self._be(hoff + 3, 2)
            if (typ == 13).all():
                leaf = True
            elif (typ == 5).all():
                leaf = False
            else:
                raise Unsupported("mixed or non-table B-tree pages")
            total = int(ncell.sum())
            owner = np.repeat(np.arange(len(pages)), ncell)
            within = np.arange(total) - np.repeat(np.cumsum(ncell) - ncell, ncell)
            head = 8 if leaf else 12
            ptr_pos = hoff[owner] + head + 2 * within
            offset = self._be(ptr_pos, 2)
            # A damaged page: cells must lie after the cell pointers and inside the usable page.
            if total and ((offset < (hoff - base)[owner] + head + 2 * ncell[owner]).any()
                          or (offset > self.usable - 4).any()):
                raise Unsupported("a cell outside its page")
            cells = base[owner] + offset
            if leaf:
                return cells
            child = self._be(cells, 4)
            right = self._be(hoff + 8, 4)
            # children in key order: each page's cells, then its right-most pointer
            key = np.concatenate((owner * (1 << 20) + within, np.arange(len(pages)) * (1 << 20) + (1 << 20) - 1))
            pages = np.concatenate((child, right))[np.argsort(key, kind="stable")]
        raise Unsupported("B-tree too deep")

    def read_int_columns(self, root: int, table_cols: list[str], want: list[str]) -> dict[str, np.ndarray]:
        """The integer columns `want` of a table (its columns in order: `table_cols`)."""
        cells = self.leaf_cells(root)
        n = len(cells)
        out = {c: np.empty(n, dtype=np.int64) for c in want}
        if n == 0 or not want:
            return out
        need = {table_cols.index(c): c for c in want}
        fast = compiled()
        cols = np.array(sorted(need), dtype=np.int64)
        # Blocks of rows small enough for the temporaries to stay in cache.
        for lo in range(0, n, _BLOCK):
            block = np.ascontiguousarray(cells[lo:lo + _BLOCK], dtype=np.int64)
            raw = fast.read_cells(self.buf, block, cols, self.usable) if fast is not None else None
            if raw is not None:
                values = np.frombuffer(raw, dtype=np.int64).reshape(len(cols), len(block))
                for k, col in enumerate(cols.tolist()):
                    out[need[col]][lo:lo + len(block)] = values[k]
                continue
            got = self._read_block(block, need)
            for name, values in got.items():
                out[name][lo:lo + len(values)] = values
        return out

    def _read_block(self, cells: np.ndarray, need: dict[int, str]) -> dict[str, np.ndarray]:
        payload, l1 = self._varint(cells)
        if payload.max() > self.usable - 35:
            raise Unsupported("rows spill to overflow pages")
        rec = cells + l1 + self._varint_len(cells + l1)  # record start (after the rowid)
        rec_end = rec + payload
        hsize = self.u8[rec].astype(np.int64)
        last = max(need)
        if not (hsize.max() < 128 and int(hsize.min()) >= last + 2):
            return self._read_general(rec, rec_end, need)
        # Fast path: serial types up to `last` are one byte each (no long text before them):
        # read them 8 at a time as little-endian words; byte c of word k = column 8k + c.
        words = [self._word(rec + 1 + 8 * k).view(np.uint8).reshape(-1, 8) for k in range(last // 8 + 1)]
        tail_safe = int(rec_end.max()) + 8 <= self.size  # no value within 8 bytes of the file end
        offset = rec + hsize  # where the next column's value starts
        out: dict[str, np.ndarray] = {}
        for col in range(last + 1):
            st = words[col >> 3][:, col & 7]  # a strided view: no copy
            if int(st.max()) >= 128:  # a multi-byte serial type (long text): columns shift
                return self._read_general(rec, rec_end, need)
            if col in need:
                out[need[col]] = self._values(st, offset, tail_safe)
            if col < last:
                offset = offset + _SIZE_LUT[st]
        return out

    def _read_general(self, rec: np.ndarray, rec_end: np.ndarray, need: dict[int, str]) -> dict[str, np.ndarray]:
        """Record decoding one column at a time with full varints (multi-byte serial types)."""
        n = len(rec)
        hsize, l3 = self._varint(rec)
        hdr_end = rec + hsize
        cursor = rec + l3
        body = rec + hsize
        offset = np.zeros(n, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for col in range(max(need) + 1):
            present = cursor < hdr_end  # rows written before an ALTER TABLE ADD COLUMN lack it
            st, ln = self._varint(np.where(present, cursor, rec))
            st = np.where(present, st, 0)
            cursor = cursor + np.where(present, ln, 0)
            if col in need:
                out[need[col]] = self._values(st, body + offset)
            if ((st == 10) | (st == 11)).any():
                raise Unsupported("reserved serial type")
            offset += np.where(st >= 12, (st - 12) >> 1, _SERIAL_SIZE[np.clip(st, 0, 11)])
        if (body + offset > rec_end).any():
            raise Unsupported("record longer than its payload")
        return out

    def _values(self, st: np.ndarray, pos: np.ndarray, tail_safe: bool = False) -> np.ndarray:
        """Signed big-endian integers of serial types `st` stored at file offsets `pos`."""
        lo, hi = int(st.min()), int(st.max())
        if lo == hi and lo in (0, 8, 9):  # the whole column is NULL, 0 or 1 (no bytes stored)
            return np.full(len(st), {0: MISSING, 8: 0, 9: 1}[lo], dtype=np.int64)
        if hi >= 7 and _BAD_INT[st].any():
            raise Unsupported("text, blob or float in an integer column")
        if not tail_safe and int(pos.max()) > self.size - 8:  # a value in the last 8 bytes
            tail = pos > self.size - 8
            raw = self.be8[np.where(tail, 0, pos)].astype(np.int64)
            i = np.flatnonzero(tail)
            raw[i] = self._padded(pos[i], big_endian=True).view(np.int64)
        else:
            raw = self.le8[pos].byteswap().view(np.int64)  # native gather, then swap: faster
        # Arithmetic shift right: keeps the value's `size` leading bytes, extends the sign.
        if lo == hi:
            raw >>= _SHIFT_LUT[lo]
        else:
            raw >>= _SHIFT_LUT[st]
        if lo == 0 or hi >= 8:
            np.putmask(raw, st == 8, 0)
            np.putmask(raw, st == 9, 1)
            np.putmask(raw, st == 0, MISSING)
        return raw

    def _padded(self, pos: np.ndarray, big_endian: bool) -> np.ndarray:
        """8 bytes at each position as uint64, zero bytes past the end of the file."""
        out = np.zeros(len(pos), dtype=np.uint64)
        for k in range(8):
            byte = np.where(pos + k < self.size, self.u8[np.minimum(pos + k, self.size - 1)], 0).astype(np.uint64)
            out |= byte << np.uint64(8 * (7 - k) if big_endian else 8 * k)
        return out


# serial type → byte size (types ≥ 12 are blobs/text of (t-12)//2 bytes), shift that keeps
# that many bytes of a big-endian 8-byte word, and "not an integer" flags.
_SIZE_LUT = np.array([_SERIAL_SIZE[t] if t < 12 else (t - 12) >> 1 for t in range(256)], dtype=np.int64)
_SHIFT_LUT = np.array([64 - 8 * int(_SERIAL_SIZE[t]) if 1 <= t <= 6 else 0 for t in range(256)], dtype=np.int64)
_BLOCK = 1 << 17  # rows per block of the page reader
_BAD_INT = np.array([t == 7 or t >= 10 for t in range(256)], dtype=bool)
