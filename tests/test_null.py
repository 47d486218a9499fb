"""Null behaviour: two runs from the same distribution give no significant row (docs/STATISTICS.md §4, §9)."""
from __future__ import annotations

from pathlib import Path

import pytest

from generate_cpufreq import generate_run
from test_segment_attribute import segment_cycles
from perfdiff.analyze.compare import compare_runs
from perfdiff.bundle import load_bundle

ALPHA = 0.05


def significant_rows(a: Path, b: Path) -> list[str]:
    """Every (function|metric) whose q ≤ α in any family."""
    na, nb = load_bundle(a), load_bundle(b)
    c = compare_runs(na, nb, segment_cycles(na), segment_cycles(nb), alpha=ALPHA)
    hits = [f"t:{f.name}" for f in c.functions if f.tested and f.q_t <= ALPHA]
    hits += [f"beta:{f.name}" for f in c.functions if f.tested and f.q_beta <= ALPHA]
    hits += [f"mu:{c.functions[m.func].name}:{m.metric}" for m in c.mu if m.q <= ALPHA]
    hits += [f"ctx:{r.metric}@{r.device}" for r in c.context if r.q <= ALPHA]
    return hits


@pytest.mark.slow
def test_twenty_seed_pairs(tmp_path: Path) -> None:
    clean = 0
    report = []
    for k in range(20):
        a = generate_run(tmp_path / f"a{k}", scenario="normal", seed=2 * k + 1, n_cycles=60)
        b = generate_run(tmp_path / f"b{k}", scenario="normal", seed=2 * k + 2, n_cycles=60)
        hits = significant_rows(a, b)
        clean += not hits
        report.append(hits)
    assert clean >= 19, report
