"""Align the two runs' functions: one row per (function, device, kind) of either run.

A CPU-side range present in one run only is matched with its near-identical counterpart in
the other (the same step under another class name, e.g. a DataLoader iterator that became
multi-process), so its change shows as one row rather than vanished + new.
"""
from __future__ import annotations

import numpy as np

from perfdiff.attribute import CycleMatrix

RENAME_MIN_RATIO = 0.85
RENAME_MAX_CANDIDATES = 300


def align(mn: CycleMatrix, ma: CycleMatrix) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Union of the two runs' function keys; index arrays into each (-1 = absent).

    A CPU-side range present in one run only is matched with its near-identical counterpart
    in the other (the same step under another class name, e.g. a DataLoader iterator that
    became multi-process), so its change shows as one row rather than vanished + new.
    Returns the matched (normal name, abnormal name) pairs too.
    """
    kn = list(map(tuple, mn.keys[["name", "device", "kind"]].to_numpy().tolist()))
    ka = list(map(tuple, ma.keys[["name", "device", "kind"]].to_numpy().tolist()))
    pos_n = {k: i for i, k in enumerate(kn)}
    pos_a = {k: i for i, k in enumerate(ka)}
    renames = match_renamed([k for k in kn if k not in pos_a], [k for k in ka if k not in pos_n])
    for old, new in renames:  # the abnormal side's row is read under the normal side's key
        pos_a[old] = pos_a.pop(new)
    union = sorted(set(pos_n) | set(pos_a))
    idx_n = np.array([pos_n.get(k, -1) for k in union], dtype=np.int64)
    idx_a = np.array([pos_a.get(k, -1) for k in union], dtype=np.int64)
    names = {old: new[0] for old, new in renames}
    union = [(f"{k[0]} ⇄ {names[k]}", k[1], k[2]) if k in names else k for k in union]
    return union, idx_n, idx_a, [(old[0], new[0]) for old, new in renames]


def match_renamed(vanished: list[tuple], new: list[tuple]) -> list[tuple[tuple, tuple]]:
    """Mutual best matches (difflib ratio ≥ 0.85) between vanished and new CPU ranges."""
    import difflib

    v = [k for k in vanished if k[2] == "cpu"][:RENAME_MAX_CANDIDATES]
    w = [k for k in new if k[2] == "cpu"][:RENAME_MAX_CANDIDATES]
    if not v or not w:
        return []
    score = np.zeros((len(v), len(w)))
    for i, a in enumerate(v):
        sm = difflib.SequenceMatcher(None, a[0], autojunk=False)
        for j, b in enumerate(w):
            if a[1] == b[1]:
                sm.set_seq2(b[0])
                score[i, j] = sm.ratio()
    out = []
    for i in range(len(v)):
        j = int(np.argmax(score[i]))
        if score[i, j] >= RENAME_MIN_RATIO and int(np.argmax(score[:, j])) == i:
            out.append((v[i], w[j]))
    return out


