"""One nsys import's access to its SQLite export: the connection (read-only), the schema
found, integer columns read the fastest way available (`pages`, else SQL), and what the import
found so far (notes, dropped and imported row counts, the clock's anchor, the process)."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from perfdiff.errors import InputError
from perfdiff.importers.common import Note, TextRepairs, resolve_cores
from perfdiff.importers.nsys.pages import PageReader, Unsupported
from perfdiff.model.schema import MISSING

__all__ = ["KERNEL", "MEMCPY", "MEMSET", "PID_MASK", "RUNTIME", "Export", "connect", "is_null", "open_readonly",
           "time_order"]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
PID_MASK = 0xFFFFFF  # globalPid / globalTid: the pid in bits 24..47, the tid in bits 0..23
_INT64_MAX = 2 ** 63 - 1


def open_readonly(p: Path, *, check_same_thread: bool = True, text: TextRepairs | None = None) -> sqlite3.Connection:
    """The SQLite file at `p`, opened read-only (never created, never written), its text
    decoded leniently: exports hold strings from the target (kernel names, NVTX text) that
    need not be UTF-8 (a surrogate Python wrote with surrogatepass, bytes cut short).  Such
    bytes read as U+FFFD, counted in `text` when given; the names are made valid text beyond
    that where they are read (`strings`, `nvtx`: an environment block holds NULs on purpose).
    sqlite3's errors pass through."""
    # A percent-encoded URI: a "#" or "?" in a file name would otherwise end the path there,
    # and SQLite would open (creating it) the file named by what comes before, beside the
    # input.  Encoded from the path's bytes: a name that is not UTF-8 is still a name.
    con = sqlite3.connect(f"file:{quote(os.fsencode(p.resolve()), safe='/')}?mode=ro", uri=True,
                          check_same_thread=check_same_thread)
    repairs = text if text is not None else TextRepairs()

    def decode(b: bytes) -> str:
        try:
            value = b.decode("utf-8")
        except UnicodeDecodeError:
            repairs.invalid_utf8("strings", b)
            value = b.decode("utf-8", "replace")
        return value

    con.text_factory = decode
    return con


def connect(p: Path, text: TextRepairs | None = None) -> sqlite3.Connection:
    """The SQLite file at `p`, opened read-only (its strings counted in `text` as they are made
    valid, see open_readonly); InputError when it is not one."""
    if not p.exists():
        raise InputError("no such file", path=p)
    if not p.is_file():
        raise InputError("not a file", path=p)
    try:
        with open(p, "rb") as fh:
            magic = fh.read(16)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", path=p) from None
    if magic != b"SQLite format 3\x00":
        raise InputError("not a SQLite file (export the report with `nsys export --type sqlite`)", path=p)
    try:
        # mode=ro: never create, never write; immutable is not used so a live WAL is honoured.
        # check_same_thread=False: the runtime table may be read (or, on fallback, queried)
        # from a helper thread; SQLite is built serialized (sqlite3.threadsafety == 3).
        con = open_readonly(p, check_same_thread=False, text=text)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"not a readable SQLite database ({exc})", path=p) from None
    except UnicodeDecodeError:  # SQLite's own message quotes a damaged schema
        raise InputError("not a readable SQLite database (its schema is damaged)", path=p) from None
    return con


def time_order(cols: dict[str, np.ndarray], priority: list[str]) -> dict[str, np.ndarray]:
    """The rows of `cols` sorted by start, then end, then the other columns in the order of
    `priority`: one order whatever the order of the table's rows.  Exports are not in time
    order from Nsight Systems 2025.6 on, and rows that tie on start (kernels of two streams,
    calls of two threads) would otherwise keep the table's order: every later step (the launch
    join's "first call wins", the categories' order, the report) gives one answer for the
    same rows.  Rows equal in every column read are interchangeable.  `cols` unchanged
    (the same arrays) when the starts already rise strictly (the usual export: no copy)."""
    start = cols.get("start")
    if start is None or len(start) < 2 or bool((start[1:] > start[:-1]).all()):
        return cols
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.flatnonzero(s[1:] == s[:-1])
    if len(tie):
        # Only the rows that tie on start are ordered by the other columns: their positions
        # form runs of equal starts, which a sort with start first keeps in place.
        pos = np.union1d(tie, tie + 1)
        sub = order[pos]
        rest = [c for c in ["end"] + [c for c in priority if c not in ("start", "end")] if c in cols]
        keys = [cols[c][sub] for c in reversed(rest)] + [s[pos]]
        order[pos] = sub[np.lexsort(keys)]
    return {k: v[order] for k, v in cols.items()}


def is_null(col: np.ndarray) -> np.ndarray:
    """Which entries of an object column fetched from SQLite are NULL."""
    return pd.isna(col) if len(col) else np.zeros(0, dtype=bool)


