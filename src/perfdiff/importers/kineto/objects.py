"""Which keys the fast scanner gives to which event: the first key of each id after an
event's "ph", the keys that JSON readers would give elsewhere (a key twice in one object, the
keys of an object written with other keys before its "ph"), found without decoding the JSON."""
from __future__ import annotations

import re

import numpy as np

from perfdiff.importers.kineto.events import NeedSlowPath

__all__ = ["first_keys", "keys_of_the_next_object", "same_object"]

def first_keys(kid: np.ndarray, event_of: np.ndarray, nev: int, wanted: np.ndarray, n_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """(events x key ids) table: index of the first key of each id in each event, or -1; and
    the (first, later) key index pairs of an id met again after "ph" in one of those events.

    Only events with `wanted[event]` are filled (flows and metadata are half the keys); key ids
    run from 0 (a key not read) to `n_ids` - 1.
    """
    ki = np.flatnonzero((kid > 0) & wanted[event_of])  # event_of == -1 reads wanted[-1]: False
    kk = kid[ki].astype(np.uint8)
    by_id = np.argsort(kk, kind="stable")  # radix sort; keeps key order within an id
    ki, kk = ki[by_id], kk[by_id]
    ee = event_of[ki]
    # within one id the events are non-decreasing: keep the first key of each event
    first = np.r_[True, (ee[1:] != ee[:-1]) | (kk[1:] != kk[:-1])]
    table = np.full((nev, n_ids), -1, dtype=np.int64)
    table[ee[first], kk[first]] = ki[first]
    if first.all():
        return table, np.empty((0, 2), dtype=np.int64)
    head = np.maximum.accumulate(np.where(first, np.arange(len(ki)), 0))  # each key's group's first
    again = np.flatnonzero(~first)
    return table, np.stack((ki[head[again]], ki[again]), axis=1)


_BOUNDARY = re.compile(rb"}\s*,\s*{")


def keys_of_the_next_object(padded: bytes, colon: np.ndarray, kid: np.ndarray, ph_k: np.ndarray,
                             odd: np.ndarray) -> np.ndarray:
    """`kid` with the keys that lie between a complete event and the "ph" of the next event
    `odd`, after the last object boundary ("},{") between them, unread (0): they belong to
    the next object.  NeedSlowPath when there is no boundary: one object holds two "ph"."""
    kid = kid.copy()
    for n in odd.tolist():
        a, b = int(colon[ph_k[n - 1]]), int(colon[ph_k[n]])
        last = None
        for last in _BOUNDARY.finditer(padded, a, b):  # noqa: B007 - the last one is wanted
            pass
        if last is None:
            raise NeedSlowPath('an event with "ph" twice')
        first_after = int(np.searchsorted(colon, last.start()))
        kid[first_after:ph_k[n]] = 0
    return kid


def same_object(padded: bytes, pairs: np.ndarray) -> bool:
    """Whether any pair of key positions (colons) lies in one object: no "},{" between them.

    A later key after an object boundary belongs to an object whose first key is not "ph"
    (metadata events are written name first) and is not the event's."""
    return any(_BOUNDARY.search(padded, int(a), int(b)) is None for a, b in pairs.tolist())
