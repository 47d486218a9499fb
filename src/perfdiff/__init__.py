"""perfdiff: compare a normal and an abnormal run of a GPU process and say what changed and why."""
from __future__ import annotations

__version__ = "0.1.0"

# The target-side cycle-marker API (standard library only: importing perfdiff stays cheap).
from perfdiff.marker import cycle, mark_cycle  # noqa: E402,F401

__all__ = ["__version__", "cycle", "mark_cycle"]
