"""The CI gate's decision in words (perfdiff.analyze.gate_records): one line for standard
error, a block of the report, a JUnit XML file, and the report's first screen for a CI job's
summary (docs/CI.md).  The numbers are the decision's; this only words, rounds and escapes.
"""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from perfdiff.analyze.gate_records import GateCheck, GateDecision, GateMetric, GateOutcome, GateReason, GateTest
from perfdiff.render.text import fmt_p, fmt_pct, fmt_time_us, md_escape
from perfdiff.render.wording import (GATE_METRIC_WORDS, GATE_OUTCOME_WORDS, GATE_REASON_WORDS, GATE_TEST_WORDS)

__all__ = ["first_screen", "gate_line", "gate_section", "junit_xml", "verdict_of"]

ALLOWED = "passed on purpose (--allow-inconclusive)"


def _plain(text: str) -> str:
    """A user string on one line of plain text (standard error, an XML attribute)."""
    return " ".join(str(text).split())


def _subject(ch: GateCheck, md: bool) -> str:
    """What the check judged: "mean cycle", or "own time per cycle of NAME (DEVICE)"."""
    words = GATE_METRIC_WORDS[ch.metric]
    if ch.metric is not GateMetric.FUNCTION:
        return words
    if not ch.function:
        return f"functions matching **{md_escape(ch.pattern)}**" if md else f"functions matching {_plain(ch.pattern)}"
    name, device = (md_escape(ch.function), md_escape(ch.device)) if md else (_plain(ch.function),
                                                                              _plain(ch.device))
    return f"{words} {'**' if md else ''}{name}{'**' if md else ''} ({device})"


def _interval(ch: GateCheck) -> str:
    """", 95 % CI lo…hi" of the change, or nothing where unknown."""
    if not (math.isfinite(ch.lo_pct) and math.isfinite(ch.hi_pct)):
        return ""
    return f", 95 % CI {fmt_pct(ch.lo_pct, 1)}…{fmt_pct(ch.hi_pct, 1)}"


def _test(ch: GateCheck) -> str:
    """The test and its outcome: "Welch's t test p 0.003", "both runs' 95 % CIs of the P95 apart"."""
    words = GATE_TEST_WORDS[ch.test]
    if ch.test is GateTest.QUANTILE_CI:
        return f"{words} {'apart' if ch.lo_pct > 0 else 'overlap'}"  # lo_pct > 0: A's lower bound above N's upper
    return f"{words} {fmt_p(ch.p)}" if ch.test is GateTest.FUNCTION_Q else f"{words} p {fmt_p(ch.p)}"


def _numbers(ch: GateCheck) -> str:
    """"10 ms → 19.6 ms (+96.0%, 95 % CI …; Welch's t test p <0.001)"."""
    return (f"{fmt_time_us(ch.n_us)} → {fmt_time_us(ch.a_us)} ({fmt_pct(ch.change_pct, 1)}{_interval(ch)}; "
            f"{_test(ch)})")


def check_text(ch: GateCheck, decision: GateDecision, md: bool = False) -> str:
    """One check in words: what, its numbers, the outcome and why (`md`: Markdown, escaped)."""
    subject = _subject(ch, md)
    outcome = GATE_OUTCOME_WORDS[ch.outcome]
    if md:
        outcome = f"**{outcome}**"
    why = GATE_REASON_WORDS[ch.reason]
    if ch.reason is GateReason.TOO_FEW_CYCLES:
        why += f" ({ch.cycles_n:,} and {ch.cycles_a:,} cycles" + (f"; it needs at least {ch.needed:,} a run)"
                                                                   if ch.needed else ")")
    if ch.outcome is GateOutcome.CANNOT_JUDGE:
        allowed = f", {ALLOWED}" if decision.allow_inconclusive else ""
        numbers = (f" {fmt_time_us(ch.n_us)} → {fmt_time_us(ch.a_us)} ({fmt_pct(ch.change_pct, 1)})"
                   if math.isfinite(ch.n_us) and math.isfinite(ch.a_us) else "")
        return f"{subject}{numbers}: {outcome}{allowed}: {why}"
    return f"{subject} {_numbers(ch)}: {outcome}: {why}"


def _head(decision: GateDecision) -> str:
    """"regression", "pass", "cannot judge", or "cannot judge, passed on purpose (…)"."""
    head = GATE_OUTCOME_WORDS[decision.outcome]
    return f"{head}, {ALLOWED}" if decision.allowed else head


