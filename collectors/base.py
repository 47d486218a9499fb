"""The contract every sampler of `perfdiff collect` follows.

A sampler is created with its hardware seam as a parameter (the NVML module, a /proc root),
so tests pass fakes.  The collect loop calls `start` once, then `sample(t_ns)` at every tick
(t_ns = CLOCK_REALTIME ns of the tick), and `close` at the end.  `sample` returns new rows
for the bundle's tables (DataFrames with the columns of perfdiff.model.schema.SCHEMAS; missing
tables may be omitted).  A sampler never raises from `sample` for a per-(device, metric)
failure: it records it with `mark_unsupported` and goes on; unknown values are NaN rows
dropped before writing, never 0.

A DataFrame per tick costs too much at 100 Hz, so a table's rows may also be handed over as
`Columns` (column name → list, the columns of SCHEMAS, optional ones may be left out);
`RowBuffer` builds them one row at a time.  The collect loop (loop.py) appends both forms to
the bundle's journals at every flush and seals them into Parquet parts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union

from perfdiff.model.schema import MISSING, SAMPLER_COLUMNS

if TYPE_CHECKING:  # pandas is not imported at run time: `perfdiff collect` must start fast
    import pandas as pd


Columns = dict[str, list]
"""One table's rows as column lists (the columns of perfdiff.model.schema.SCHEMAS[table])."""

TableRows = Union["pd.DataFrame", Columns]


@dataclass
class Unsupported:
    """A (device, metric) that could not be collected, why, and since when (ns)."""

    device: str
    metric: str
    reason: str
    since_ns: int = 0


@dataclass
class SamplerState:
    """Book-keeping shared by samplers: what is unsupported and what happened when."""

    unsupported: dict[tuple[str, str], Unsupported] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def mark_unsupported(self, device: str, metric: str, reason: str, t_ns: int = 0) -> None:
        """Record once that `metric` on `device` is not available and why."""
        key = (device, metric)
        if key not in self.unsupported:
            self.unsupported[key] = Unsupported(device, metric, reason, t_ns)

    def is_unsupported(self, device: str, metric: str) -> bool:
        return (device, metric) in self.unsupported

    def event(self, t_ns: int, device: str, what: str, **detail: Any) -> None:
        """Record a timed event (GPU lost, XID, target exited) for the manifest."""
        self.events.append({"t_ns": t_ns, "device": device, "event": what, **detail})

    def unsupported_list(self) -> list[dict[str, Any]]:
        return [vars(u) for u in self.unsupported.values()]


TABLE_COLUMNS = SAMPLER_COLUMNS


class RowBuffer:
    """Rows of the three tables kept until `take` hands them over as column lists.

    Units as in perfdiff.model.schema.SCHEMAS: ns of CLOCK_REALTIME, values in the registry's unit.
    A sample whose value is NaN (unknown) is dropped here: unknown is never written.  A row
    is one tuple appended (the collector's tick adds a few dozen, each costing a cold CPU
    more than its size suggests); `take` turns them into columns with one zip.
    """

    __slots__ = ("_rows", "_cols")

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple]] = {t: [] for t in TABLE_COLUMNS}
        self._cols: dict[str, Columns] = {}  # rows added as columns (add_columns)

    def sample(self, metric: str, device: str, t_start_ns: int, t_end_ns: int, value: float) -> None:
        """One resource reading over [t_start_ns, t_end_ns] (a point reading: both equal)."""
        if value != value or value in (math.inf, -math.inf):
            return
        self._rows["samples"].append((metric, device, t_start_ns, t_end_ns, float(value)))

    def samples(self, rows: list[tuple[str, str, int, int, float]]) -> None:
        """Many `sample` rows at once: (metric, device, t_start_ns, t_end_ns, value) tuples, the
        values floats; a NaN or infinite one is dropped."""
        self._rows["samples"].extend(r for r in rows if math.isfinite(r[4]))

    def activity(self, function: str, kind: str, device: str, start_ns: int, end_ns: int,
                 busy_ns: int, nbytes: int = MISSING) -> None:
        """One activity row; `busy_ns` may exceed end-start for summed thread time."""
        self._rows["activity"].append((function, kind, device, start_ns, end_ns, busy_ns, nbytes))

    def marker(self, name: str, start_ns: int, end_ns: int, tid: int, source: str) -> None:
        """One cycle mark [start_ns, end_ns] on thread `tid` (MISSING when unknown)."""
        self._rows["markers"].append((name, start_ns, end_ns, tid, source))

    def add_columns(self, table: str, cols: Columns) -> None:
        """Rows of `table` given as column lists (every column, equal lengths; taken over, not
        copied): a sampler that keeps its own per-tick readings adds them in bulk."""
        cur = self._cols.get(table)
        if cur is None:
            self._cols[table] = cols
        else:
            for c, v in cols.items():
                cur[c] += v

    def __len__(self) -> int:
        return sum(len(r) for r in self._rows.values()) + sum(
            len(next(iter(c.values()))) for c in self._cols.values())

    def take(self) -> dict[str, Columns]:
        """The non-empty tables buffered so far, as columns (rows added one by one first, then
        those added as columns); the buffer is empty afterwards."""
        out: dict[str, Columns] = {}
        for t, rows in self._rows.items():
            bulk = self._cols.pop(t, None)
            if rows:
                cols = dict(zip(TABLE_COLUMNS[t], map(list, zip(*rows, strict=True)), strict=True))
                self._rows[t] = []
                if bulk:
                    for c, v in cols.items():
                        v += bulk[c]
                out[t] = cols
            elif bulk and bulk[TABLE_COLUMNS[t][0]]:
                out[t] = bulk
        return out


class Sampler(Protocol):
    """What the collect loop needs from a sampler."""

    name: str
    interval_ns: int

    def start(self, t_ns: int) -> None: ...

    def sample(self, t_ns: int) -> dict[str, TableRows]: ...

    def manifest(self) -> dict[str, Any]:
        """Manifest fragment: {"collector": {...}, "unsupported": [...], "gpus": [...], "events": [...]}."""
        ...

    def close(self) -> None: ...
