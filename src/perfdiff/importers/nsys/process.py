"""Which process of an nsys export is imported: `pid`, or the one that launched the most GPU
work; rows of the others (and intervals that end before they start) are dropped and counted."""
from __future__ import annotations

import numpy as np

from perfdiff.errors import InputError, SeveralProcesses
from perfdiff.importers.common import Note
from perfdiff.importers.nsys.db import KERNEL, PID_MASK, Export
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import dense_codes

__all__ = ["choose_pid", "only_pid", "refuse_several", "row_pids", "sampled_pids"]

SAMPLED_ROWS = 256  # kernel rows looked up, spread over the table, before it is read whole


def sampled_pids(x: Export) -> set[int]:
    """The pids of up to SAMPLED_ROWS kernel rows spread evenly over the kernel table (by rowid:
    one B-tree lookup each, milliseconds).  The ranks of a job, or a server and its workers,
    launch kernels all through a capture, so a sample usually shows a second process before
    the table is read; a process with few kernels is found by `row_pids` after the read."""
    if not x.has(KERNEL) or "globalPid" not in x.cols(KERNEL):
        return set()
    top = x.con.execute(f"SELECT MAX(rowid) FROM {KERNEL}").fetchone()[0]
    if not isinstance(top, int):
        return set()
    rowids = sorted({1 + (top - 1) * i // (SAMPLED_ROWS - 1) for i in range(SAMPLED_ROWS)})
    marks = ",".join("?" * len(rowids))
    rows = x.con.execute(f"SELECT DISTINCT globalPid FROM {KERNEL} WHERE rowid IN ({marks}) AND globalPid IS NOT NULL",
                         rowids).fetchall()
    return {(int(g) >> 24) & PID_MASK for (g,) in rows if isinstance(g, int)}


def row_pids(kern: dict[str, np.ndarray]) -> set[int]:
    """The pids in the kernel rows `kern` (their globalPid; NULL rows carry none)."""
    g = kern.get("globalPid")
    if g is None:
        return set()
    g = g[g != MISSING]
    return {int(p) for p in np.unique((g >> 24) & PID_MASK)}


def refuse_several(x: Export, pids: set[int]) -> None:
    """SeveralProcesses naming the export and `pids` when they are two or more."""
    if len(pids) >= 2:
        shown = ", ".join(str(p) for p in sorted(pids)[:8]) + (" …" if len(pids) > 8 else "")
        raise SeveralProcesses(f"several processes launched kernels (pids {shown}); pick one with --pid", path=x.path)


def choose_pid(x: Export, gpu_parts: dict[str, dict[str, np.ndarray]]) -> int | None:
    """The pid to import, from the GPU tables' globalPid (None: the rows carry none)."""
    pids = np.concatenate([(c["globalPid"] >> 24) & PID_MASK for c in gpu_parts.values() if "globalPid" in c]
                          or [np.empty(0, np.int64)])
    if len(pids) == 0:
        if x.want_pid is not None:
            x.notes.append(Note("pid-not-applied", f"kernel rows carry no process id: --pid {x.want_pid} not applied"))
        return None
    codes, uniq = dense_codes(pids)
    counts = np.bincount(codes, minlength=len(uniq))
    x.process_counts = {int(u): int(c) for u, c in zip(uniq, counts, strict=True)}
    if x.want_pid is not None:
        if x.want_pid not in x.process_counts:
            have = ", ".join(f"{u} ({c} GPU activities)" for u, c in sorted(x.process_counts.items()))
            raise InputError(f"no GPU work of pid {x.want_pid} in the export; processes with GPU work: {have}",
                             path=x.path)
        return x.want_pid
    best = int(uniq[np.argmax(counts)])
    if len(uniq) > 1:
        roles, own = _roles(gpu_parts, best)
        how = ("compare each as a rank with --ranks all" if own else
               "compare them process by process (perfdiff.compare_processes; `perfdiff compare` does without --pid)")
        x.notes.append(Note("several-processes", f"{len(uniq)} processes launched GPU work; imported pid {best} "
                                                 f"(the most): {roles}; choose another with --pid, or {how}"))
    return best


def _roles(gpu_parts: dict[str, dict[str, np.ndarray]], imported: int) -> tuple[str, bool]:
    """Each process's part in the export: its GPUs and GPU activities, and whether the
    processes look like the ranks of a job (each on a GPU of its own: True) or share GPUs (a
    server and its workers, a launcher and its children)."""
    pids = np.concatenate([(c["globalPid"] >> 24) & PID_MASK for c in gpu_parts.values() if "globalPid" in c])
    devs = np.concatenate([c.get("deviceId", np.full(len(c["globalPid"]), -1)) for c in gpu_parts.values()
                           if "globalPid" in c])
    codes, uniq = dense_codes(pids)
    counts = np.bincount(codes, minlength=len(uniq))
    gpus = {int(u): sorted({int(d) for d in np.unique(devs[codes == i]) if d >= 0}) for i, u in enumerate(uniq)}
    shown = []
    for u, n in sorted(zip(uniq.tolist(), counts.tolist(), strict=True), key=lambda t: (-t[1], t[0]))[:6]:
        where = ", ".join(f"GPU {d}" for d in gpus[u]) or "GPU unknown"
        shown.append(f"pid {u} ({where}; {n} GPU activities{'; imported' if u == imported else ''})")
    more = f" and {len(uniq) - 6} more" if len(uniq) > 6 else ""
    used = [tuple(g) for g in gpus.values()]
    own = all(len(g) == 1 for g in used) and len(set(used)) == len(used)
    role = ("each on a GPU of its own, as the ranks of one job" if own
            else "sharing GPUs, as a server and its workers do: not ranks")
    return f"{'; '.join(shown)}{more} — {role}", own


def only_pid(x: Export, cols: dict[str, np.ndarray], key: str, what: str) -> dict[str, np.ndarray]:
    """Rows of the imported process (and, when the table has both, with end >= start)."""
    keep = None
    if x.pid is not None and key in cols:
        keep = ((cols[key] >> 24) & PID_MASK) == x.pid
        if not keep.all():
            x.drop(f"{what}: other processes", int((~keep).sum()))
    if "start" in cols and "end" in cols:
        backwards = cols["end"] < cols["start"]
        if backwards.any():  # the bundle holds no interval that ends before it starts
            n = int((backwards & (keep if keep is not None else True)).sum())
            x.drop(f"{what}: end before start", n)
            if n:
                x.notes.append(Note("dropped-end-before-start", f"{n} {what} rows that end before they start dropped"))
            keep = ~backwards if keep is None else keep & ~backwards
    if keep is None or keep.all():
        return cols
    return {k: v[keep] for k, v in cols.items()}
