"""Matching one run's collectives across its ranks (perfdiff.ranks.straggler.match_collectives)
on literal rank parts: communicators numbered differently on each rank, a rank that names
none of them, iterations and members missing."""
from __future__ import annotations

import numpy as np

from perfdiff.ranks.groups import UNKNOWN
from perfdiff.ranks.part import EXCESS_KINDS, RankPart
from perfdiff.ranks.records import IdentitySource, RankInput
from perfdiff.ranks.straggler import cycle_waits, match_collectives


def _part(rank: int, cycle: list[int], ord_: list[int], dur: list[int], group: list[int] | None = None,
          labels: tuple[str, ...] = (UNKNOWN,), start: list[int] | None = None, cycles: int = 3) -> RankPart:
    return RankPart(side=0, input=RankInput(rank, f"rank-{rank}.json", IdentitySource.FILE_NAME), declared={},
                    iteration=np.arange(10, 10 + cycles, dtype=np.int64), dur_ns=np.full(cycles, 1_000_000),
                    names=[], kinds=[], own_ns=np.zeros((0, cycles)), excess_ns=np.zeros((len(EXCESS_KINDS), cycles)),
                    coll_cycle=np.array(cycle, dtype=np.int64), coll_ord=np.array(ord_, dtype=np.int64),
                    coll_dur_ns=np.array(dur, dtype=np.int64), offers_plan=True,
                    coll_group=None if group is None else np.array(group, dtype=np.int64), group_labels=labels,
                    coll_start_ns=None if start is None else np.array(start, dtype=np.int64))


def test_communicators_are_matched_by_label_whatever_each_rank_numbers_them() -> None:
    """Rank 0 numbers its communicators (tp, dp), rank 1 (dp, tp): each label's table holds
    both ranks' kernels on it, by iteration and place."""
    r0 = _part(0, [0, 0, 1, 1], [0, 0, 0, 0], [100, 200, 110, 210], group=[0, 1, 0, 1], labels=("tp", "dp"))
    r1 = _part(1, [0, 0, 1, 1], [0, 0, 0, 0], [201, 101, 211, 111], group=[0, 1, 0, 1], labels=("dp", "tp"))
    m = match_collectives([r0, r1], np.array([10, 11]))
    assert sorted(m) == ["dp", "tp"]
    assert m["tp"].to_numpy().tolist() == [[100, 101], [110, 111]]
    assert m["dp"].to_numpy().tolist() == [[200, 201], [210, 211]]
    assert list(m["tp"].columns) == [0, 1] and m["tp"].index.get_level_values("iter").tolist() == [10, 11]


def test_a_rank_that_names_no_communicator_puts_the_run_in_one_group() -> None:
    """Ranks 0 and 1 name theirs, rank 2 none: read as one group of every rank, each kernel
    placed by start time among its rank's kernels of the cycle."""
    r0 = _part(0, [0, 0], [0, 0], [100, 200], group=[0, 1], labels=("tp", "dp"), start=[5, 9])
    r1 = _part(1, [0, 0], [0, 0], [101, 201], group=[1, 0], labels=("dp", "tp"), start=[9, 5])
    r2 = _part(2, [0, 0], [0, 1], [102, 202], start=[5, 9])
    m = match_collectives([r0, r1, r2], np.array([10]))
    assert list(m) == [UNKNOWN]
    assert m[UNKNOWN].to_numpy().tolist() == [[100, 201, 102], [200, 101, 202]]


def test_rows_need_every_member_and_an_iteration_asked_for() -> None:
    """Iteration 12 is not asked for; rank 1 lacks the second kernel of iteration 11: both rows
    go, and the waits are read from what remains."""
    r0 = _part(0, [0, 1, 1, 2], [0, 0, 1, 0], [100, 150, 300, 100])
    r1 = _part(1, [0, 1, 2], [0, 0, 0], [400, 100, 500])
    m = match_collectives([r0, r1], np.array([10, 11]))
    assert m[UNKNOWN].index.tolist() == [(10, 0), (11, 0)]
    waits = cycle_waits([r0, r1], np.array([10, 11]), m)
    np.testing.assert_allclose(waits.to_numpy(), [[0.0, 0.3], [0.05, 0.0]])  # µs: each rank's kernel less the shortest


def test_nothing_to_match() -> None:
    """One rank, or ranks without collectives: no table, no waits."""
    empty = [_part(r, [], [], []) for r in (0, 1)]
    assert match_collectives(empty, np.array([10])) == {}
    assert cycle_waits(empty[:1], np.array([10])).empty and cycle_waits(empty, np.array([10])).empty
