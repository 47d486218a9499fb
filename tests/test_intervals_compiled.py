"""The compiled nesting walk (src/perfdiff/model/_nesting.c) against the numpy code it stands in
for (perfdiff.model.intervals with PERFDIFF_PURE=1): the same parent and depth of every range,
on literal cases, generated ranges of every shape (nested, overlapping without nesting, zero
length, equal, touching, on many threads, with huge ids and times) and real traces' ranges."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import numpy as np
import pytest
from conftest import REAL
from hypothesis import given, settings
from hypothesis import strategies as st

from perfdiff.model import intervals, native

MOD = native.compiled("perfdiff.model._nesting")
pytestmark = pytest.mark.skipif(MOD is None, reason="the compiled nesting walk is not built here (no C compiler)")


@contextlib.contextmanager
def _numpy_only() -> Iterator[None]:
    """PERFDIFF_PURE set for the block (a context manager: hypothesis calls a test many times
    within one fixture)."""
    before = os.environ.get(native.ENV_PURE)
    os.environ[native.ENV_PURE] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[native.ENV_PURE]
        else:
            os.environ[native.ENV_PURE] = before


def _assert_alike(tid, start, end) -> None:
    tid, start, end = (np.asarray(x, np.int64) for x in (tid, start, end))
    assert not native.pure()
    p1, d1 = intervals.nesting_parent(tid, start, end)
    with _numpy_only():
        p2, d2 = intervals.nesting_parent(tid, start, end)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(d1, d2)


def test_literal_ranges_nest_alike() -> None:
    # A parent with two children and a grandchild; a zero-length range at a child's start and
    # at its end; two equal ranges; touching siblings; a range overlapping its parent's end; a
    # second thread; a range ending before it starts.
    tid = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1]
    start = [0, 10, 12, 30, 10, 20, 50, 50, 60, 65, 0, 5, 80]
    end = [100, 20, 15, 40, 10, 20, 60, 60, 70, 120, 10, 5, 70]
    _assert_alike(tid, start, end)
    parent, depth = intervals.nesting_parent(np.array(tid), np.array(start), np.array(end))
    assert parent.tolist()[:4] == [-1, 0, 1, 0] and depth.tolist()[:4] == [0, 1, 2, 1]
    assert parent[7] == 6  # of two equal ranges the first is the parent
    assert parent[11] == 10  # the other thread's own


ranges = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(-5, 40)), min_size=0, max_size=80)


@settings(max_examples=400, deadline=None)
@given(ranges)
def test_any_ranges_nest_alike(rows: list[tuple[int, int, int]]) -> None:
    """Overlapping, nested, equal, zero-length and backwards ranges on a few threads."""
    tid = [r[0] for r in rows]
    start = [r[1] for r in rows]
    end = [r[1] + r[2] for r in rows]
    _assert_alike(tid, start, end)


@settings(max_examples=100, deadline=None)
@given(ranges)
def test_huge_ids_and_times_nest_alike(rows: list[tuple[int, int, int]]) -> None:
    """Thread ids and times whose combined keys overflow int64 (the multi-key sort's path)."""
    tid = [(r[0] << 50) - (1 << 62) for r in rows]
    start = [(1 << 62) + r[1] * (1 << 40) for r in rows]
    end = [s + r[2] * (1 << 40) for s, r in zip(start, rows, strict=True)]
    _assert_alike(tid, start, end)


def test_many_generated_ranges_nest_alike() -> None:
    rng = np.random.default_rng(11)
    n = 200_000
    tid = rng.integers(0, 50, n)
    start = rng.integers(0, 10**9, n)
    end = start + np.where(rng.random(n) < 0.05, 0, rng.integers(1, 10**6, n))
    _assert_alike(tid, start, end)


@pytest.mark.real
def test_a_real_traces_host_ranges_nest_alike() -> None:
    from perfdiff.importers.kineto import import_kineto

    trace = next(REAL.rglob("worker0.1623143089861.pt.trace.json.gz"))
    a = import_kineto(trace).activity
    host = (a["device"].astype(str) == "Host").to_numpy()
    _assert_alike(a["tid"].to_numpy()[host], a["start_ns"].to_numpy()[host], a["end_ns"].to_numpy()[host])


def test_arguments_it_cannot_take_are_one_error() -> None:
    one = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="depth_parent"):
        MOD.depth_parent(one, one[:2], one)
    with pytest.raises(ValueError, match="not sorted"):
        MOD.depth_parent(one, np.array([0, 5, 1], np.int64), np.array([9, 9, 9], np.int64))
    with pytest.raises(ValueError, match="not sorted"):
        MOD.depth_parent(one, one, np.array([0, -1, 0], np.int64))
    misaligned = memoryview(bytearray(1) + one.tobytes())[1:]
    with pytest.raises(ValueError, match="aligned"):
        MOD.depth_parent(misaligned, one, one)
    empty = np.zeros(0, np.int64)
    assert MOD.depth_parent(empty, empty, empty) == (bytearray(), bytearray())
