"""perfdiff.model.tables.categorical: labels[codes] as a categorical, repeated labels merged,
code -1 (and any negative code) NaN; the codes taken as they are where the labels are distinct."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfdiff.model.tables import categorical


def _expected(codes: np.ndarray, labels: list[str]) -> list[object]:
    return [labels[c] if c >= 0 else np.nan for c in codes.tolist()]


@pytest.mark.parametrize("codes, labels", [
    (np.array([0, 2, 1, 1, -1, 2]), ["a", "b", "c"]),  # distinct labels, a NaN
    (np.array([0, 2, 1, 1, -3, 2]), ["a", "b", "c"]),  # any negative code is NaN
    (np.array([0, 2, 1, 1, 2]), ["a", "b", "a"]),  # a repeated label: one category
    (np.array([], dtype=np.int64), ["a"]),
    (np.array([-1, -1]), ["x"]),
])
def test_categorical(codes: np.ndarray, labels: list[str]) -> None:
    got = categorical(codes, labels)
    assert isinstance(got, pd.Categorical)
    assert list(got.categories) == list(dict.fromkeys(labels))
    assert [None if pd.isna(v) else v for v in got] == [None if v is np.nan else v for v in _expected(codes, labels)]


def test_a_code_beyond_the_labels_is_refused() -> None:
    with pytest.raises(IndexError):
        categorical(np.array([0, 3]), ["a", "b"])
