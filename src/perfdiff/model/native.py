"""perfdiff's optional C extensions, where they are built, and the switch that turns them off.

Each extension does in C what a numpy function beside it does (the numpy code stays, and
decides what the C code hands back); ``pip install`` builds them where a C compiler is
present, and an install without one goes on without them.  ``PERFDIFF_PURE=1`` in the
environment makes every reader and helper use numpy only.
"""
from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

__all__ = ["ENV_PURE", "compiled", "pure"]

ENV_PURE = "PERFDIFF_PURE"


def pure() -> bool:
    """Whether PERFDIFF_PURE asks for numpy only."""
    return os.environ.get(ENV_PURE, "").strip() not in ("", "0")


@functools.lru_cache(maxsize=None)
def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def compiled(name: str) -> ModuleType | None:
    """The extension module `name` (e.g. "perfdiff.model._nesting"); None where it is not
    built or PERFDIFF_PURE is set."""
    return None if pure() else _load(name)
