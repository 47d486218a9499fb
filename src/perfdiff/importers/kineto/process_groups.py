"""The process group (communicator) of an NCCL collective kernel, from the kernel's args as the
PyTorch profiler writes them: "Process Group Name" (older profilers: "pg_name") and "Process
Group Ranks", the members' global ranks as a JSON list or as that list written in a string
("[0, 1]").  The fast scanner decodes the args of those kernels only, and only where they may
name a group (`may_name_a_group`, `args_object`)."""
from __future__ import annotations

import json
import re
from typing import Any

from perfdiff.model.schema import COLLECTIVE_KERNEL

__all__ = ["COLLECTIVE", "args_object", "may_name_a_group", "process_group"]

COLLECTIVE = re.compile(COLLECTIVE_KERNEL)
_DECODER = json.JSONDecoder()
_MAY_NAME = (b'"Process Group Name"', b'"pg_name"', b"\\")  # bytes without one of these name no group
_FIRST_BYTES = 1024  # args objects are short; a longer one is read again with more bytes


def process_group(args: Any) -> tuple[str, str | None] | None:
    """(name, members written "[0, 1]", None when not listed) of a kernel's `args`; None when
    they name no group (no name key, or a name that is neither a string nor an integer)."""
    if not isinstance(args, dict):
        return None
    name = args["Process Group Name"] if "Process Group Name" in args else args.get("pg_name")
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        return None
    return str(name), _members(args.get("Process Group Ranks"))


def _members(raw: Any) -> str | None:
    """"[1, 0]" or [1, 0] → "[0, 1]"; None for anything that is not a non-empty list of integers."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if isinstance(raw, list) and raw and all(isinstance(r, int) and not isinstance(r, bool) for r in raw):
        return "[" + ", ".join(str(r) for r in sorted(raw)) + "]"
    return None


def may_name_a_group(buf: bytes, start: int, limit: int) -> bool:
    """Whether buf[start:limit] may hold a process-group key: either key written out, or a
    backslash (a key may be written with escapes).  Cheaper than decoding the args."""
    return any(buf.find(k, start, limit) >= 0 for k in _MAY_NAME)


def args_object(buf: bytes, start: int, limit: int) -> Any:
    """The JSON value that starts at buf[start] (after whitespace) and ends before `limit`,
    decoded; None when it is not valid JSON there."""
    while start < limit and buf[start] in b" \t\r\n":
        start += 1
    size = _FIRST_BYTES
    while True:
        end = min(start + size, limit)
        try:
            return _DECODER.raw_decode(buf[start:end].decode("utf-8"))[0]
        except (ValueError, RecursionError):  # UnicodeDecodeError included: a character cut at `end`
            if end >= limit:
                return None
            size *= 8
