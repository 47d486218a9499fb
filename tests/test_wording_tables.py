"""The wording is a table keyed by code: every code has its sentence, so a code added to an
enum without words fails here, not in a user's report (perfdiff.render.wording)."""
from __future__ import annotations

from perfdiff.analyze import FindingCode, NoticeCode
from perfdiff.analyze.verdict import VerdictCode
from perfdiff.render import wording


def test_every_notice_code_has_wording() -> None:
    assert set(wording.NOTICE_WORDS) == set(NoticeCode)


def test_every_finding_code_has_wording() -> None:
    assert set(wording.FINDING_WORDS) == set(FindingCode)


def test_every_verdict_code_has_wording() -> None:
    assert set(wording.VERDICT_LINES) == set(VerdictCode) == set(wording.VERDICT_WORDS)


def test_every_op_category_has_wording() -> None:
    from perfdiff.analyze.records import OpCategory

    assert set(wording.CATEGORY_WORDS) == set(OpCategory)
