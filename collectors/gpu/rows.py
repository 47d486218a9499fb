"""One tick's sample rows of the GPU sampler, and the name codes they share across ticks."""
from __future__ import annotations

import numpy as np
import pandas as pd


class Rows:
    """Accumulates sample rows of one tick; `frame` turns them into a `samples` DataFrame.

    Metric and device names are kept as codes into `Names` tables shared across ticks, so the
    frame's categorical columns are built without re-hashing every string each tick.
    """

    __slots__ = ("metrics", "devices", "metric", "device", "t0", "t1", "value")

    def __init__(self, metrics: Names | None = None, devices: Names | None = None) -> None:
        self.metrics = metrics if metrics is not None else Names()
        self.devices = devices if devices is not None else Names()
        self.metric: list[int] = []
        self.device: list[int] = []
        self.t0: list[int] = []
        self.t1: list[int] = []
        self.value: list[float] = []

    def add(self, metric: str, device: str, t0: int, t1: int, value: float) -> None:
        """One row: `value` in the registry unit over [t0, t1] ns (t0 == t1: a point reading)."""
        self.metric.append(self.metrics.code(metric))
        self.device.append(self.devices.code(device))
        self.t0.append(t0 if t0 <= t1 else t1)
        self.t1.append(t1)
        self.value.append(value)

    def __len__(self) -> int:
        return len(self.value)

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame with the `samples` columns and in-memory dtypes (categorical
        names, int64 ns, float64 values); NaN and inf values dropped."""
        value = np.asarray(self.value, dtype=np.float64)
        keep = np.isfinite(value)
        metric = np.asarray(self.metric, dtype=np.int32)
        device = np.asarray(self.device, dtype=np.int32)
        t0 = np.asarray(self.t0, dtype=np.int64)
        t1 = np.asarray(self.t1, dtype=np.int64)
        if not keep.all():
            metric, device, t0, t1, value = metric[keep], device[keep], t0[keep], t1[keep], value[keep]
        return pd.DataFrame({
            "metric": pd.Categorical.from_codes(metric, dtype=self.metrics.categories()),
            "device": pd.Categorical.from_codes(device, dtype=self.devices.categories()),
            "t_start_ns": t0,
            "t_end_ns": t1,
            "value": value,
        })


class Names:
    """String → small-int code table shared by a sampler's Rows (one categorical dtype)."""

    __slots__ = ("_codes", "_dtype")

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._dtype: pd.CategoricalDtype | None = None

    def code(self, name: str) -> int:
        c = self._codes.get(name)
        if c is None:
            c = self._codes[name] = len(self._codes)
            self._dtype = None
        return c

    def categories(self) -> pd.CategoricalDtype:
        if self._dtype is None:
            self._dtype = pd.CategoricalDtype(list(self._codes))
        return self._dtype
