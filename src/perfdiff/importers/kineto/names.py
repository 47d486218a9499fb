"""Kernel names as Kineto writes them (demangled C++), and their short form."""
from __future__ import annotations

import re

__all__ = ["short_kernel_name"]

_SHORT_STRIP = re.compile(r"^(?:void|static|__global__|\s)+\s")


def short_kernel_name(name: str) -> str:
    """Base name of a demangled kernel name: no return type, template args, params, namespaces.

    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` →
    ``vectorized_elementwise_kernel`` (what nsys calls the short name).
    """
    s = _SHORT_STRIP.sub("", name.strip())
    depth = 0
    cut = len(s)
    for i, ch in enumerate(s):
        if ch in "<(":
            if depth == 0:
                cut = i
                break
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    base = s[:cut].strip() or s
    # the last namespace component (not inside brackets)
    return base.split("::")[-1] or base
