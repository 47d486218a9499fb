"""Golden files compared at a stated precision: the text must match, and every number in it
must agree within REL_TOL relative, with values below ABS_FLOOR in magnitude taken as 0.

A number's last bits depend on the CPU's BLAS kernels and on summation order (a dot product
gives 0.0 on one machine and 2.2e-16 on another), so no golden compares numbers bit for bit.
UPDATE_GOLDEN=1 rewrites a golden; a mismatch writes the new output beside it as *.new.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

REL_TOL = 1e-6
ABS_FLOOR = 1e-12
# A number as reports and JSON write it: sign, digits with thousands separators, decimals, exponent.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


def _split(text: str) -> tuple[list[str], list[float]]:
    """The text with each number replaced by a placeholder, and the numbers."""
    numbers: list[float] = []

    def take(m: re.Match[str]) -> str:
        numbers.append(float(m.group().replace(",", "")))
        return "\0"

    return _NUMBER.sub(take, text).split("\n"), numbers


def _close(a: float, b: float) -> bool:
    if abs(a) < ABS_FLOOR and abs(b) < ABS_FLOOR:
        return True
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_FLOOR)


def first_difference(expected: str, got: str) -> str | None:
    """Where `got` differs from `expected` beyond the stated precision, or None."""
    lines_e, nums_e = _split(expected)
    lines_g, nums_g = _split(got)
    if lines_e != lines_g:
        for i, (le, lg) in enumerate(zip(lines_e, lines_g, strict=False)):
            if le != lg:
                return f"line {i + 1}: text differs: {expected.splitlines()[i]!r} vs {got.splitlines()[i]!r}"
        return f"{len(lines_e)} lines expected, {len(lines_g)} written"
    for k, (a, b) in enumerate(zip(nums_e, nums_g, strict=True)):
        if not _close(a, b):
            return f"number {k + 1}: {a!r} expected, {b!r} written"
    return None


def check_golden(path: Path, text: str) -> None:
    """Compare `text` with the golden file at `path` (see the module docstring)."""
    if os.environ.get("UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text, encoding="utf-8")
        if os.environ.get("UPDATE_GOLDEN") != "1":
            pytest.fail(f"golden {path} was missing and has been written: review and commit it")
        return
    why = first_difference(path.read_text(encoding="utf-8"), text)
    if why is not None:
        new = path.with_name(path.name + ".new")
        new.write_text(text, encoding="utf-8")
        pytest.fail(f"{path.name} differs from the golden output ({why}); new output in {new} "
                    "(diff them; UPDATE_GOLDEN=1 accepts)")