def _rule(decision: GateDecision) -> str:
    """The threshold and the significance level the checks were judged by."""
    alpha = decision.checks[0].alpha if decision.checks else math.nan
    return f"--fail-on {decision.threshold_pct:g}%, α {alpha:g}"


def gate_line(decision: GateDecision) -> str:
    """The decision on one line of plain text (standard error): the outcome, the threshold and
    α, then each check with its numbers, test and reason."""
    cs = decision.checks
    if (len(cs) > 1 and all(ch.outcome is GateOutcome.CANNOT_JUDGE and not math.isfinite(ch.n_us) for ch in cs)
            and len({(ch.reason, ch.needed) for ch in cs}) == 1):  # one reason for all: said once
        checks = f"{', '.join(_subject(ch, False) for ch in cs)}: {check_text(cs[0], decision).split(': ', 1)[1]}"
    else:
        checks = "; ".join(check_text(ch, decision) for ch in cs)
    return f"gate {_head(decision)} ({_rule(decision)}): {checks}"


def gate_section(decision: GateDecision) -> str:
    """The decision as a block of the Markdown report: a head line and one item per check."""
    lines = [f"**CI gate: {_head(decision)}** ({md_escape(_rule(decision))}):", ""]
    lines += [f"- {check_text(ch, decision, md=True)}." for ch in decision.checks]
    return "\n".join(lines)


def _unescape(md: str) -> str:
    """A Markdown line as plain text: its escapes and emphasis removed."""
    return re.sub(r"\\(.)", r"\1", md.replace("**", ""))


def verdict_of(markdown: str, most: int = 3) -> list[str]:
    """The report's verdict, its first `most` lines as plain text: the "**Verdict:**" line's
    head (where it has one) and its items."""
    lines = markdown.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.startswith("**Verdict:**")), None)
    if at is None:
        return []
    head = lines[at][len("**Verdict:**"):].strip()
    out = [head] if head else []
    for ln in lines[at + 1:]:
        if ln.startswith("- "):
            out.append(ln[2:])
        elif ln.strip() and out:
            break
    return [_unescape(x) for x in out[:most]]


def junit_xml(decision: GateDecision, suite: str, report: str = "") -> bytes:
    """The decision as JUnit XML (the element and attribute set CI tools read: Jenkins'
    junit-10.xsd, GitHub and GitLab test reports): one `testsuite` named `suite`, one
    `testcase` per check; a regression is a `failure`, a check that cannot judge a `failure`
    too, or `skipped` where --allow-inconclusive passes it.  A failure's message is the check's
    line; its text adds the verdict's first lines (from `report`, the Markdown report)."""
    verdict = verdict_of(report)
    cases = []
    failures = skipped = 0
    for ch in decision.checks:
        case = ET.Element("testcase", {"classname": "perfdiff.gate", "name": _case_name(ch), "time": "0"})
        text = check_text(ch, decision)
        if ch.outcome is GateOutcome.REGRESSION or (ch.outcome is GateOutcome.CANNOT_JUDGE
                                                      and not decision.allow_inconclusive):
            failures += 1
            el = ET.SubElement(case, "failure", {"type": str(ch.outcome), "message": text})
            el.text = "\n".join([text, *verdict])
        elif ch.outcome is GateOutcome.CANNOT_JUDGE:
            skipped += 1
            ET.SubElement(case, "skipped", {"type": str(ch.outcome), "message": text})
        else:
            ET.SubElement(case, "system-out").text = text
        cases.append(case)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}
    root = ET.Element("testsuites", {"name": "perfdiff", **counts, "time": "0"})
    ts = ET.SubElement(root, "testsuite", {"name": _plain(suite), **counts, "skipped": str(skipped), "time": "0"})
    ts.extend(cases)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _case_name(ch: GateCheck) -> str:
    """A test case's name: the metric, and for a function gate the function (or its pattern)."""
    if ch.metric is not GateMetric.FUNCTION:
        return f"{ch.metric.value} cycle time"
    return _plain(f"function {ch.function} ({ch.device})" if ch.function else f"function:{ch.pattern}")


def first_screen(markdown: str) -> str:
    """The report's first screen, for a CI job's summary: everything before its second
    top-level section ("## " heading)."""
    lines = markdown.splitlines(keepends=True)
    heads = [i for i, ln in enumerate(lines) if ln.startswith("## ")]
    end = heads[1] if len(heads) > 1 else len(lines)
    return "".join(lines[:end]).rstrip("\n") + "\n"
