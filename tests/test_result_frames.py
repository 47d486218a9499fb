"""The DataFrames of a comparison say what its JSON says, by the same names: a column is a
record's field, or a nested test's field under the field's name (`t_z` is `t.z`)."""
from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES

import perfdiff


@pytest.fixture(scope="module")
def comparison() -> perfdiff.Comparison:
    return perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")


def test_function_columns_are_the_json_keys(comparison: perfdiff.Comparison) -> None:
    data = json.loads(json.dumps(comparison.to_json()))
    row = next(f for f in data["functions"] if f["t"] is not None)
    flat = {k for k in row if k not in ("t", "beta")}
    nested = {f"{k}_{x}" for k in ("t", "beta") for x in row[k]}
    columns = set(comparison.functions.columns)
    assert columns - flat - nested == set()
    assert flat <= columns  # every scalar field of the record is a column
    frame = comparison.functions.set_index(["name", "device", "kind"])
    key = (row["name"], row["device"], row["kind"])
    assert frame.loc[key, "t_z"] == pytest.approx(row["t"]["z"]) and frame.loc[key, "tau_pp"] == row["tau_pp"]


def test_metric_columns_are_the_json_keys(comparison: perfdiff.Comparison) -> None:
    data = json.loads(json.dumps(comparison.to_json()))
    mu, ctx = data["mu"][0], data["context"][0]
    # A metric row: its record's fields, its test's fields (`res`), and the scope and function
    # the row's place in the JSON says (`mu` rows name a function by index, `context` rows none).
    known = (set(mu) | set(ctx) | set(mu["res"])) - {"res", "func"} | {"scope", "function"}
    assert set(comparison.metrics.columns) - known == set()
    first = comparison.metrics.iloc[0]
    assert first["function"] == data["functions"][mu["func"]]["name"] and first["z_log"] == pytest.approx(mu["z_log"])
