"""Test helper: an nsys export's rows in another order.  From Nsight Systems 2025.6 on, the
exported rows are no longer guaranteed to be in time order; `shuffle_export` writes a copy of
an export whose every table holds its rows in a random order (seeded), its schema (the
CREATE TABLE statements, types, keys) kept.  A table keyed by an INTEGER PRIMARY KEY keeps
its key order (SQLite stores its rows by key); every other table's rows get new rowids in the
new order, as a rewritten export's would."""
from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

__all__ = ["shuffle_export"]


def shuffle_export(src: Path, dst: Path, seed: int | None) -> Path:
    """A copy of the export `src` at `dst` with every table's rows in a random order (`seed`;
    None: rewritten in their own order, the same rows in a file of other bytes).  The rows are
    copied by SQL, so every value keeps its type and bytes (text that is not UTF-8 included)."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    con.create_function("shuffled", 1, lambda rowid: rowid if seed is None else
                        hashlib.blake2b(f"{seed}:{rowid}".encode()).digest(), deterministic=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        for t in tables:
            con.execute(f'CREATE TEMP TABLE shuffling AS SELECT * FROM "{t}" ORDER BY shuffled(rowid)')
            con.execute(f'DELETE FROM "{t}"')
            con.execute(f'INSERT INTO "{t}" SELECT * FROM shuffling')
            con.execute("DROP TABLE shuffling")
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return dst
