"""The CSV beside the report: both runs' cycle durations, rank by rank, and the load each
cycle carried when the runs recorded it."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from perfdiff.analyze.result import ComparisonResult, load_columns

LOAD_COLUMNS = ("tokens", "requests", "prefill_tokens", "decode_tokens")


def render_csv(result: ComparisonResult) -> bytes:
    """The cycles CSV of `result` (`cycles_csv`), with the load columns when the runs recorded
    their engine steps' load."""
    load = result.analysis.load
    columns = (load_columns(load.normal), load_columns(load.abnormal)) if load is not None else (None, None)
    return cycles_csv(result.cycle_times[0].dur_ns, result.cycle_times[1].dur_ns, *columns)


def cycles_csv(dur_n_ns: np.ndarray, dur_a_ns: np.ndarray, load_n: Mapping[str, np.ndarray] | None = None,
               load_a: Mapping[str, np.ndarray] | None = None) -> bytes:
    """The CSV beside the report: both runs' cycle durations (µs), rank by rank, slowest first;
    the shorter run's column ends in empty cells.  With `load_n` / `load_a` (per cycle, keyed by
    LOAD_COLUMNS), each duration is followed by its cycle's load: columns normal_tokens …,
    abnormal_tokens …, empty where the cycle's load is unknown.  Pure numpy and Arrow, which
    release the GIL."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # Slowest first; stable, so a cycle's load stays beside its duration.
    order_n = np.argsort(dur_n_ns, kind="stable")[::-1]
    order_a = np.argsort(dur_a_ns, kind="stable")[::-1]
    dn = (dur_n_ns[order_n].astype(np.float64) / 1e3).round(3)
    da = (dur_a_ns[order_a].astype(np.float64) / 1e3).round(3)
    k = max(len(dn), len(da))

    def padded(x: np.ndarray) -> pa.Array:
        x = np.asarray(x, dtype=np.float64)
        full = np.concatenate([x, np.full(k - len(x), np.nan)])
        return pa.array(full, mask=(np.arange(k) >= len(x)) | ~np.isfinite(full))

    columns = {"rank": np.arange(1, k + 1), "normal_us": padded(dn), "abnormal_us": padded(da)}
    if load_n is not None and load_a is not None:
        for side, load, order in (("normal", load_n, order_n), ("abnormal", load_a, order_a)):
            for name in LOAD_COLUMNS:
                columns[f"{side}_{name}"] = padded(np.asarray(load[name], dtype=np.float64)[order])
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    sink.write((",".join(columns) + "\n").encode())
    # Arrow writes a million rows in C++; strings built in Python took seconds.
    pacsv.write_csv(table, sink, pacsv.WriteOptions(quoting_style="none", include_header=False))
    return sink.getvalue().to_pybytes()
