"""One preparation of a pair: `compare`, `tree` and every rank pair of `compare_ranks` plan
their cycles through perfdiff.cycles.prepare.plan_cycles, and get the same plan for the same
pair of runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT
import perfdiff
from perfdiff.cycles import prepare
from perfdiff.model.schema import CycleSource
from perfdiff.parallel import Parallel

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402


@pytest.fixture(scope="module")
def rank_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A normal and an abnormal run of two ranks (Kineto traces with ProfilerStep ranges)."""
    out = tmp_path_factory.mktemp("ranks")
    return gen_ranks.generate(out, ranks=2, kernels=600, steps=12, collectives=2, fmt="kineto")


@pytest.mark.parametrize("cycle", [None, r"ProfilerStep#\d+"])
def test_compare_tree_and_a_rank_pair_make_one_plan(rank_pair: tuple[Path, Path], monkeypatch,
                                                    cycle: str | None) -> None:
    """The plans made for rank 0's pair by compare, by tree and by compare_ranks (whose
    reference pair it is) are one plan; a caller that planned its own way records none."""
    pytest.importorskip("distributed")
    made: list[tuple[str, object]] = []
    plan_cycles = prepare.plan_cycles
    entry = ""

    def spy(offers, choice):
        made.append((entry, plan := plan_cycles(offers, choice)))
        return plan

    monkeypatch.setattr(prepare, "plan_cycles", spy)
    n, a = rank_pair
    rn, ra = n / "rank-0.json", a / "rank-0.json"
    assert rn.is_file() and ra.is_file()
    entry = "compare"
    c = perfdiff.compare(rn, ra, cycle=cycle, parallel=Parallel.serial(), force=True)
    entry = "tree"
    perfdiff.tree(rn, ra, cycle=cycle)
    entry = "ranks"
    r = perfdiff.compare_ranks(n, a, cycle=cycle, workers=1)
    by = {}
    for who, plan in made:
        by.setdefault(who, []).append(plan)
    assert sorted(by) == ["compare", "ranks", "tree"]
    assert len(by["compare"]) == len(by["tree"]) == 1
    assert by["compare"][0] == by["tree"][0] == by["ranks"][0] == c.analysis.plan == r.analysis.plan
    want = CycleSource.PROFILER_STEP if cycle is None else CycleSource.REGEX
    assert c.analysis.plan.source == want
