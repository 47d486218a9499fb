"""The RunData of a Kineto trace from its event columns (`Events`): the activity table (GPU
work with its launch, runtime calls, CPU ranges with self time), the markers (profiler
steps, user annotations), the GPU-side ranges (``gpu_user_annotation``) and the process group
of each NCCL kernel.  Times are ns on the trace's clock (`clock`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.errors import InputError
from perfdiff.importers.common import Note, text_notes
from perfdiff.importers.kineto.clock import trace_clock
from perfdiff.importers.kineto.events import ANNOTATION_CATS, CAT_NAMES, ROLES, STEP, Events
from perfdiff.importers.kineto.join import correlate
from perfdiff.importers.kineto.manifest import kineto_manifest
from perfdiff.importers.kineto.names import short_kernel_name
from perfdiff.importers.kineto.process_groups import COLLECTIVE
from perfdiff.model.intervals import self_time_ns
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, categorical, concat_parts, constant_categorical, dense_codes, empty_table

__all__ = ["build"]


def build(p: Path, ev: Events, group: str, skip: frozenset[str] = frozenset()) -> RunData:
    """The RunData of the events `ev` read from `p` (see import_kineto for `group`, `skip`)."""
    ev.header = ev.text.fix_json(ev.header, "header fields")
    ev.canonical()  # the file's order of events is no input: shuffled, the same tables
    role = ev.column("role")
    n = len(role)
    ts = ev.column("ts_ns")
    try:
        clock = trace_clock(ev.header, ts)
    except ValueError as exc:
        raise InputError(str(exc), path=p) from None
    dur = ev.column("dur_ns")
    names = ev.name_labels()
    name_code = ev.column("name")
    _check_range(p, ts, dur, clock.offset_ns(), names, name_code)
    backwards = dur < 0
    if backwards.any():  # the bundle holds no interval that ends before it starts
        ev.drop("events with a negative duration", int(backwards.sum()))
        ev.notes.append(Note("dropped-negative-duration",
                             f"{int(backwards.sum())} events with a negative duration dropped"))
        role = np.where(backwards, -1, role)
    start = ts + clock.offset_ns()
    end = start + dur
    pid, tid = ev.column("pid"), ev.column("tid")
    corr, stream, device, nbytes = ev.column("corr"), ev.column("stream"), ev.column("device"), ev.column("nbytes")
    cat = ev.column("cat")
    notes = list(ev.notes)
    if clock.note() is not None:
        notes.append(clock.note())
    is_step = np.zeros(n, dtype=bool)
    step_names = np.array([bool(STEP.match(x)) for x in names], dtype=bool)
    if len(names):
        is_step = step_names[name_code] & (role == ROLES.index("cpu"))

    parts: list[Part] = []
    process_groups = empty_table("process_groups")
    # GPU work
    api_rows = np.flatnonzero(role == ROLES.index("api"))
    gpu_rows = np.flatnonzero((role >= 0) & (role <= ROLES.index("memset")))
    launch_row = np.full(n, -1, dtype=np.int64)  # the runtime call of each GPU event, by correlation id
    launch_row[gpu_rows] = correlate(corr, api_rows, corr[gpu_rows])
    for r_name in ("kernel", "memcpy", "memset"):
        rows = np.flatnonzero(role == ROLES.index(r_name))
        if len(rows) == 0:
            continue
        lr = launch_row[rows]
        hit = lr >= 0
        launch = np.where(hit, start[np.where(hit, lr, 0)], MISSING)
        ltid = np.where(hit, tid[np.where(hit, lr, 0)], MISSING)
        # A GPU event's pid is its device and its tid its stream; args.device / args.stream
        # stand in when they are not numbers.
        dev = np.where(pid[rows] >= 0, pid[rows], device[rows])
        dcodes, duniq = dense_codes(np.where(dev >= 0, dev, 0))
        dev_labels = [f"GPU {int(d)}" for d in duniq]
        if (dev < 0).any():
            notes.append(Note("no-device", f"{int((dev < 0).sum())} {r_name} events without a device: put on GPU 0"))
        strm = np.where(tid[rows] >= 0, tid[rows], stream[rows])
        fn_codes, fn_labels = _function_codes(name_code[rows], names)
        if r_name == "kernel":
            process_groups = _process_groups(rows, sum(len(x) for x in parts), fn_codes, fn_labels, ev)
            if group == "short":
                fn_labels = [short_kernel_name(x) for x in fn_labels]
        s, e = start[rows], end[rows]
        cols = {"function": categorical(fn_codes, fn_labels), "kind": constant_categorical(r_name, len(rows)),
                "device": categorical(dcodes, dev_labels), "start_ns": s, "end_ns": e, "busy_ns": e - s,
                "launch_ns": launch, "tid": ltid, "stream": strm, "correlation": corr[rows]}
        if r_name != "kernel":
            cols["bytes"] = nbytes[rows]
        parts.append(Part("activity", cols))
        ev.counts[r_name] = len(rows)
        ev.counts[f"{r_name}_launch_joined"] = int(hit.sum())
    # CPU side: runtime calls and CPU ranges, self time over both on each thread
    cpu_rows = np.flatnonzero((role == ROLES.index("cpu")) & ~is_step)
    host_rows = np.concatenate((api_rows, cpu_rows))
    if len(host_rows):
        busy = self_time_ns(tid[host_rows], start[host_rows], end[host_rows])
        k = len(api_rows)
        for rows, b, kind in ((api_rows, end[api_rows] - start[api_rows], "api"), (cpu_rows, busy[k:], "cpu")):
            if len(rows) == 0:
                continue
            fn_codes, fn_labels = _function_codes(name_code[rows], names)
            parts.append(Part("activity", {
                "function": categorical(fn_codes, fn_labels), "kind": constant_categorical(kind, len(rows)),
                "device": constant_categorical("Host", len(rows)), "start_ns": start[rows], "end_ns": end[rows],
                "busy_ns": b, "tid": tid[rows], "correlation": corr[rows]}))
            ev.counts[kind] = len(rows)
    if (role == ROLES.index("gpu_range")).any():
        skip = skip - {"stream"}  # the range tree places GPU work in the GPU-side ranges by stream
    activity = concat_parts("activity", parts, skip)
    if len(activity) == 0:
        found = ", ".join(f"{k}: {v}" for k, v in ev.dropped.items()) or "none"
        raise InputError(f"trace has no GPU kernels, memcpys, runtime calls or CPU ops (skipped: {found})", path=p)
    # markers: ProfilerStep#N and user annotations (host side)
    step_rows = np.flatnonzero(is_step)
    ann_rows = np.flatnonzero((role == ROLES.index("cpu")) & ~is_step
                              & np.isin(cat, [CAT_NAMES.index(c) for c in ANNOTATION_CATS]))
    mparts = []
    for rows, source in ((step_rows, "profiler_step"), (ann_rows, "annotation")):
        if len(rows):
            fn_codes, fn_labels = _function_codes(name_code[rows], names)
            mparts.append(Part("markers", {"name": categorical(fn_codes, fn_labels), "start_ns": start[rows],
                                           "end_ns": end[rows], "tid": tid[rows],
                                           "source": constant_categorical(source, len(rows))}))
            ev.counts[f"markers_{source}"] = len(rows)
    markers = concat_parts("markers", mparts)
    gpu_ranges = _gpu_ranges(np.flatnonzero(role == ROLES.index("gpu_range")), name_code, names, pid, tid, device,
                             stream, start, end)
    if len(gpu_ranges):
        ev.counts["gpu_ranges"] = len(gpu_ranges)
    notes += text_notes(ev.text)  # every string read is made valid text by now
    cat_counts = {CAT_NAMES[int(c)]: int(k) for c, k in zip(*np.unique(cat, return_counts=True), strict=True) if c < len(CAT_NAMES)}
    manifest = kineto_manifest(p, ev, clock, pid, role, tid, activity, notes, cat_counts)
    return RunData(manifest=manifest, activity=activity, samples=empty_table("samples"), markers=markers,
                   path=str(p), notes=notes, gpu_ranges=gpu_ranges, process_groups=process_groups)


def _process_groups(rows: np.ndarray, first_row: int, fn_codes: np.ndarray, fn_labels: list[str],
                    ev: Events) -> pd.DataFrame:
    """The process-group table (PROCESS_GROUP_COLUMNS) of the kernel events `rows` (names
    fn_labels[fn_codes]), which are the activity rows from `first_row` on: one row per NCCL
    collective kernel."""
    nccl = np.array([COLLECTIVE.match(x) is not None for x in fn_labels], dtype=bool)
    k = np.flatnonzero(nccl[fn_codes])
    if len(k) == 0:
        return empty_table("process_groups")
    pg = ev.group_codes(rows[k])
    known = list(ev.process_groups)  # in code order
    listed = np.array([i if g[1] is not None else -1 for i, g in enumerate(known)] + [-1], dtype=np.int64)
    return pd.DataFrame({"row": first_row + k,
                         "group": categorical(pg, [ev.text.fix(g[0], "process-group names") for g in known]),
                         "ranks": categorical(listed[pg], [g[1] or "" for g in known])})


def _gpu_ranges(rows: np.ndarray, name_code: np.ndarray, names: list[str], pid: np.ndarray, tid: np.ndarray,
                device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """The GPU-side ranges (``gpu_user_annotation``) of the events `rows`: pid is the device
    and tid the stream, as for GPU work (args.device / args.stream when they are not numbers)."""
    if len(rows) == 0:
        return empty_table("gpu_ranges")
    dev = np.where(pid[rows] >= 0, pid[rows], device[rows])
    dcodes, duniq = dense_codes(np.where(dev >= 0, dev, 0))
    fn_codes, fn_labels = _function_codes(name_code[rows], names)
    return pd.DataFrame({"name": categorical(fn_codes, fn_labels),
                         "device": categorical(dcodes, [f"GPU {int(d)}" for d in duniq]),
                         "stream": np.where(tid[rows] >= 0, tid[rows], stream[rows]).astype(np.int64),
                         "start_ns": start[rows], "end_ns": end[rows]})


_INT64_MAX = 2 ** 63 - 1


def _check_range(p: Path, ts: np.ndarray, dur: np.ndarray, offset_ns: int, names: list[str],
                 name_code: np.ndarray) -> None:
    """InputError naming the first event whose start or end (after the clock's offset) lies
    beyond int64 ns (docs/FORMATS.md, values out of range)."""
    room = _INT64_MAX - offset_ns  # offset_ns is in [0, 2**62]: no overflow below
    bad = (ts > room) | (ts > room - np.maximum(dur, 0)) | (ts < -room)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"event {names[int(name_code[i])][:60]!r} at ts {int(ts[i]) / 1000:g} µs: its start or "
                         "end lies beyond the int64 ns range", path=p)


def _function_codes(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """(dense codes, their labels) of the name codes `codes`."""
    local, uniq = dense_codes(codes)
    return local, [names[int(u)] for u in uniq]
