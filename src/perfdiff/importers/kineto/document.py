"""The start and the end of a Kineto document around its event list: the top-level keys
(deviceProperties, baseTimeNanoseconds, ...), a check that the list is closed, and the
most precise error for a file in which no event was found."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfdiff.errors import InputError

__all__ = ["explain_not_a_trace", "load_json", "parse_header", "parse_trailer"]


def parse_header(head: bytes) -> dict[str, Any]:
    """Top-level keys written before "traceEvents" (deviceProperties, schemaVersion ...)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return {}
    at = text.find(b'"traceEvents"')
    if at < 0:
        return {}
    body = text[:at].rstrip()
    if body.endswith(b","):
        body = body[:-1]
    try:
        obj = json.loads(body + b"}")
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def parse_trailer(tail: bytes, path: Path) -> dict[str, Any]:
    """Top-level keys written after the event list; the last event must close the list."""
    if not tail.strip():
        return {}
    dec = json.JSONDecoder()
    text = tail.decode("utf-8", "replace").lstrip()
    if not text.startswith("{"):  # the tail starts at the last event's "ph" key
        text = "{" + text
    try:
        _, end = dec.raw_decode(text)
    except RecursionError:
        raise InputError("JSON nested too deeply near the end of the trace", path=path) from None
    except ValueError as exc:
        raise InputError(f"invalid JSON near the end of the trace ({exc.msg}); truncated file?", path=path) from None
    rest = text[end:].lstrip()
    if rest.startswith(","):  # more events after an incomplete last one cannot happen; tolerate
        rest = rest[1:].lstrip()
        if rest.startswith("{"):
            raise InputError("invalid JSON near the end of the trace", path=path)
    if not rest.startswith("]"):
        raise InputError("invalid JSON: the event list is not closed (truncated file?)", path=path)
    rest = rest[1:].lstrip()
    if not rest:
        return {}
    if rest.startswith("}"):
        return {}
    if rest.startswith(","):
        try:
            obj = json.loads("{" + rest[1:])
        except RecursionError:
            raise InputError("JSON nested too deeply after the event list", path=path) from None
        except ValueError as exc:
            raise InputError(f"invalid JSON after the event list ({exc.msg})", path=path) from None
        return obj if isinstance(obj, dict) else {}
    raise InputError("invalid JSON after the event list", path=path)


def explain_not_a_trace(path: Path, head: bytes) -> None:
    """Raise the most precise InputError for a file in which no event was found."""
    text = head.strip()
    if not text:
        raise InputError("empty file: not a trace", path=path)
    if len(text) < (64 << 20):
        obj = load_json(text, path)
        if isinstance(obj, dict) and "traceEvents" not in obj:
            raise InputError("JSON is not a Chrome/Kineto trace (no \"traceEvents\")", path=path)
        events = obj.get("traceEvents") if isinstance(obj, dict) else obj
        if isinstance(events, list) and not events:
            raise InputError("trace has no events", path=path)
    raise InputError("JSON is not a Chrome/Kineto trace (no events with a \"ph\" field)", path=path)


def load_json(raw: bytes, p: Path, **kwargs: Any) -> Any:
    """json.loads(raw) with every way it can fail on a user's file as one InputError."""
    try:
        return json.loads(raw, **kwargs)
    except RecursionError:
        raise InputError("JSON nested too deeply to be a trace", path=p) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc})", path=p) from None
    except ValueError as exc:
        raise InputError(f"invalid JSON ({exc})", path=p) from None
