"""The compiled record decoder of the nsys page reader (src/perfdiff/importers/nsys/_pages.c)
against the numpy one it stands in for: the same columns on real exports and on tables with
every kind of value, and on what it does not read the way numpy does, None (the block goes to
numpy), never another answer or a read outside the file."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL

from perfdiff.importers.nsys import pages
from perfdiff.importers.nsys.pages import PageReader, Unsupported

MOD = pages.compiled()
pytestmark = pytest.mark.skipif(MOD is None, reason="the compiled page reader is not built here (no C compiler)")


def _all_columns(path: Path, pure: bool, monkeypatch: pytest.MonkeyPatch,
                 want: dict[str, list[str]] | None = None) -> dict[str, object]:
    """Every table's columns (those `want` names, for a table it names) as the page reader
    reads them, or why it refused; numpy alone where `pure`."""
    monkeypatch.setenv("PERFDIFF_PURE", "1" if pure else "")
    reader = PageReader.open(path)
    assert reader is not None
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out: dict[str, object] = {}
    try:
        for name, root in con.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'").fetchall():
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
            try:
                out[name] = reader.read_int_columns(int(root), cols, (want or {}).get(name, cols))
            except (Unsupported, IndexError, ValueError) as why:  # the importer falls back to SQL on each
                out[name] = f"{type(why).__name__}: {why}"
    finally:
        con.close()
    return out


def _assert_same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for table in a:
        x, y = a[table], b[table]
        if isinstance(x, str) or isinstance(y, str):
            assert x == y, table
        else:
            assert x.keys() == y.keys() and all(np.array_equal(x[c], y[c]) for c in x), table


@pytest.mark.real
@pytest.mark.parametrize("path", sorted(REAL.rglob("*.sqlite")), ids=lambda p: p.name)
def test_every_table_of_a_real_export_reads_alike(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_same(_all_columns(path, False, monkeypatch), _all_columns(path, True, monkeypatch))


def test_every_kind_of_value_reads_alike_and_as_sqlite_stores_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Integers of every size and sign, NULL, 0 and 1, text and blobs of every length before
    the integers, rows written before a column was added, several B-tree levels; then a
    float, a text value and a row that spills to an overflow page in an integer column."""
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, note TEXT, b INTEGER, c BLOB)")
    rng = np.random.default_rng(7)
    n = 20_000
    edges = [0, 1, -1, 127, 128, -128, -129, 2**15 - 1, -2**15, 2**23 - 1, -2**23, 2**31 - 1, -2**31,
             2**47 - 1, -2**47, 2**63 - 1, -2**63]
    a = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64, endpoint=True)
    a[: len(edges)] = edges
    a[len(edges)::5] = rng.integers(-300, 300, len(a[len(edges)::5]))
    rows = [(int(a[i]), None if i % 13 == 0 else "é" * int(rng.integers(0, 200)),
             None if i % 11 == 0 else int(i % 3), bytes(int(rng.integers(0, 90)))) for i in range(n)]
    con.executemany("INSERT INTO t VALUES (?,?,?,?)", rows)
    con.execute("ALTER TABLE t ADD COLUMN d INTEGER")  # the rows above have no d: NULL
    con.executemany("INSERT INTO t VALUES (?,?,?,?,?)", [(i, "x", i, b"", -i) for i in range(300)])
    con.execute("CREATE TABLE f (a INTEGER, b REAL)")
    con.executemany("INSERT INTO f VALUES (?,?)", [(i, 0.5 if i == 77 else i) for i in range(200)])
    con.execute("CREATE TABLE s (a INTEGER, b INTEGER)")
    con.executemany("INSERT INTO s VALUES (?,?)", [(i, "seven" if i == 5 else i) for i in range(200)])
    con.execute("CREATE TABLE o (a INTEGER, big TEXT, b INTEGER)")
    con.executemany("INSERT INTO o VALUES (?,?,?)", [(i, "y" * (9000 if i == 3 else 5), i) for i in range(50)])
    con.commit()
    con.close()
    ints = {"t": ["a", "b", "d"]}
    compiled, plain = _all_columns(path, False, monkeypatch, ints), _all_columns(path, True, monkeypatch, ints)
    _assert_same(compiled, plain)
    t = compiled["t"]
    assert t["a"].tolist() == [r[0] for r in rows] + list(range(300))
    assert t["b"].tolist() == [-1 if r[2] is None else r[2] for r in rows] + list(range(300))
    assert t["d"].tolist() == [-1] * n + [-i for i in range(300)]
    assert compiled["f"] == "Unsupported: text, blob or float in an integer column"
    assert compiled["s"] == "Unsupported: text, blob or float in an integer column"
    assert compiled["o"] == "Unsupported: rows spill to overflow pages"


