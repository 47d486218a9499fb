"""The duration syntax of the command line: '100ms', '2s', '500us', '1.5m' (a bare number
is seconds).  Standard library only: `perfdiff collect` parses its options before numpy."""
from __future__ import annotations

import re

from perfdiff.errors import InputError

_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s|m|min)?\s*")
_UNIT_NS = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "min": 60e9}
MAX_DURATION_NS = 30 * 86_400 * 10**9  # a window or a collection beyond a month is a typo


def parse_duration_ns(text: str) -> int:
    """`text` as a positive number of ns; InputError (exit 2) for anything else."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise InputError(f"bad duration {text!r}: use e.g. 100ms, 2s, 500us")
    ns = int(round(float(m.group(1)) * _UNIT_NS[m.group(2) or "s"]))
    if ns <= 0:
        raise InputError(f"bad duration {text!r}: must be positive")
    if ns > MAX_DURATION_NS:
        raise InputError(f"bad duration {text!r}: at most 30 days")
    return ns
