"""The memory-pressure verdict on labelled synthetic pairs (tests/memory_pair.py): named when
memory signals rose with host states or CPU-side work; quiet on the null pair, on signals
that cost nothing, and on I/O wait without memory signals."""
from __future__ import annotations

from pathlib import Path

from memory_pair import write_pair

import perfdiff
from perfdiff.analyze.verdict import VerdictCode


def test_memory_pressure_is_named_with_its_signals(tmp_path: Path) -> None:
    c = perfdiff.compare(*write_pair(tmp_path, 1, {}, {"memory": True, "slower": True}))
    v = c.verdict[0]
    assert v.code == VerdictCode.MEMORY_PRESSURE and len(c.verdict) == 1
    names = {c.findings[i].function for i in v.evidence if c.findings[i].function}
    assert {"iowait", "Scheduler.step"} <= names  # oncpu grew with the cycle, keeping its share
    signals = {s.metric: s for s in v.detail.signals}
    assert {"host_pressure_memory_some", "host_swap_in", "process_major_faults", "cgroup_mem_events_max"} <= set(signals)
    assert signals["host_pressure_memory_some"].mean_a > 10 > signals["host_pressure_memory_some"].mean_n
    assert "host_pressure_cpu_some" not in signals and v.tau_pp > 10
    md = c.to_markdown()
    assert "**host memory pressure**: memory limit hits 0.00 → 3.9" in md and "memory stalls (some) 0.29 → 17.9" in md
    assert c.to_json()["verdict"][0]["code"] == "host-memory-pressure"


def test_signals_sampled_within_cycles_count_too(tmp_path: Path) -> None:
    """Sampled faster than half a cycle, the signals are compared as μ per function."""
    c = perfdiff.compare(*write_pair(tmp_path, 9, {"sample_ns": 5_000_000},
                                     {"memory": True, "slower": True, "sample_ns": 5_000_000}))
    assert c.analysis.scope["host_swap_in@Host"] == "func"
    assert [v.code for v in c.verdict] == [VerdictCode.MEMORY_PRESSURE]


def test_null_pair_is_no_material_change(tmp_path: Path) -> None:
    c = perfdiff.compare(*write_pair(tmp_path, 3, {}, {}))
    assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL]


def test_signals_that_slowed_nothing_name_no_class(tmp_path: Path) -> None:
    c = perfdiff.compare(*write_pair(tmp_path, 5, {}, {"memory": True}))
    assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL]


def test_io_wait_without_memory_signals_stays_io_wait(tmp_path: Path) -> None:
    c = perfdiff.compare(*write_pair(tmp_path, 7, {}, {"iowait_ms": 4.0}))
    assert [v.code for v in c.verdict] == [VerdictCode.IO_WAIT]
