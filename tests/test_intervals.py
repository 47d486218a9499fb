"""Self time of nested ranges (perfdiff.intervals): literal cases and a brute-force check."""
from __future__ import annotations

import numpy as np
import pytest

from perfdiff.model.intervals import nesting_parent, self_time_ns


def st(rows: list[tuple[int, int, int]]) -> list[int]:
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return self_time_ns(a[:, 0], a[:, 1], a[:, 2]).tolist()


def test_literal_nested_example() -> None:
    # thread 1: A[0,100] ⊃ B[10,40] ⊃ C[20,30], and D[50,60] in A; thread 2: E[0,10]
    rows = [(1, 0, 100), (1, 10, 40), (1, 20, 30), (1, 50, 60), (2, 0, 10)]
    assert st(rows) == [100 - 30 - 10, 30 - 10, 10, 10, 10]
    a = np.array(rows)
    parent, depth = nesting_parent(a[:, 0], a[:, 1], a[:, 2])
    assert parent.tolist() == [-1, 0, 1, 0, -1]
    assert depth.tolist() == [0, 1, 2, 1, 0]


def test_children_on_other_threads_are_not_subtracted() -> None:
    assert st([(1, 0, 100), (2, 10, 40)]) == [100, 30]


def test_input_order_does_not_matter() -> None:
    rows = [(1, 0, 100), (1, 10, 40), (1, 20, 30), (1, 50, 60), (2, 0, 10)]
    perm = [3, 0, 4, 2, 1]
    got = st([rows[i] for i in perm])
    assert got == [st(rows)[i] for i in perm]


def test_equal_ranges_first_is_parent() -> None:
    # two identical ranges: the first in the input is the parent and keeps no self time
    assert st([(1, 0, 10), (1, 0, 10)]) == [0, 10]


def test_same_start_longer_is_parent() -> None:
    assert st([(1, 0, 5), (1, 0, 10)]) == [5, 5]


def test_touching_ranges_are_siblings() -> None:
    # [0,10] and [10,20] inside [0,20]: neither contains the other
    assert st([(1, 0, 10), (1, 10, 20), (1, 0, 20)]) == [10, 10, 0]


def test_zero_length_range_is_a_child() -> None:
    assert st([(1, 0, 10), (1, 0, 0), (1, 5, 8)]) == [7, 0, 3]
    # ranges are half-open: a zero-length range at a range's end is not inside it
    a = np.array([[1, 0, 10], [1, 10, 10]])
    assert nesting_parent(a[:, 0], a[:, 1], a[:, 2])[0].tolist() == [-1, -1]


def test_overlap_without_nesting_is_clipped_and_never_negative() -> None:
    # A[0,10], B[5,15] starts inside A and outlives it: A loses only the overlap (5).
    # C[12,14] lies in B after A ended; the documented cost: it is subtracted from nothing.
    got = st([(1, 0, 10), (1, 5, 15), (1, 12, 14)])
    assert got == [5, 10, 2]
    assert min(got) >= 0


def test_end_before_start_is_zero_length() -> None:
    assert st([(1, 10, 5), (1, 0, 20)]) == [0, 20]


def test_empty_input() -> None:
    assert self_time_ns(np.array([]), np.array([]), np.array([])).tolist() == []


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError):
        nesting_parent(np.array([1]), np.array([1, 2]), np.array([3, 4]))


def _random_forest(rng: np.random.Generator, threads: int) -> np.ndarray:
    """Properly nested ranges (with shared endpoints and zero-length ones) on a few threads."""
    out: list[tuple[int, int, int]] = []

    def grow(t0: int, t1: int, depth: int, tid: int) -> None:
        if depth > 5 or t1 - t0 < 2:
            return
        k = int(rng.integers(0, 4))
        cuts = np.sort(rng.integers(t0, t1 + 1, 2 * k))
        for i in range(k):
            a, b = int(cuts[2 * i]), int(cuts[2 * i + 1])
            out.append((tid, a, b))
            grow(a, b, depth + 1, tid)

    for tid in range(threads):
        grow(0, 10_000, 0, tid)
    return np.array(out, dtype=np.int64)


def _brute_force(x: np.ndarray) -> np.ndarray:
    """Self time with an explicit stack, ranges sorted as the module defines."""
    res = (x[:, 2] - x[:, 1]).copy()
    order = sorted(range(len(x)), key=lambda i: (x[i, 0], x[i, 1], -x[i, 2], i))
    stack: list[int] = []
    for i in order:
        t, a, b = x[i]
        while stack:
            top = stack[-1]
            tt, ta, tb = x[top]
            # [ta, tb) contains [a, b) when a < tb; a zero-length top contains what
            # starts at its own instant
            if tt == t and ta <= a and b <= tb and (a < tb or ta == tb):
                break
            stack.pop()
        if stack:
            res[stack[-1]] -= b - a
        stack.append(i)
    return res


def test_matches_a_stack_on_random_nested_ranges() -> None:
    rng = np.random.default_rng(7)
    x = _random_forest(rng, threads=40)
    assert len(x) > 200
    got = self_time_ns(x[:, 0], x[:, 1], x[:, 2])
    np.testing.assert_array_equal(got, _brute_force(x))
    # the same with huge thread ids and wall-clock times (no int64 overflow in the keys)
    big = x.copy()
    big[:, 0] = big[:, 0] * (1 << 40) + 12345
    big[:, 1:] += 1_700_000_000_000_000_000
    np.testing.assert_array_equal(self_time_ns(big[:, 0], big[:, 1], big[:, 2]), got)
