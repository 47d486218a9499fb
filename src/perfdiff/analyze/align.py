"""Align the two runs' functions: one row per (function, device, kind) of either run.

A CUDA runtime call present in one run only is matched with its HIP counterpart in the other
(runs on GPUs of two vendors: cudaLaunchKernel ⇄ hipLaunchKernel).  A CPU-side range present in
one run only is matched with its near-identical counterpart in the other (the same step under another class name, e.g. a DataLoader iterator that became
multi-process), so its change shows as one row rather than vanished + new.  Two names alike
only by what they share ("autograd::engine::evaluate_function: CloneBackward0" and
"…: CompiledFunctionBackward") are two steps: the parts that differ must share a word of
their own, or be numbers only (a source line that moved).  And where cycles are iterations,
the same step runs about as often in both runs.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from perfdiff.attribute import CycleMatrix
from perfdiff.model.cuda_names import MATCHED, hip_counterparts, strip_api_version
from perfdiff.model.schema import Kind

RENAME_MIN_RATIO = 0.85
RENAME_MAX_CANDIDATES = 300
RENAME_MAX_CALLS_RATIO = 1.5  # calls per cycle of a renamed step, the larger over the smaller
RENAME_MIN_SHARED_LETTERS = 5  # a word of its own that the parts only one name has share, not a suffix
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # camelCase words, acronyms, numbers


def align(mn: CycleMatrix, ma: CycleMatrix, per_iteration: bool = True
          ) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Union of the two runs' function keys; index arrays into each (-1 = absent).

    A CPU-side range present in one run only is matched with its near-identical counterpart
    in the other (the same step under another class name, e.g. a DataLoader iterator that
    became multi-process), so its change shows as one row rather than vanished + new.
    Returns the matched (normal name, abnormal name) pairs too.  `per_iteration`: the cycles
    are iterations, so a step runs about as often in each (windows' calls scale with speed).
    """
    kn = list(map(tuple, mn.keys[["name", "device", "kind"]].to_numpy().tolist()))
    ka = list(map(tuple, ma.keys[["name", "device", "kind"]].to_numpy().tolist()))
    pos_n = {k: i for i, k in enumerate(kn)}
    pos_a = {k: i for i, k in enumerate(ka)}
    calls_n = calls_a = None
    if per_iteration:
        calls_n = dict(zip(kn, (mn.calls_total / max(mn.own_ns.shape[1], 1)).tolist(), strict=True))
        calls_a = dict(zip(ka, (ma.calls_total / max(ma.own_ns.shape[1], 1)).tolist(), strict=True))
    vanished, new = [k for k in kn if k not in pos_a], [k for k in ka if k not in pos_n]
    renames = match_runtime(vanished, new)
    taken = {k for pair in renames for k in pair}
    renames += match_renamed([k for k in vanished if k not in taken], [k for k in new if k not in taken],
                             calls_n, calls_a)
    for old, new in renames:  # the abnormal side's row is read under the normal side's key
        pos_a[old] = pos_a.pop(new)
    union = sorted(set(pos_n) | set(pos_a))
    idx_n = np.array([pos_n.get(k, -1) for k in union], dtype=np.int64)
    idx_a = np.array([pos_a.get(k, -1) for k in union], dtype=np.int64)
    names = {old: new[0] for old, new in renames}
    union = [(f"{k[0]}{MATCHED}{names[k]}", k[1], k[2]) if k in names else k for k in union]
    return union, idx_n, idx_a, [(old[0], new[0]) for old, new in renames]


