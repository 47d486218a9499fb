"""The CSV beside the report: both runs' cycle durations, rank by rank."""
from __future__ import annotations

import numpy as np


def cycles_csv(dur_n_ns: np.ndarray, dur_a_ns: np.ndarray) -> bytes:
    """The CSV beside the report: both runs' cycle durations (µs), rank by rank, slowest first;
    the shorter run's column ends in empty cells.  Pure numpy and Arrow, which release the GIL:
    `perfdiff compare` builds it in a thread beside the comparison."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    dn = (np.sort(dur_n_ns)[::-1].astype(np.float64) / 1e3).round(3)
    da = (np.sort(dur_a_ns)[::-1].astype(np.float64) / 1e3).round(3)
    k = max(len(dn), len(da))

    def padded(x: np.ndarray) -> pa.Array:
        return pa.array(np.concatenate([x, np.full(k - len(x), np.nan)]), mask=np.arange(k) >= len(x))

    table = pa.table({"rank": np.arange(1, k + 1), "normal_us": padded(dn), "abnormal_us": padded(da)})
    sink = pa.BufferOutputStream()
    sink.write(b"rank,normal_us,abnormal_us\n")
    # Arrow writes a million rows in C++; strings built in Python took seconds.
    pacsv.write_csv(table, sink, pacsv.WriteOptions(quoting_style="none", include_header=False))
    return sink.getvalue().to_pybytes()