def test_blocks_of_a_plain_table_are_read_compiled(tmp_path: Path) -> None:
    """The compiled reader takes the usual rows itself (it does not hand every block back)."""
    path = tmp_path / "k.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE k (start INTEGER, end INTEGER, name INTEGER)")
    con.executemany("INSERT INTO k VALUES (?,?,?)", [(10 * i, 10 * i + 5, i % 7) for i in range(5000)])
    con.commit()
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name='k'").fetchone()[0]
    con.close()
    reader = PageReader.open(path)
    cells = reader.leaf_cells(root)
    raw = MOD.read_cells(reader.buf, cells, np.array([0, 2], dtype=np.int64), reader.usable)
    assert raw is not None
    got = np.frombuffer(raw, dtype=np.int64).reshape(2, -1)
    assert got[0].tolist() == [10 * i for i in range(5000)] and got[1].tolist() == [i % 7 for i in range(5000)]


# ------------------------------------------------------------------------------ literal records

def _varint(v: int) -> bytes:
    """SQLite's varint of v (0 <= v < 2**64)."""
    if v >= 1 << 56:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(out))


def _cell(types: list[int], body: bytes, rowid: int = 1) -> bytes:
    header = b"".join(_varint(t) for t in types)
    hsize = len(header) + 1  # fits one byte in these tests
    record = bytes([hsize]) + header + body
    return _varint(len(record)) + _varint(rowid) + record


def _read(cell: bytes, want: list[int], usable: int = 4096, before: int = 3):
    buf = bytes(before) + cell
    return MOD.read_cells(buf, np.array([before], dtype=np.int64), np.array(want, dtype=np.int64), usable)


def test_each_serial_type_reads_as_sqlite_stores_it() -> None:
    """Types 1-6 (big-endian signed integers of 1, 2, 3, 4, 6, 8 bytes), 8 and 9 (0 and 1, no
    bytes), 0 (NULL); text skipped by its length; columns past the header NULL."""
    ints = [(1, 5), (1, -2), (2, 300), (3, -70000), (4, 2**31 - 1), (5, -(2**40)), (5, 2**47 - 1), (6, -(2**63))]
    size = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
    types = [t for t, _ in ints] + [8, 9, 0, 15, 1]  # then 0, 1, NULL, a text of 1 byte, an integer
    body = b"".join(v.to_bytes(size[t], "big", signed=True) for t, v in ints) + b"x" + bytes([0x80])
    cell = _cell(types, body)
    raw = _read(cell, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 20])
    assert raw is not None
    assert np.frombuffer(raw, dtype=np.int64).tolist() == [v for _, v in ints] + [0, 1, -1, -128, -1, -1]
    assert _read(cell, [11]) is None  # the text is no integer: numpy decides (it refuses)


@pytest.mark.parametrize("types, body, want", [
    ([7], bytes(8), [0]),  # a float
    ([10], b"", [0]),  # reserved
    ([10, 1], b"\x01", [1]),  # reserved before the wanted column
    ([1, 15], b"\x01ab", [1]),  # a blob wanted
    ([4], b"\x00\x01", [0]),  # the value runs past the record
    ([1, 1, 1], b"\x01", [2]),  # the wanted column past the record's end
])
def test_what_numpy_decides_is_handed_back(types: list[int], body: bytes, want: list[int]) -> None:
    assert _read(_cell(types, body), want) is None


def test_a_row_that_spills_or_lies_outside_the_file_is_handed_back() -> None:
    cell = _cell([1, 1], b"\x01\x02")
    assert _read(cell, [1], usable=len(cell) + 30) is None  # payload > usable - 35: overflow pages
    assert _read(cell, [1]) is not None
    for cut in range(len(cell)):  # the file ends inside the cell: never a read past it
        assert _read(cell[:cut], [1]) is None
    outside = MOD.read_cells(cell, np.array([len(cell) + 5, -3], dtype=np.int64), np.array([0], dtype=np.int64),
                             4096)
    assert outside is None


def test_arguments_it_cannot_take_are_one_error() -> None:
    cell = bytes(3) + _cell([1], b"\x01")
    at = np.array([3], dtype=np.int64)
    for want in ([], [1, 0], [-1]):
        with pytest.raises(ValueError, match="read_cells"):
            MOD.read_cells(cell, at, np.array(want, dtype=np.int64), 4096)
    with pytest.raises(ValueError, match="read_cells"):
        MOD.read_cells(cell, b"\x03\x00\x00", np.array([0], dtype=np.int64), 4096)
    misaligned = memoryview(bytearray(1) + at.tobytes())[1:]
    with pytest.raises(ValueError, match="aligned"):
        MOD.read_cells(cell, misaligned, np.array([0], dtype=np.int64), 4096)
    # A page size or a column SQLite never writes: handed back, numpy decides.
    for usable, want in ((-(2**63), 0), (479, 0), (65537, 0), (4096, 40000)):
        assert MOD.read_cells(cell, at, np.array([want], dtype=np.int64), usable) is None
    assert MOD.read_cells(cell, np.zeros(0, dtype=np.int64), np.array([0], dtype=np.int64), 4096) == bytearray()
