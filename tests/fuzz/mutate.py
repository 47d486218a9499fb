"""Damaged copies of the real traces (../shared/data/real): truncation, bit flips, swapped
fields, duplicated keys, odd numbers, and (nsys) cells of the wrong type, deleted and
duplicated rows.  The real traces are cut to excerpts first (their first few hundred events,
in their writers' own layout), so that one case takes milliseconds."""
from __future__ import annotations

import gzip
import random
import re
import shutil
import sqlite3
from pathlib import Path

_PH = re.compile(rb'\{\s*"ph"\s*:')
_FIELD = re.compile(rb'"(\w+)"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)')
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
# JSON escapes of text a report cannot hold: a lone high or low surrogate, a pair reversed,
# control characters, noncharacters.
_BAD_ESCAPES = [b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"\\u0001", b"\\u001b[0m", b"\\u007f",
                b"\\ufffe", b"\\uffff", b"\\ufdd0", b"\\udbff\\udfff\\ud83d"]
_ODD_NUMBERS = [b"1e30", b"-1e30", b"1e999", b"NaN", b"Infinity", b"-0", b"0.0000001", b'"abc"', b"true",
                b"null", b"9223372036854775807", b"99999999999999999999999", b"1.5e-3", b"[]", b"{}"]


def real_traces(real: Path) -> tuple[list[Path], list[Path]]:
    """(Kineto traces, nsys exports) under the folder of real traces."""
    return sorted(real.rglob("*.json.gz")), sorted(real.rglob("*.sqlite"))


def kineto_excerpt(path: Path, events: int = 300) -> bytes:
    """The document of `path` cut after its first `events` events and closed again."""
    raw = gzip.decompress(path.read_bytes())
    starts = [m.start() for m in _PH.finditer(raw, 0, 50_000_000)]
    if len(starts) <= events:
        return raw
    cut = raw.rfind(b"}", 0, starts[events]) + 1
    return raw[:cut] + b"\n]}"


def nsys_excerpt(path: Path, out: Path, rows: int = 300) -> Path:
    """A copy of the export at `path` with at most `rows` rows in each table."""
    tmp = out.with_suffix(".full")
    shutil.copyfile(path, tmp)
    con = sqlite3.connect(tmp)
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in tables:
        if not t.startswith("sqlite_"):
            con.execute(f'DELETE FROM "{t}" WHERE rowid NOT IN (SELECT rowid FROM "{t}" ORDER BY rowid LIMIT {rows})')
    con.commit()
    con.execute(f"VACUUM INTO '{out}'")
    con.close()
    tmp.unlink()
    return out


def mutate_kineto(r: random.Random, doc: bytes) -> tuple[bytes, str]:
    """A damaged copy of the Kineto document `doc`, as (bytes, suffix)."""
    b = bytearray(doc)
    for _ in range(r.choice([1, 1, 1, 2, 3])):
        how = r.random()
        if how < 0.12:  # truncation
            del b[r.randrange(len(b)):]
        elif how < 0.3:  # bit flips
            for _ in range(r.randint(1, 8)):
                i = r.randrange(len(b))
                b[i] ^= 1 << r.randrange(8)
        elif how < 0.5:  # swap the values of two fields of one event
            fields = list(_FIELD.finditer(b, r.randrange(len(b))))[:12]
            if len(fields) >= 2:
                f1, f2 = sorted(r.sample(fields, 2), key=lambda m: m.start())
                v1, v2 = bytes(f1.group(2)), bytes(f2.group(2))
                b[f2.start(2):f2.end(2)] = v1
                b[f1.start(2):f1.end(2)] = v2
        elif how < 0.65:  # a key duplicated with another value
            m = _FIELD.search(b, r.randrange(len(b)))
            if m:
                b[m.end():m.end()] = b", " + m.group(0)[:m.start(2) - m.start()] + r.choice(_ODD_NUMBERS)
        elif how < 0.74:  # an escape a name cannot hold as text put into a string
            m = _STRING.search(b, r.randrange(len(b)))
            if m:
                b[m.start() + 1:m.start() + 1] = r.choice(_BAD_ESCAPES)
        elif how < 0.85:  # an odd number in place of one
            m = _NUMBER.search(b, r.randrange(len(b)))
            if m:
                b[m.start():m.end()] = r.choice(_ODD_NUMBERS)
        elif how < 0.93:  # a span deleted or repeated
            i = r.randrange(len(b))
            j = min(len(b), i + r.randint(1, 200))
            if r.random() < 0.5:
                del b[i:j]
            else:
                b[j:j] = b[i:j]
        else:  # bytes that are not UTF-8, or deep nesting
            i = r.randrange(len(b))
            b[i:i] = r.choice([b"\xff\xfe", b"\xc3", b"[" * 5000, b"\\u12", b"\x00"])
    data = bytes(b)
    if r.random() < 0.2:
        gz = gzip.compress(data, compresslevel=1)
        if r.random() < 0.3:
            gz = gz[:r.randrange(len(gz))]
        return gz, ".json.gz"
    return data, ".json"


def mutate_nsys(r: random.Random, src: Path, dst: Path) -> None:
    """Write a damaged copy of the export `src` to `dst`."""
    shutil.copyfile(src, dst)
    how = r.random()
    if how < 0.5:  # cells of the wrong type, rows deleted or repeated, columns swapped: SQL edits
        con = sqlite3.connect(dst)
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
                  if t.startswith(("CUPTI_", "NVTX_", "OSRT_", "SCHED_", "GPU_METRICS", "TARGET_INFO_S", "StringIds"))]
        for _ in range(r.randint(1, 3)):
            t = r.choice(tables)
            cols = [c[1] for c in con.execute(f'PRAGMA table_info("{t}")')]
            # The seeded generator picks the row (SQLite's random() is not seeded: a case would
            # differ from one process to the next).
            n = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            rowid = con.execute(f'SELECT rowid FROM "{t}" ORDER BY rowid LIMIT 1 OFFSET ?',
                                (r.randrange(n),)).fetchone() if n else None
            if rowid is None or not cols:
                continue
            c1, c2 = r.choice(cols), r.choice(cols)
            kind = r.random()
            try:
                if kind < 0.5:
                    value = r.choice(["abc", 1.5, 1e30, -1, 2 ** 63 - 1, -(2 ** 63), b"\x00\x01", None, "", "12",
                                      float("inf")])
                    con.execute(f'UPDATE "{t}" SET "{c1}" = ? WHERE rowid = ?', (value, rowid[0]))
                elif kind < 0.7:
                    con.execute(f'UPDATE "{t}" SET "{c1}" = "{c2}", "{c2}" = "{c1}" WHERE rowid = ?', rowid)
                elif kind < 0.85:
                    con.execute(f'DELETE FROM "{t}" WHERE rowid % ? = 0', (r.randint(2, 5),))
                else:
                    con.execute(f'INSERT INTO "{t}" SELECT * FROM "{t}" WHERE rowid <= ?', (r.randint(1, 50),))
            except sqlite3.DatabaseError:  # a constraint (NOT NULL, a key): another edit next time
                pass
        con.commit()
        con.close()
        return
    data = bytearray(dst.read_bytes())
    if how < 0.7:  # truncation, at a page boundary or anywhere
        cut = r.randrange(len(data))
        if r.random() < 0.5:
            cut -= cut % 4096
        del data[cut:]
    else:  # bit flips, anywhere past the file header
        for _ in range(r.randint(1, 16)):
            i = r.randrange(100, len(data))
            data[i] ^= 1 << r.randrange(8)
    dst.write_bytes(bytes(data))