class Export:
    """One import: the connection, the schema found, and the pieces found so far."""

    def __init__(self, con: sqlite3.Connection, path: Path, pid: int | None, group: str,
                 skip: frozenset[str] = frozenset(), cores: int | None = None, text: TextRepairs | None = None):
        self.con = con
        self.text = text if text is not None else TextRepairs()  # the strings made valid text (connect)
        self.path = path
        self.want_pid = pid
        self.refuse_several = False  # SeveralProcesses once a second kernel-launching process shows
        self.group = group
        self.skip = skip
        self.cores = resolve_cores(cores)
        self.tables = {name: int(root or 0) for name, root in
                       con.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'")}
        self._cols: dict[str, list[str]] = {}
        self.dropped: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.notes: list[str] = []
        self.reader = PageReader.open(path)
        self.strings: dict[int, str] = {}  # StringIds
        self.t0: int | None = None  # the session's start, wall-clock ns (None: unknown)
        self.pid: int | None = None  # the process imported
        self.process_counts: dict[int, int] = {}  # pid → GPU activities, of every process with some
        self.name_col: str | None = None  # the kernel table's name column

    # -- schema probing
    def has(self, table: str) -> bool:
        return table in self.tables

    def cols(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')] if self.has(table) else []
        return self._cols[table]

    def read(self, table: str, columns: list[str], where_sql: str = "") -> dict[str, np.ndarray]:
        """Integer columns of `table` as int64 arrays (NULL → MISSING), fastest way available;
        a table of timed rows (a `start` column) in time order (`time_order`)."""
        return time_order(self._read(table, columns, where_sql), columns)

    def _read(self, table: str, columns: list[str], where_sql: str = "") -> dict[str, np.ndarray]:
        present = [c for c in columns if c in self.cols(table)]
        if not where_sql and self.reader is not None:
            try:
                return self.reader.read_int_columns(self.tables[table], self.cols(table), present)
            except Unsupported as why:
                self.notes.append(Note("page-reader-fallback", f"{table}: page reader fell back to SQL ({why})"))
            except (IndexError, ValueError) as exc:  # corrupt pages: let SQLite report it
                self.notes.append(Note("page-reader-fallback",
                                       f"{table}: page reader fell back to SQL ({exc.__class__.__name__})"))
        sel = ", ".join(f'"{c}"' for c in present) or "1"
        rows = self.con.execute(f'SELECT {sel} FROM "{table}" {where_sql}').fetchall()
        out: dict[str, np.ndarray] = {}
        if not present:
            return out
        arr = np.array(rows, dtype=object).reshape(len(rows), len(present))
        for i, c in enumerate(present):
            out[c] = self.ints(arr[:, i], table, c)
        return out

    def ints(self, col: np.ndarray, table: str, column: str, null: int = MISSING) -> np.ndarray:
        """An object column fetched from `table`.`column` as int64 (NULL → `null`); a value
        that is not an integer refuses the file, naming its row (docs/FORMATS.md)."""
        if not len(col):
            return np.zeros(0, np.int64)
        if pd.api.types.infer_dtype(col, skipna=True) not in ("integer", "empty"):
            self.refuse_non_integer(table, column)
        return np.where(is_null(col), null, col).astype(np.int64)

    def refuse_non_integer(self, table: str, column: str, allowed: str = "'integer', 'null'",
                           what: str = "an integer") -> None:
        """InputError naming the first row of `table` whose `column` is not an integer (or NULL)."""
        row = self.con.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") '
                               f"NOT IN ({allowed}) LIMIT 1").fetchone()
        where = f"row {row[0]}: {str(row[1])[:40]!r}" if row else "a value"
        raise InputError(f"{table}.{column} {where} is not {what}", path=self.path)

    def checked(self, rows: list[tuple], table: str, columns: dict[int, str]) -> list[tuple]:
        """`rows` of a small table (GPU info, metric names, NVTX domains), refusing the file
        when the value at position i (column `columns[i]`) is neither an integer nor NULL."""
        for row in rows:
            for i, column in columns.items():
                v = row[i]
                if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                    self.refuse_non_integer(table, column)
        return rows

    def refuse_non_number(self, table: str, column: str) -> None:
        """InputError naming the first row of `table` whose `column` is not a number."""
        self.refuse_non_integer(table, column, "'integer', 'real'", "a number")

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.con.execute(sql, args).fetchall()

    def drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + n

    # -- the clock
    def wall(self, t: np.ndarray) -> np.ndarray:
        if self.t0 is None:
            return t
        self._check_room(t)
        return t + self.t0

    def to_wall(self, t: np.ndarray) -> np.ndarray:
        """`t` (an array this import owns) shifted to wall clock in place: no new memory."""
        if self.t0 is not None:
            self._check_room(t)
            t += self.t0
        return t

    def _check_room(self, t: np.ndarray) -> None:
        """InputError when a time plus the session start lies beyond int64 ns (docs/FORMATS.md)."""
        if len(t) and int(t.max()) > _INT64_MAX - self.t0:
            raise InputError(f"a timestamp of {int(t.max())} ns after the session start lies beyond the "
                             "int64 ns range", path=self.path)
