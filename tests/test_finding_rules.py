"""The findings' rules are one ordered table (perfdiff.analyze.findings.RULES): its order is
the findings' order, stated once, and every finding code but IDENTICAL has its rule."""
from __future__ import annotations

import perfdiff
from conftest import EXAMPLES

from perfdiff.analyze import evidence as ev
from perfdiff.analyze.findings import RULES, FindingCode
from perfdiff.analyze.totals import TOTALS_RULES


def test_the_rule_table_states_the_findings_order() -> None:
    assert [r.code for r in RULES] == [
        FindingCode.CYCLE_TIME, FindingCode.LOAD, FindingCode.MIX_CHANGE, FindingCode.DEVICE_WIDE, FindingCode.REPLACED, FindingCode.CAUSE,
        FindingCode.NO_CAUSE,
        FindingCode.NEGLIGIBLE, FindingCode.PROPORTIONAL, FindingCode.COMMON_MODE, FindingCode.SYMPTOM,
        FindingCode.RESOURCE, FindingCode.METRIC_WHILE, FindingCode.EVENT, FindingCode.KERNEL_SWAP,
        FindingCode.OPPOSITE, FindingCode.CYCLES_NEEDED]
    # A pair compared by totals has a table of its own: the step, then what replaced what,
    # the launch structure, the per-call tests, what vanished and what is new.
    assert [r.code for r in TOTALS_RULES] == [
        FindingCode.STEP_CHANGE, FindingCode.REPLACED, FindingCode.LAUNCH_STRUCTURE, FindingCode.PER_CALL,
        FindingCode.PER_CALL_NONE, FindingCode.VANISHED, FindingCode.NEW]
    # IDENTICAL is no rule: identical inputs have that one finding and nothing else.
    assert {r.code for r in RULES} | {r.code for r in TOTALS_RULES} == set(FindingCode) - {FindingCode.IDENTICAL}


def test_findings_come_in_the_tables_order() -> None:
    c = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    order = [r.code for r in RULES]
    codes = [x.code for x in c.findings]
    assert codes[0] == FindingCode.CYCLE_TIME and len(set(codes)) > 3
    assert [order.index(x) for x in codes] == sorted(order.index(x) for x in codes)


EVIDENCE = {
    FindingCode.CYCLE_TIME: ev.CycleTimeEvidence, FindingCode.LOAD: ev.LoadEvidence,
    FindingCode.MIX_CHANGE: ev.MixEvidence,
    FindingCode.DEVICE_WIDE: ev.DeviceWideEvidence, FindingCode.CAUSE: ev.CauseEvidence,
    FindingCode.NO_CAUSE: ev.NoCauseEvidence, FindingCode.NEGLIGIBLE: ev.NegligibleEvidence,
    FindingCode.PROPORTIONAL: type(None), FindingCode.COMMON_MODE: ev.CommonModeEvidence,
    FindingCode.SYMPTOM: ev.SymptomEvidence, FindingCode.RESOURCE: ev.MetricEvidence,
    FindingCode.METRIC_WHILE: ev.MetricEvidence, FindingCode.EVENT: ev.EventEvidence,
    FindingCode.KERNEL_SWAP: ev.KernelSwapEvidence, FindingCode.OPPOSITE: ev.OppositeEvidence,
    FindingCode.CYCLES_NEEDED: ev.CyclesNeededEvidence, FindingCode.IDENTICAL: type(None),
    FindingCode.REPLACED: ev.ReplacedEvidence, FindingCode.STEP_CHANGE: ev.StepChangeEvidence,
    FindingCode.PER_CALL: ev.PerCallEvidence, FindingCode.PER_CALL_NONE: ev.PerCallNoneEvidence,
    FindingCode.LAUNCH_STRUCTURE: ev.LaunchStructureEvidence, FindingCode.VANISHED: ev.TotalsEvidence,
    FindingCode.NEW: ev.TotalsEvidence,
}


def test_every_finding_states_its_own_evidence_record() -> None:
    """Each code's evidence is its record (none for those resting on `related` alone)."""
    assert set(EVIDENCE) == set(FindingCode)
    for pair in ("cpufreq", "contention"):
        c = perfdiff.compare(EXAMPLES / pair / "normal", EXAMPLES / pair / "abnormal")
        for x in c.findings:
            assert type(x.evidence) is EVIDENCE[x.code], (x.code, x.evidence)
