"""The export's string table (StringIds): names stored once, rows holding their id."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from perfdiff.importers.common import UNNAMED, event_name
from perfdiff.importers.nsys.db import Export
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import categorical, dense_codes

__all__ = ["labels", "string_ids"]


def string_ids(x: Export) -> dict[int, str]:
    """id → text of every string of the export (empty when it has no StringIds), as stored:
    the names among them are made valid text where they are used (`labels`); others, such as
    an environment block, hold NULs on purpose."""
    if not x.has("StringIds"):
        return {}
    return {int(i): event_name(v) for i, v in x.query("SELECT id, value FROM StringIds")}


def labels(x: Export, ids: np.ndarray, transform: Callable[[str], str] | None = None) -> pd.Categorical:
    """The strings of the ids `ids` as a categorical (`transform` applied to each distinct one),
    made valid text (`valid_text`, counted in x.text)."""
    codes, uniq = dense_codes(ids)
    names = [x.text.fix(x.strings.get(int(u), f"<string {int(u)}>")) if u != MISSING else UNNAMED for u in uniq]
    if transform is not None:
        names = [transform(s) for s in names]
    return categorical(codes, names)
