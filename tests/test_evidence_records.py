"""The numbers findings, notices and the verdict rest on are typed records: frozen
dataclasses whose fields have concrete types (no dict, no Any, no callable), so a codec can
walk them by reflection and the renderer reads attributes, never string keys."""
from __future__ import annotations

import dataclasses
import enum
import typing

import pytest

from perfdiff.analyze import Finding, Notice
from perfdiff.analyze.verdict import VerdictClass

ROOTS = (Finding, Notice, VerdictClass)  # what findings, notices and the verdict hand the renderer


def _records() -> list[type]:
    """The records reachable from ROOTS through their fields' type hints."""
    seen: list[type] = []
    todo = list(ROOTS)
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.append(r)
        for tp in typing.get_type_hints(r).values():
            todo.extend(a for a in _flatten(tp) if dataclasses.is_dataclass(a))
    return seen


def _flatten(tp: object) -> list[object]:
    args = typing.get_args(tp)
    return [x for a in args for x in _flatten(a)] if args else [tp]


def _concrete(tp: object) -> bool:
    """Floats, ints, str, bool, enums, None, records and tuples/unions of them."""
    if tp in (float, int, str, bool, type(None)):
        return True
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, enum.Enum)):
        return True
    origin = typing.get_origin(tp)
    if origin in (tuple, typing.Union) or str(origin) == "<class 'types.UnionType'>":
        return all(_concrete(a) for a in typing.get_args(tp) if a is not Ellipsis)
    return False


def test_every_code_record_is_reached() -> None:
    names = {r.__name__ for r in _records()}
    assert {"CycleTimeEvidence", "EventEvidence", "LoadNoticeDetail", "CpuClockDetail", "Clock", "Signal",
            "LaunchCall", "Starved"} <= names


@pytest.mark.parametrize("record", _records(), ids=lambda r: r.__name__)
def test_records_are_frozen_and_concretely_typed(record: type) -> None:
    assert record.__dataclass_params__.frozen  # type: ignore[attr-defined]
    hints = typing.get_type_hints(record)
    for f in dataclasses.fields(record):
        assert _concrete(hints[f.name]), f"{record.__name__}.{f.name}: {hints[f.name]}"
