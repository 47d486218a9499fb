"""The compiled block decoder of the fast Kineto reader, where it is built, and when it is used.

``_scan`` (``_scan.c``, a C extension that ``pip install`` builds where a C compiler is
present; optional: without one the install goes on without it) decodes one block of the
trace's bytes into the same event columns as the numpy decoder (`numpy_block`), in one pass over
the bytes instead of several numpy passes (docs/PERFORMANCE.md).  On any block it does not
read the way numpy does it hands the block back, and `scan` decodes that block with numpy;
so the two give the same `Events` whatever the input, which tests check on real and
generated traces.

``PERFDIFF_PURE=1`` in the environment makes the reader use numpy only.
"""
from __future__ import annotations

import functools
from types import ModuleType

import numpy as np

from perfdiff.importers.kineto.events import ROLES
from perfdiff.model.native import ENV_PURE, pure

__all__ = ["ENV_PURE", "COLUMNS", "decoder", "why_not"]

# The columns _scan.scan_block returns, in its order: the event columns of `numpy_block.Block.cols`,
# then where each kernel's args object starts and the position it must end before (-1: none).
COLUMNS = ("role", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "corr", "stream", "device", "nbytes",
           "args_at", "args_limit")
# The role numbers _scan.c is written for.
_ROLES = ("kernel", "memcpy", "memset", "api", "cpu", "gpu_range")


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ModuleType | None, str]:
    if ROLES != _ROLES:
        return None, "the roles changed since _scan.c was written"
    try:
        from perfdiff.importers.kineto import _scan
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _scan, ""


def decoder(cat_hashes: np.ndarray, role_of_cat: np.ndarray) -> ModuleType | None:
    """The compiled decoder, set up for the categories whose hashes are `cat_hashes` (uint64, in
    events.CAT_NAMES order) with roles `role_of_cat` (int64, one more for an unknown category);
    None when it is not built or PERFDIFF_PURE is set."""
    if pure():
        return None
    if len(np.unique(cat_hashes)) != len(cat_hashes):  # _scan.c takes the first of equal hashes
        return None
    mod = _load()[0]
    if mod is not None:
        mod.configure(np.ascontiguousarray(cat_hashes, dtype=np.uint64).tobytes(),
                      np.ascontiguousarray(role_of_cat, dtype=np.int64).tobytes())
    return mod


def why_not() -> str:
    """Why the compiled decoder is not used ("" when it is)."""
    if pure():
        return f"{ENV_PURE} is set"
    return _load()[1]
