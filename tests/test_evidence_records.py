"""The numbers findings, notices and the verdict rest on are typed records: frozen
dataclasses whose fields have concrete types (no dict, no Any, no callable), so a codec can
walk them by reflection and the renderer reads attributes, never string keys."""
from __future__ import annotations

import dataclasses
import enum
import inspect
import typing

import pytest

from perfdiff.analyze import evidence

RECORD_MODULES = [evidence]  # the findings and notices


def _records() -> list[type]:
    return [obj for m in RECORD_MODULES for _, obj in inspect.getmembers(m, dataclasses.is_dataclass)
            if obj.__module__ == m.__name__]


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


@pytest.mark.parametrize("record", _records(), ids=lambda r: r.__name__)
def test_records_are_frozen_and_concretely_typed(record: type) -> None:
    assert record.__dataclass_params__.frozen  # type: ignore[attr-defined]
    hints = typing.get_type_hints(record)
    for f in dataclasses.fields(record):
        assert _concrete(hints[f.name]), f"{record.__name__}.{f.name}: {hints[f.name]}"
