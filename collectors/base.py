"""The contract every sampler of `perfdiff collect` follows.

A sampler is created with its hardware seam as a parameter (the NVML module, a /proc root),
so tests pass fakes.  The collect loop calls `start` once, then `sample(t_ns)` at every tick
(t_ns = CLOCK_REALTIME ns of the tick), and `close` at the end.  `sample` returns new rows
for the bundle's tables (DataFrames with the columns of perfdiff.bundle.SCHEMAS; missing
tables may be omitted).  A sampler never raises from `sample` for a per-(device, metric)
failure: it records it with `mark_unsupported` and goes on; unknown values are NaN rows
dropped before writing, never 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd


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


class Sampler(Protocol):
    """What the collect loop needs from a sampler."""

    name: str
    interval_ns: int

    def start(self, t_ns: int) -> None: ...

    def sample(self, t_ns: int) -> dict[str, pd.DataFrame]: ...

    def manifest(self) -> dict[str, Any]:
        """Manifest fragment: {"collector": {...}, "unsupported": [...], "gpus": [...], "events": [...]}."""
        ...

    def close(self) -> None: ...
