"""The general Kineto reader: ``json.loads`` and a Python loop over the events, into the same
`Events` columns as the fast scanner.  It reads any valid JSON trace and takes over a file
whose layout the fast scanner does not decode (manifest ``source.reader``: "json")."""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from perfdiff.errors import InputError
from perfdiff.importers.kineto.events import CAT_NAMES, CATEGORIES, ROLES, SKIPPED, Events
from perfdiff.model.schema import MISSING

__all__ = ["general_events", "us_to_ns"]


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
    try:
        # Decimals stay text so that "1623142623460111.123" µs converts to ns exactly.
        doc = json.loads(raw, parse_float=str)
    except ValueError as exc:
        raise InputError(f"invalid JSON ({exc})", path=p) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc})", path=p) from None
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
    cat_index = {nm: i for i, nm in enumerate(CAT_NAMES)}
    for e in events:
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
        try:
            ts_ns = us_to_ns(e["ts"])
            dur_ns = us_to_ns(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            ev.drop("events with a missing or bad ts/dur", 1)
            continue
        raw_name = json.dumps(str(e.get("name", "")), ensure_ascii=False)[1:-1].encode()
        cols["role"].append(ROLES.index(role))
        cols["cat"].append(cat_index[cat])
        cols["name"].append(ev.names.setdefault(raw_name, len(ev.names)))
        cols["pid"].append(_loose_int(e.get("pid")))
        cols["tid"].append(_loose_int(e.get("tid")))
        cols["ts_ns"].append(ts_ns)
        cols["dur_ns"].append(dur_ns)
        for key, col in (("correlation", "corr"), ("stream", "stream"), ("device", "device"), ("bytes", "nbytes")):
            v = args.get(key)
            cols[col].append(int(v) if isinstance(v, int) and not isinstance(v, bool) else MISSING)
    for k, v in cols.items():
        getattr(ev, k).append(np.array(v, dtype=np.int64))
    return ev


def us_to_ns(v: Any) -> int:
    """µs (int, or decimal text as json.loads(parse_float=str) gives it) → ns, truncated."""
    if isinstance(v, bool):
        raise TypeError
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, str):
        if "e" in v or "E" in v:
            return int(round(float(v) * 1000))
        whole, _, frac = v.partition(".")
        neg = whole.startswith("-")
        ns = abs(int(whole or "0")) * 1000 + int((frac + "000")[:3])
        return -ns if neg else ns
    if isinstance(v, float):
        return int(round(v * 1000))
    raise TypeError


def _loose_int(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        m = re.search(r"\d+", v)
        return int(m.group()) if m else MISSING
    return MISSING