def match_runtime(vanished: list[tuple], new: list[tuple]) -> list[tuple[tuple, tuple]]:
    """CUDA runtime and driver calls of one run matched call for call with their HIP
    counterparts in the other (perfdiff.model.cuda_names.HIP_CALLS: cudaLaunchKernel ⇄
    hipLaunchKernel, cudaMemcpyAsync ⇄ hipMemcpyWithStream …), either way round, on the same
    device: runs on GPUs of two vendors.  Each call is matched once: every CUDA call with its
    most preferred HIP counterpart first, then with the next, among those not yet taken."""
    v = [k for k in vanished if k[2] == Kind.API]
    w = [k for k in new if k[2] == Kind.API]
    out: list[tuple[tuple, tuple]] = []
    taken: set[tuple] = set()
    for cuda, hip, cuda_first in ((v, w, True), (w, v, False)):
        by_name = {(strip_api_version(k[0]), k[1]): k for k in hip}
        wanted = [(k, hip_counterparts(k[0])) for k in cuda]
        # By preference: every call's first counterpart, then every call's second …
        for rank in range(max((len(c) for _, c in wanted), default=0)):
            for k, names in wanted:
                other = by_name.get((names[rank], k[1])) if rank < len(names) else None
                if other is not None and k not in taken and other not in taken:
                    taken |= {k, other}
                    out.append((k, other) if cuda_first else (other, k))
    return out


def match_renamed(vanished: list[tuple], new: list[tuple], calls_v: Mapping[tuple, float] | None = None,
                  calls_w: Mapping[tuple, float] | None = None) -> list[tuple[tuple, tuple]]:
    """Mutual best matches (difflib ratio ≥ 0.85) between vanished and new CPU ranges, among
    those whose calls (per cycle, or per run; `calls_v`, `calls_w` by key, where known) are
    within RENAME_MAX_CALLS_RATIO of each other."""
    import difflib

    v = [k for k in vanished if k[2] == Kind.CPU][:RENAME_MAX_CANDIDATES]
    w = [k for k in new if k[2] == Kind.CPU][:RENAME_MAX_CANDIDATES]
    if not v or not w:
        return []
    score = np.zeros((len(v), len(w)))
    for i, a in enumerate(v):
        sm = difflib.SequenceMatcher(None, a[0], autojunk=False)
        for j, b in enumerate(w):
            if a[1] == b[1] and _alike_calls(calls_v, a, calls_w, b):
                sm.set_seq2(b[0])
                r = sm.ratio()
                score[i, j] = r if r >= RENAME_MIN_RATIO and _alike_words(a[0], b[0]) else 0.0
    out = []
    for i in range(len(v)):
        j = int(np.argmax(score[i]))
        if score[i, j] >= RENAME_MIN_RATIO and int(np.argmax(score[:, j])) == i:
            out.append((v[i], w[j]))
    return out


def _alike_calls(calls_v: Mapping[tuple, float] | None, a: tuple, calls_w: Mapping[tuple, float] | None,
                 b: tuple) -> bool:
    """Whether a and b run about as often (True where either count is unknown)."""
    x = calls_v.get(a) if calls_v is not None else None
    y = calls_w.get(b) if calls_w is not None else None
    if x is None or y is None or not (np.isfinite(x) and np.isfinite(y)):
        return True
    lo, hi = min(x, y), max(x, y)
    return lo > 0 and hi <= RENAME_MAX_CALLS_RATIO * lo


def _alike_words(a: str, b: str) -> bool:
    """Whether the parts (camelCase words, numbers) that only one of a and b has are numbers
    only (a source line that moved), one within the other (Iter, Iterator), or share a word of
    their own: RENAME_MIN_SHARED_LETTERS letters in a row ("Process" in MultiProcessing and
    SingleProcess; not "elu" in Relu and Gelu, nor anything in Mul and Div once the "Backward"
    both have is set aside)."""
    pa, pb = _PART.findall(a), _PART.findall(b)
    shared = set(pa) & set(pb)
    da, db = [p for p in pa if p not in shared], [p for p in pb if p not in shared]
    if all(p.isdigit() for p in da + db):
        return True
    import difflib

    x, y = "".join(da), "".join(db)
    if x and y and (x in y or y in x):  # a word grown or cut: Iter, Iterator
        return True
    m = difflib.SequenceMatcher(None, x, y, autojunk=False).find_longest_match(0, len(x), 0, len(y))
    return sum(ch.isalpha() for ch in x[m.a:m.a + m.size]) >= RENAME_MIN_SHARED_LETTERS
