"""perfdiff: compare a normal and an abnormal run of a GPU process and say what changed and why."""
from __future__ import annotations

__version__ = "0.1.0"
