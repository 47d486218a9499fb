"""perfdiff.model.codec: records to JSON-ready data and back, refusing what does not match."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfdiff.model import codec


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Leaf:
    value_us: float
    label: str = ""


@dataclass(frozen=True)
class Other:
    count: int


@dataclass(frozen=True)
class Tree:
    leaf: Leaf
    either: Leaf | Other
    maybe: Leaf | None
    colour: Colour
    pairs: tuple[tuple[str, int], ...]
    by_index: dict[int, dict[int, float]]
    series: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    ints: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))


def _tree(**kw: object) -> Tree:
    base = dict(leaf=Leaf(1.5, "a"), either=Other(3), maybe=None, colour=Colour.BLUE, pairs=(("x", 1),),
                by_index={2: {7: 0.25}}, series=np.array([1.0, math.nan, math.inf]),
                ints=np.array([1, 2], dtype=np.int64))
    base.update(kw)
    return Tree(**base)  # type: ignore[arg-type]


def _through_json(x: Tree) -> Tree:
    return codec.from_data(Tree, json.loads(json.dumps(codec.to_data(x), allow_nan=False)))


def test_a_record_reads_back_as_it_was_written() -> None:
    t = _tree()
    back = _through_json(t)
    assert back.leaf == t.leaf and back.either == Other(3) and back.maybe is None and back.colour is Colour.BLUE
    assert back.pairs == (("x", 1),) and back.by_index == {2: {7: 0.25}}
    assert back.series.dtype == np.float64 and back.series[0] == 1.0 and math.isnan(back.series[1])
    assert back.series[2] == math.inf and back.ints.dtype == np.int64 and back.ints.tolist() == [1, 2]


def test_nan_is_null_and_infinities_are_named() -> None:
    data = codec.to_data(_tree(leaf=Leaf(math.nan), either=Leaf(-math.inf)))
    assert data["leaf"]["value_us"] is None and data["either"]["value_us"] == "-inf"
    assert data["series"] == {"dtype": "<f8", "values": [1.0, None, "inf"]}
    back = codec.from_data(Tree, data)
    assert math.isnan(back.leaf.value_us) and back.either == Leaf(-math.inf)


def test_a_union_of_records_names_the_record() -> None:
    assert codec.to_data(_tree())["either"] == {"record": "Other", "count": 3}
    assert "record" not in codec.to_data(_tree())["leaf"]  # one record type: no name needed
    data = codec.to_data(_tree())
    data["either"]["record"] = "Nope"
    with pytest.raises(codec.RecordError, match="Tree.either: expected one of Leaf, Other"):
        codec.from_data(Tree, data)


@pytest.mark.parametrize(("plant", "message"), [
    (lambda d: d.update(extra=1), "Tree: unknown field 'extra'"),
    (lambda d: d["leaf"].update(value_ms=d["leaf"].pop("value_us")), "Tree.leaf: unknown field 'value_ms'"),
    (lambda d: d.pop("colour"), "Tree: field 'colour' missing"),
    (lambda d: d.update(colour="green"), "Tree.colour: 'green' is no Colour"),
    (lambda d: d["leaf"].update(value_us="fast"), "Tree.leaf.value_us: expected a number"),
    (lambda d: d.update(pairs=[["x", 1, 2]]), r"Tree.pairs\[0\]: expected 2 items"),
    (lambda d: d.update(by_index={"two": {}}), "key 'two' is not an integer"),
    (lambda d: d["either"].update(count=True), "expected an integer"),
    (lambda d: d.update(series=[1.0]), "Tree.series: expected dict"),
])
def test_data_that_does_not_match_is_refused_by_name(plant, message: str) -> None:
    data = codec.to_data(_tree())
    plant(data)
    with pytest.raises(codec.RecordError, match=message):
        codec.from_data(Tree, data)


def test_schema_lists_every_reachable_record_and_enum() -> None:
    assert codec.schema(Tree) == [
        "Tree: leaf Leaf, either Leaf | Other, maybe Leaf | None, colour Colour, pairs tuple[tuple[str, int], ...], "
        "by_index dict[int, dict[int, float]], series ndarray, ints ndarray",
        "Leaf: value_us float, label str",
        "Other: count int",
        "Colour: red, blue",
    ]


@given(st.floats(allow_nan=True, allow_infinity=True), st.text(), st.integers(-2**62, 2**62))
def test_any_float_text_and_integer_survive_json(x: float, label: str, n: int) -> None:
    t = _tree(leaf=Leaf(x, label), either=Other(n), series=np.array([x]))
    back = _through_json(t)
    same = (lambda a, b: a == b or (math.isnan(a) and math.isnan(b)))
    assert same(back.leaf.value_us, x) and back.leaf.label == label and back.either == Other(n)
    assert same(float(back.series[0]), x)
