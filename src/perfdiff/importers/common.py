"""What the trace importers share beyond perfdiff.model: the core budget of one import and the
activity columns a comparison never reads."""
from __future__ import annotations

import os

__all__ = ["COMPARE_UNUSED", "cores_per_run", "set_runs_at_once"]

_RUNS_AT_ONCE = 1  # runs being loaded at the same time on this machine (2 in perfdiff.pair's workers)


def set_runs_at_once(n: int) -> None:
    """Say how many runs load at once (perfdiff.pair's workers: 2), for cores_per_run."""
    global _RUNS_AT_ONCE
    _RUNS_AT_ONCE = max(1, n)


def cores_per_run() -> int:
    """CPU cores one run's import may keep busy: all of them, or its share when several runs
    load at once.  Importers start helper threads only where this is ≥ 2: on two cores, a
    helper thread competing with the other run's worker cost ~0.5 s of a 2 M-kernel nsys
    comparison."""
    return max(1, (os.cpu_count() or 1) // _RUNS_AT_ONCE)


# Activity columns a comparison never reads: `perfdiff compare` imports traces without
# writing them out (each is a copy of 8 bytes a row: 48 MB at 6 M rows).
COMPARE_UNUSED = frozenset({"stream", "correlation", "bytes"})


