"""The verdict's rules are one table (perfdiff.analyze.verdict.RULES): its order is the
priority, stated once; a cause goes to the first rule that claims it."""
from __future__ import annotations

import pytest
from conftest import EXAMPLES

import perfdiff
from perfdiff.analyze import verdict
from perfdiff.analyze.verdict import RULES, VerdictCode, build_verdict


def test_the_rule_table_states_the_priority() -> None:
    assert [r.name for r in RULES] == [
        "different-hardware", "cpu-clock", "gpu-device-wide", "input-pipeline", "cpu-quota", "memory-pressure", "cpu-contention",
        "io-wait", "launch-bound", "added-sync", "implementation-swapped", "launch-structure", "new-work", "other-process", "collectives", "gpu-kernels",
        "transfer", "cpu-work", "host-wide", "gpu-throttle-held", "load", "mix", "swapped-alone", "no-material"]
    assert {code for r in RULES for code in r.codes} == set(VerdictCode)
    assert [r.name for r in RULES if r.merges] == ["host-wide"]


def test_a_cause_goes_to_the_first_rule_that_claims_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU clock fell: its rule, first, claims the CPU-side causes.  Put the CPU-work rule
    first and it claims them instead: the order of the table, and nothing else, decides."""
    c = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    codes = [v.code for v in c.verdict]
    assert codes[0] == VerdictCode.CPU_CLOCK and VerdictCode.CPU_WORK not in codes
    clock = c.verdict[0]
    work_first = tuple(sorted(RULES, key=lambda r: r.name != "cpu-work"))
    monkeypatch.setattr(verdict, "RULES", work_first)
    swapped = build_verdict(c.analysis, list(c.findings))
    work = next(v for v in swapped if v.code == VerdictCode.CPU_WORK)
    assert set(work.evidence) & set(clock.evidence) and VerdictCode.CPU_CLOCK not in [v.code for v in swapped]


def test_the_clock_states_its_unit() -> None:
    """The renderer reads the clock's unit from the class, never from the size of the number."""
    c = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    detail = c.verdict[0].detail
    assert isinstance(detail, verdict.CpuClockDetail) and detail.clock.unit == "%"
