"""What the Kineto reader extracts before the tables are built: the categories it imports (and
their roles), the columns of the events read (`Events`), and the signal to switch readers."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import numpy as np

from perfdiff.importers.common import UNNAMED, TextRepairs
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import at_positions

__all__ = ["ANNOTATION_CATS", "CATEGORIES", "CAT_NAMES", "Events", "MAX_US", "NeedSlowPath", "ROLES", "SKIPPED", "STEP",
           "name_label"]

# category → (role); roles: kernel, memcpy, memset, api, cpu, gpu_range
CATEGORIES: dict[str, str] = {
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "cuda_runtime": "api", "cuda_driver": "api", "Runtime": "api", "hip_runtime": "api", "hip_driver": "api",
    "cpu_op": "cpu", "user_annotation": "cpu", "Operator": "cpu",
    "gpu_user_annotation": "gpu_range",
}
# Categories known and deliberately not imported (counted in manifest["dropped"]).
SKIPPED = ("python_function", "cpu_instant_event", "ac2g", "async", "async_cpu_to_gpu",
           "Trace", "cuda_sync", "overhead", "fwdbwd", "Python", "memory", "cuda_profiler_range")
# GPU work first (role <= memset); gpu_range: a GPU-side range (RunData.gpu_ranges).
ROLES = ("kernel", "memcpy", "memset", "api", "cpu", "gpu_range")
ANNOTATION_CATS = {"user_annotation"}
STEP = re.compile(r"^ProfilerStep#\d+$")
# |µs| up to this converts to ns inside int64 (±9.2e18 ns, ±292 years from the origin).
MAX_US = (2 ** 63 - 1) // 1000
# Every category a reader recognises, in a fixed order: Events.cat holds indexes into it.
CAT_NAMES = list(CATEGORIES) + list(SKIPPED)


# The per-event columns of Events, and the order `Events.canonical` sorts them by (after the
# time and the duration, longer first).
EVENT_COLUMNS = ("role", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "corr", "stream", "device", "nbytes")
SORT_KEYS = ("dur_ns", "role", "pid", "tid", "name", "cat", "corr", "stream", "device", "nbytes")


class NeedSlowPath(Exception):
    """The fast scanner met a layout it does not decode; the general parser takes over."""


@dataclass
class Events:
    """Columns of the imported events (all of them, from every block)."""

    role: list[np.ndarray] = field(default_factory=list)  # index into ROLES
    cat: list[np.ndarray] = field(default_factory=list)  # index into CAT_NAMES
    name: list[np.ndarray] = field(default_factory=list)  # global name codes
    pid: list[np.ndarray] = field(default_factory=list)
    tid: list[np.ndarray] = field(default_factory=list)
    ts_ns: list[np.ndarray] = field(default_factory=list)  # µs·1000 + decimals, before the base
    dur_ns: list[np.ndarray] = field(default_factory=list)
    corr: list[np.ndarray] = field(default_factory=list)
    stream: list[np.ndarray] = field(default_factory=list)
    device: list[np.ndarray] = field(default_factory=list)
    nbytes: list[np.ndarray] = field(default_factory=list)
    names: dict[bytes, int] = field(default_factory=dict)  # raw (escaped) name → code
    # The NCCL kernels whose args name a process group: the event's index among the columns'
    # rows, and its group's code in process_groups.
    pg_event: list[np.ndarray] = field(default_factory=list)
    pg_code: list[np.ndarray] = field(default_factory=list)
    # (name, members) of a process group (`process_groups.process_group`) → code
    process_groups: dict[tuple[str, str | None], int] = field(default_factory=dict)
    header: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    text: TextRepairs = field(default_factory=TextRepairs)  # the strings made valid text
    path_used: str = "fast"
    decoded_bytes: int = 0
    # Set by `canonical`: each name code's number by the names' text, and the events' order
    # (None: as read); `column` applies them.
    _rank: np.ndarray | None = None
    _order: np.ndarray | None = None

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            getattr(self, k).append(v)

    def column(self, key: str) -> np.ndarray:
        parts = getattr(self, key)
        col = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if key == "name" and self._rank is not None and len(col):
            col = self._rank[col]
        if self._order is not None and key in EVENT_COLUMNS:
            col = col[self._order]
        return col

    def canonical(self) -> None:
        """Number the names by their text, and put the host-side events (runtime calls, CPU
        ranges, annotations) in one order whatever the file's: by time, longer first, then
        every other column.  A trace with its events shuffled then gives the same tables, ties
        included (which of two identical ranges is the parent, which of two calls with one
        correlation id is the launch).  GPU events keep the file's order: what reads them
        sorts them by time itself, and leaving them spares a sort of the bulk of a trace."""
        raws = list(self.names)
        text = [name_label(r) for r in raws]  # unrepaired: the repairs are counted once, by name_labels
        by_text = sorted(range(len(raws)), key=lambda i: (text[i], raws[i]))
        rank = np.empty(len(raws), dtype=np.int64)
        rank[[self.names[raws[i]] for i in by_text]] = np.arange(len(raws), dtype=np.int64)
        self.names = {raws[i]: int(rank[self.names[raws[i]]]) for i in range(len(raws))}
        # Renumbered and reordered as each column is read (`column`): the parts are kept as
        # read, so a trace's columns are not held twice (a 1 M-kernel trace's are about 200 MB).
        self._rank = None if np.array_equal(rank, np.arange(len(rank))) else rank
        role = self.column("role")
        host = np.flatnonzero(role >= ROLES.index("api"))
        inner = _canonical_order(self.column, host)
        if np.array_equal(inner, np.arange(len(host))):  # the file has them in that order already
            return
        order = np.arange(len(role), dtype=np.int64)
        order[host] = host[inner]
        del inner, host, role
        pg = self.column("pg_event")
        if len(pg):
            where = np.empty(len(order), dtype=np.int64)
            where[order] = np.arange(len(order), dtype=np.int64)
            self.pg_event = [where[pg]]
            self.pg_code = [self.column("pg_code")]
        self._order = order

    def group_codes(self, rows: np.ndarray) -> np.ndarray:
        """The process group's code of each event `rows` (MISSING: its args name none)."""
        return at_positions(self.column("pg_event"), self.column("pg_code"), rows, MISSING)

    def drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + int(n)

    def name_labels(self) -> list[str]:
        labels = [""] * len(self.names)
        for raw, code in self.names.items():
            labels[code] = name_label(raw, self.text) or UNNAMED
        return labels


