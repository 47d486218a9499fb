"""Frozen records to JSON-ready data and back, by their declared fields and types.

`to_data(record)` writes a dataclass as a dict of exactly its fields: enums as their values,
tuples as lists, nested records as dicts, numpy arrays as {"dtype", "values"}, NaN as null and
±∞ as the strings "inf" / "-inf" (JSON has neither).  Where a field may hold one of several
record types, the dict names its type under "record".  `from_data(cls, data)` reads it back
and checks it against the record's fields: an unknown key, a missing key or a value of the
wrong kind raises RecordError naming the record and the key, so a renamed field is refused
rather than read as absent.  `schema(cls)` lists every record reachable from `cls` with its
fields' types: the shape a format version stands for.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from typing import Any, Union

import numpy as np

__all__ = ["RecordError", "field_types", "from_data", "read", "schema", "to_data"]

TAG = "record"  # names a record's type where a field allows several


class RecordError(ValueError):
    """Data that does not match the record it is read as."""


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """The declared type of each field of record class `cls`."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def field_types(cls: type) -> dict[str, Any]:
    """The declared type of each field of record class `cls`, in their order."""
    return dict(_hints(cls))


def read(t: Any, data: Any, where: str) -> Any:
    """A value of declared type `t` that `to_data` wrote as `data` (`where`: its place, for
    the error); RecordError where it does not match."""
    return _read(t, data, where)


def _is_record(t: Any) -> bool:
    return isinstance(t, type) and dataclasses.is_dataclass(t)


