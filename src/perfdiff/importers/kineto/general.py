"""The general Kineto reader: ``json.loads`` and a Python loop over the events, into the same
`Events` columns as the fast scanner.  It reads any valid JSON trace and takes over a file
whose layout the fast scanner does not decode (manifest ``source.reader``: "json")."""
from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from decimal import ROUND_DOWN, Context, Decimal
from pathlib import Path
from typing import Any

import numpy as np

from perfdiff.errors import InputError
from perfdiff.importers.common import event_name
from perfdiff.importers.kineto.document import load_json
from perfdiff.importers.kineto.events import CAT_NAMES, CATEGORIES, MAX_US, ROLES, SKIPPED, Events
from perfdiff.importers.kineto.process_groups import COLLECTIVE, process_group
from perfdiff.model.schema import MISSING

__all__ = ["general_events", "us_to_ns"]

# µs · 1000 cut towards zero however many decimals a number has (the default context rounds
# to 28 digits, which can carry .99999... up to the next ns).
_TRUNCATE = Context(prec=40, rounding=ROUND_DOWN)


def general_events(p: Path) -> Events:
    """Read any valid trace with json.loads and a Python loop (for layouts the scanner skips)."""
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except EOFError:
        raise InputError("truncated gzip file (the compressed stream ends early)", path=p) from None
    except (OSError, zlib.error) as exc:
        raise InputError(f"cannot read the trace ({exc})", path=p) from None
    # Decimals are read exactly, so that "1623142623460111.123" µs converts to ns exactly.
    doc = load_json(raw, p, parse_float=Decimal)
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise InputError("JSON is not a Chrome/Kineto trace (no \"traceEvents\")", path=p)
        events = doc.get("traceEvents")
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        events, header = doc, {}
    if not isinstance(events, list):
        raise InputError("JSON is not a Chrome/Kineto trace (traceEvents is not a list)", path=p)
    ev = Events(header=header, path_used="json")
    ev.decoded_bytes = len(raw)
    cols: dict[str, list] = {k: [] for k in ("role", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "corr", "stream",
                                             "device", "nbytes")}
    pg_event, pg_code = [], []
    cat_index = {nm: i for i, nm in enumerate(CAT_NAMES)}
    kernel = ROLES.index("kernel")
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            ev.drop("entries of traceEvents that are not objects", 1)
            continue
        if e.get("ph") != "X":
            if e.get("ph") in ("B", "E"):
                ev.drop(f"ph {e['ph']} events (begin/end pairs are not read)", 1)
            continue
        cat = e.get("cat")
        if not isinstance(cat, str):
            ev.drop("complete events without a category", 1)
            continue
        role = CATEGORIES.get(cat)
        if role is None:
            ev.drop(f"category {cat} (not imported)" if cat in SKIPPED else "complete events of other categories", 1)
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ts_ns = _time_ns(e, "ts", i, p)
        dur_ns = _time_ns(e, "dur", i, p)
        name = event_name(e.get("name"))
        # The name as the fast scanner keys it (written between quotes); one UTF-8 cannot encode
        # (a lone surrogate) is kept escaped, and made valid text with the others (`name_labels`).
        try:
            raw_name = json.dumps(name, ensure_ascii=False)[1:-1].encode()
        except UnicodeEncodeError:
            raw_name = json.dumps(name)[1:-1].encode()
        pg = process_group(args) if ROLES.index(role) == kernel and COLLECTIVE.match(name) else None
        if pg is not None:
            pg_event.append(len(cols["role"]))
            pg_code.append(ev.process_groups.setdefault(pg, len(ev.process_groups)))
        cols["role"].append(ROLES.index(role))
        cols["cat"].append(cat_index[cat])
        cols["name"].append(ev.names.setdefault(raw_name, len(ev.names)))
        cols["pid"].append(_loose_int(e.get("pid")))
        cols["tid"].append(_loose_int(e.get("tid")))
        cols["ts_ns"].append(ts_ns)
        cols["dur_ns"].append(dur_ns)
        for key, col in (("correlation", "corr"), ("stream", "stream"), ("device", "device"), ("bytes", "nbytes")):
            v = args.get(key)
            cols[col].append(_int_or_missing(v))
    for k, v in cols.items():
        getattr(ev, k).append(np.array(v, dtype=np.int64))
    ev.add(pg_event=np.array(pg_event, dtype=np.int64), pg_code=np.array(pg_code, dtype=np.int64))
    return ev


def us_to_ns(v: Any) -> int:
    """µs (an int, or a Decimal as json.loads(parse_float=Decimal) gives it) → ns, the
    decimals beyond the third cut off (towards zero).  TypeError for anything that is not a
    JSON number, ValueError for a number that is not finite or beyond int64 ns."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        raise TypeError("not a number")
    if isinstance(v, float):  # NaN / Infinity (json.loads reads them as floats)
        if not math.isfinite(v):
            raise ValueError("not finite")
        v = Decimal(v)
    elif isinstance(v, Decimal) and not v.is_finite():
        raise ValueError("not finite")
    if abs(v) > MAX_US:
        raise ValueError("beyond the int64 ns range")
    return int(_TRUNCATE.multiply(v, 1000))


def _time_ns(e: dict[str, Any], key: str, index: int, p: Path) -> int:
    """ns of an imported event's `key` ("ts", "dur"); the file is refused when it is missing
    or not a finite number within int64 ns (docs/FORMATS.md, values out of range)."""
    if key not in e:
        why = "has no " + key
    else:
        try:
            return us_to_ns(e[key])
        except TypeError:
            why = f"{key} is not a number: {_short(e[key])}"
        except ValueError as exc:
            why = f"{key} {_short(e[key])} µs is {exc}"
    raise InputError(f"traceEvents[{index}] ({_short(e.get('name', ''))}): {why}", path=p)


def _short(v: Any) -> str:
    """A value as JSON (a number as written), cut to 60 characters."""
    text = str(v) if isinstance(v, Decimal) else json.dumps(v, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


# Integers (pid, tid, args) of more than 18 digits are unknown, as the fast scanner reads them.
_INT_LIMIT = 10 ** 18


def _int_or_missing(v: Any) -> int:
    """An args integer, MISSING when it is not one or has more than 18 digits."""
    if isinstance(v, int) and not isinstance(v, bool) and -_INT_LIMIT < v < _INT_LIMIT:
        return v
    return MISSING


def _loose_int(v: Any) -> int:
    """A pid/tid: an integer, or the first number inside a string ("stream 7")."""
    if isinstance(v, str):
        m = re.search(r"\d+", v)
        return _int_or_missing(int(m.group())) if m and len(m.group()) <= 18 else MISSING
    return _int_or_missing(v)