def _canonical_order(column: Callable[[str], np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The order of the events `rows` (positions into `rows`) by time, then longer first, then
    the other SORT_KEYS, `column` giving each column: one stable sort by time, and the full
    sort only over the events that share a time with another (a column at a time)."""
    ts = column("ts_ns")[rows]
    order = np.argsort(ts, kind="stable")
    t = ts[order]
    same = np.r_[False, t[1:] == t[:-1]] if len(t) else np.zeros(0, dtype=bool)
    tied = np.flatnonzero(same | np.r_[same[1:], False]) if len(t) else same
    if len(tied):
        at = order[tied]
        keys = tuple(column(k)[rows[at]] for k in reversed(SORT_KEYS[1:])) + (-column("dur_ns")[rows[at]], ts[at])
        order[tied] = at[np.lexsort(keys)]
    return order


def name_label(raw: bytes, text: TextRepairs | None = None) -> str:
    """A name as written between its quotes (JSON escapes included) → the text; made valid
    text (`valid_text`) and counted in `text` when given."""
    label = None
    if b"\\" in raw:
        try:
            label = json.loads(b'"' + raw + b'"')
        except ValueError:
            pass
    if label is None:
        try:
            # surrogatepass: a surrogate written as UTF-8 bytes reads as json.loads reads it, one
            # lone surrogate (one U+FFFD below), not three bytes that are not UTF-8.
            label = raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            label = raw.decode("utf-8", "replace")
            if text is not None:
                text.invalid_utf8("names", raw)
    return label if text is None else text.fix(label)

