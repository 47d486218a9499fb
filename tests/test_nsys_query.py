"""perfdiff.importers.nsys.query.kernel_pids: the processes that launched kernels, read without
a DISTINCT over every kernel where the export holds one process (compare asks it of both
inputs before anything else: at 2 M kernels the DISTINCT took a third longer)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfdiff.importers.nsys import query


def _export(path: Path, pids: list[int | None]) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "globalPid INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?)",
                    [(i, i + 1, p) for i, p in enumerate(pids)])
    con.commit()
    return con


def _global(pid: int, vm: int = 0) -> int:
    return (vm << 48) | (pid << 24) | 7  # hardware id, pid, and a tid's place


@pytest.mark.parametrize("pids, expect", [
    ([], []),
    ([None, None], []),
    ([None, _global(4000), _global(4000)], [4000]),
    ([_global(4000)] * 50 + [_global(3000)], [3000, 4000]),
    ([_global(4000), None, _global(4000, vm=1)], [4000]),  # two globalPids, one pid
])
def test_kernel_pids(tmp_path: Path, pids: list[int | None], expect: list[int]) -> None:
    con = _export(tmp_path / "e.sqlite", pids)
    assert query.kernel_pids(con) == expect
    con.close()


def test_one_process_is_told_without_a_distinct(tmp_path: Path) -> None:
    con = _export(tmp_path / "e.sqlite", [_global(4000)] * 100)
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    assert query.kernel_pids(con) == [4000]
    assert seen and not any("DISTINCT" in s.upper() for s in seen)
    con.close()
