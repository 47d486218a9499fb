"""scipy.special's functions (`special.stdtr`, `special.ndtri`, ...), imported on first use.

Importing scipy.special takes 0.2-0.4 s.  A process that holds statistics records without
computing any (the process drawing a report's pictures, which unpickles the result) never
pays it; one that computes pays it at its first test, or earlier where it asks
(`import_now`: the API imports it while the runs load).
"""
from __future__ import annotations

from typing import Any


def import_now() -> None:
    """Import scipy.special now (to overlap the import with other work)."""
    import scipy.special  # noqa: F401


def __getattr__(name: str) -> Any:
    import scipy.special

    value = getattr(scipy.special, name)
    globals()[name] = value  # asked once: later uses are a plain attribute
    return value