def _union_args(t: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(t)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(t)
    return None


def _tagged(t: Any) -> bool:
    """Whether values of declared type `t` carry their record's name (a union of records)."""
    args = _union_args(t)
    return args is not None and sum(1 for a in args if _is_record(a)) > 1


# --- writing -------------------------------------------------------------------------------

def _float(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def to_data(x: Any, declared: Any = Any) -> Any:
    """`x` as JSON-ready data (see the module's docstring); `declared`: its field's type."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        hints = _hints(type(x))
        out = {TAG: type(x).__name__} if _tagged(declared) else {}
        for name, t in hints.items():
            out[name] = to_data(getattr(x, name), t)
        return out
    if isinstance(x, enum.Enum):
        return to_data(x.value)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return _float(float(x)) if declared is float else int(x)
    if isinstance(x, (float, np.floating)):
        return _float(float(x))
    if isinstance(x, np.ndarray):
        values = x.tolist()
        if x.dtype.kind == "f":
            values = [_float(v) for v in values]
        return {"dtype": x.dtype.str, "values": values}
    if isinstance(x, dict):
        kt, vt = (typing.get_args(declared) or (Any, Any)) if typing.get_origin(declared) is dict else (Any, Any)
        return {str(to_data(k, kt)): to_data(v, vt) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [to_data(v, _item_type(declared, i)) for i, v in enumerate(x)]
    return x


def _item_type(declared: Any, i: int) -> Any:
    """The declared type of item `i` of a tuple or list of declared type `declared`."""
    args = typing.get_args(declared)
    if typing.get_origin(declared) in (tuple, list, set, frozenset) and args:
        if len(args) == 2 and args[1] is Ellipsis or typing.get_origin(declared) is not tuple:
            return args[0]
        return args[i] if i < len(args) else Any
    return Any


# --- reading -------------------------------------------------------------------------------

def from_data(cls: type, data: Any, where: str = "") -> Any:
    """The record of class `cls` that `to_data` wrote as `data`; RecordError where it does not
    match the record's fields (unknown or missing keys, values of another kind)."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    unknown = [k for k in data if k not in hints and k != TAG]
    if unknown:
        raise RecordError(f"{where}: unknown field {unknown[0]!r}")
    missing = [k for k in hints if k not in data]
    if missing:
        raise RecordError(f"{where}: field {missing[0]!r} missing")
    kwargs = {name: _read(t, data[name], f"{where}.{name}") for name, t in hints.items()}
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    obj = cls(**{k: v for k, v in kwargs.items() if k in fields})
    for k, v in kwargs.items():  # fields set after construction (init=False)
        if k not in fields:
            object.__setattr__(obj, k, v)
    return obj


def _read(t: Any, v: Any, where: str) -> Any:
    if t is Any or t is object:
        return v
    args = _union_args(t)
    if args is not None:
        return _read_union(args, v, where)
    if t is type(None):
        if v is not None:
            raise RecordError(f"{where}: expected null")
        return None
    if _is_record(t):
        return from_data(t, v, where)
    if isinstance(t, type) and issubclass(t, enum.Enum):
        try:
            return t(v)
        except ValueError:
            raise RecordError(f"{where}: {v!r} is no {t.__name__}") from None
    if t is float:
        return _read_float(v, where)
    if t is bool:
        return _expect(v, bool, where)
    if t is int:
        if isinstance(v, bool):
            raise RecordError(f"{where}: expected an integer")
        return _expect(v, int, where)
    if t is str:
        return _expect(v, str, where)
    if t is np.ndarray:
        return _read_array(v, where)
    origin, targs = typing.get_origin(t), typing.get_args(t)
    if origin in (tuple, list, set, frozenset):
        items = _expect(v, list, where)
        out = [_read(_item_type(t, i), x, f"{where}[{i}]") for i, x in enumerate(items)]
        if origin is tuple and targs and not (len(targs) == 2 and targs[1] is Ellipsis) and len(out) != len(targs):
            raise RecordError(f"{where}: expected {len(targs)} items, got {len(out)}")
        return origin(out)
    if origin is dict:
        kt, vt = targs or (Any, Any)
        d = _expect(v, dict, where)
        return {_read_key(kt, k, where): _read(vt, x, f"{where}[{k!r}]") for k, x in d.items()}
    raise RecordError(f"{where}: cannot read a value of type {t!r}")


def _read_union(args: tuple[Any, ...], v: Any, where: str) -> Any:
    if v is None and type(None) in args:
        return None
    records = [a for a in args if _is_record(a)]
    if len(records) > 1:
        if not isinstance(v, dict) or v.get(TAG) not in {r.__name__ for r in records}:
            raise RecordError(f"{where}: expected one of {', '.join(r.__name__ for r in records)} named by "
                              f"{TAG!r}")
        cls = next(r for r in records if r.__name__ == v[TAG])
        return from_data(cls, v, where)
    for a in args:
        if a is type(None):
            continue
        try:
            return _read(a, v, where)
        except RecordError:
            continue
    raise RecordError(f"{where}: {v!r} is none of {args!r}")


def _read_float(v: Any, where: str) -> float:
    if v is None:
        return math.nan
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RecordError(f"{where}: expected a number")
    return float(v)


def _read_key(t: Any, k: str, where: str) -> Any:
    if t is int:
        try:
            return int(k)
        except ValueError:
            raise RecordError(f"{where}: key {k!r} is not an integer") from None
    return _read(t, k, where) if t is not str else k


def _read_array(v: Any, where: str) -> np.ndarray:
    d = _expect(v, dict, where)
    if set(d) != {"dtype", "values"}:
        raise RecordError(f"{where}: an array is {{\"dtype\", \"values\"}}")
    try:
        dtype = np.dtype(d["dtype"])
        values = d["values"]
        if dtype.kind == "f":
            values = [_read_float(x, where) for x in values]
        return np.asarray(values, dtype=dtype).reshape(-1) if values else np.zeros(0, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"{where}: not an array ({exc})") from None


def _expect(v: Any, kind: type, where: str) -> Any:
    if not isinstance(v, kind):
        raise RecordError(f"{where}: expected {kind.__name__}, got {type(v).__name__}")
    return v


# --- shape ---------------------------------------------------------------------------------

def schema(cls: type) -> list[str]:
    """Every record reachable from `cls`, once each in order of discovery: a line
    "Record: field type, field type, …" (the types as declared), and a line "Enum: values" for
    each enumeration: what a version of a format built on `cls` holds."""
    lines: list[str] = []
    seen: set[type] = set()

    def visit(t: Any) -> None:
        for a in typing.get_args(t):
            visit(a)
        if isinstance(t, type) and t not in seen and (_is_record(t) or issubclass(t, enum.Enum)):
            seen.add(t)
            if _is_record(t):
                hints = _hints(t)
                lines.append(f"{t.__name__}: " + ", ".join(f"{k} {_type_name(v)}" for k, v in hints.items()))
                for v in hints.values():
                    visit(v)
            else:
                lines.append(f"{t.__name__}: " + ", ".join(str(m.value) for m in t))

    visit(cls)
    return lines


def _type_name(t: Any) -> str:
    if t is type(None):
        return "None"
    if t is Ellipsis:
        return "..."
    args = typing.get_args(t)
    if _union_args(t) is not None:
        return " | ".join(_type_name(a) for a in args)
    origin = typing.get_origin(t)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    if t is Any:
        return "Any"
    return getattr(t, "__name__", str(t))
