"""Import an Nsight Systems SQLite export (``nsys export --type sqlite``) as a RunData.

What is read (docs/FORMATS.md has the tables):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` → activity kind ``kernel``: demangled name (short name with
  ``group="short"``), ``GPU <deviceId>``, stream, correlation, wall-clock start/end;
  ``launch_ns`` and ``tid`` from the CUDA runtime/driver call with the same correlationId in
  the same process (runtime rows of event class 0/1 only: class 67 backtrace rows repeat ids).
- ``…_MEMCPY`` / ``…_MEMSET`` → kinds ``memcpy`` ("Memcpy HtoD (Pinned -> Device)", as Kineto
  names them) and ``memset`` with bytes, joined to their launch the same way.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` → kind ``api`` (device "Host"), names without the ``_v7000``
  version suffix; synchronisation calls are ordinary runtime rows and come along.
- ``NVTX_EVENTS`` push/pop (59, 70) and start/end (60, 71) ranges → markers (source "nvtx")
  and kind ``cpu`` functions whose busy_ns is self time (`perfdiff.model.intervals`).  The name is
  ``text``, else the registered string ``textId``; a range in a non-default domain is named
  ``domain:text``.  A start/end range belongs to the thread that started it.  Unclosed
  ranges are dropped and counted; marks and thread names are not ranges.
- ``OSRT_API`` calls (event class 27) → kind ``host`` functions (read, poll, ioctl …), busy =
  self time (nested calls are subtracted); ``SCHED_EVENTS`` → kind ``host`` function
  ``oncpu``, one row per on-CPU interval of a thread (sched-in → sched-out).
- ``GPU_METRICS`` + ``TARGET_INFO_GPU_METRICS`` → samples (each covers [t, next t)).
- ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE`` → manifest GPUs; times become wall clock
  through ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``.  Capture-host environment tables
  (``TARGET_INFO_SYSTEM_ENV``, ``META_DATA_CAPTURE``) are never read.

Only one process is imported: ``pid``, or by default the one that launched the most GPU
work.  An export without a kernel table is read for its NVTX ranges and CPU-side tables
(an NVTX-only export); one with neither is refused (InputError).

The modules, one job each: `db` (the read-only connection, the schema, integer columns read
through `pages` — numpy straight from the SQLite B-tree pages — else SQL), `strings`, `process`
(which process), `gpu` (kernels, memcpys, memsets), `runtime` (CUDA calls and the launch join),
`nvtx`, `host` (OS runtime, scheduling), `metrics`, `manifest`.  `reference` is a plain reader
(SQL queries) that tests check the importer against.
"""
from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from perfdiff.bundle import RunData
from perfdiff.errors import InputError
from perfdiff.importers.common import Note, TextRepairs, text_notes
from perfdiff.importers.nsys.db import KERNEL, MEMCPY, RUNTIME, Export, connect
from perfdiff.importers.nsys.gpu import gpu_part, kernel_name_column, read_gpu_tables
from perfdiff.importers.nsys.host import osrt, sched
from perfdiff.importers.nsys.manifest import export_meta, nsys_manifest, session_start
from perfdiff.importers.nsys.metrics import gpu_metrics
from perfdiff.importers.nsys.nvtx import nvtx
from perfdiff.importers.nsys.process import choose_pid, only_pid, refuse_several, row_pids, sampled_pids
from perfdiff.importers.nsys.runtime import api_part, read_runtime, runtime_rows
from perfdiff.importers.nsys.strings import string_ids
from perfdiff.model.schema import MISSING
from perfdiff.model.tables import Part, concat_parts

__all__ = ["import_nsys"]


def import_nsys(path: str | Path, *, pid: int | None = None, group: str = "full",
                skip: frozenset[str] = frozenset(), cores: int | None = None,
                several_processes: str = "most") -> RunData:
    """Read the nsys SQLite export at `path` into a RunData (times: wall-clock ns).

    `pid` picks the process when the export holds several (default: the one with most GPU
    work; with `several_processes="raise"`, SeveralProcesses instead, once the kernel table
    shows a second process, before the rest is read); `group="short"` names kernels by their
    short name; `skip`: activity columns left unknown (see concat_parts); `cores`: CPU cores
    the import may keep busy (None: all).  Bad input raises InputError naming the file.
    """
    p = Path(path)
    if group not in ("full", "short"):
        raise ValueError(f"group must be 'full' or 'short', not {group!r}")
    if several_processes not in ("most", "raise"):
        raise ValueError(f"several_processes must be 'most' or 'raise', not {several_processes!r}")
    text = TextRepairs()
    con = connect(p, text)
    try:
        x = Export(con, p, pid, group, skip, cores, text)
        x.refuse_several = pid is None and several_processes == "raise"
        return _run(x)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"cannot read the SQLite export ({exc})", path=p) from None
    except UnicodeDecodeError:  # SQLite's own message quotes a damaged schema or page
        raise InputError("cannot read the SQLite export (it is damaged)", path=p) from None
    finally:
        con.close()


def _run(x: Export) -> RunData:
    meta = export_meta(x)
    if not (x.has("StringIds") or meta or any(t.startswith(("CUPTI_", "NVTX_", "TARGET_INFO_")) for t in x.tables)):
        raise InputError("SQLite file is not an Nsight Systems export (no StringIds, no CUPTI/NVTX tables)", path=x.path)
    nvtx_only = not x.has(KERNEL)
    if nvtx_only and not x.has("NVTX_EVENTS"):
        others = [label for table, label in ((RUNTIME, "CUDA API calls"), ("OSRT_API", "OS runtime calls"),
                                             (MEMCPY, "memcpys")) if x.has(table)]
        has = f" (it has {', '.join(others)})" if others else ""
        raise InputError(f"export has neither a CUDA kernel table {KERNEL} nor NVTX ranges{has}: nothing to "
                         "compare; capture with `nsys profile --trace=cuda,nvtx`", path=x.path)
    x.strings = string_ids(x)
    x.t0 = session_start(x)
    if nvtx_only:
        return _nvtx_only(x, meta)
    if x.refuse_several:
        refuse_several(x, sampled_pids(x))  # most exports of several processes: a few rows tell
    # The runtime table is the biggest (launches, syncs, copies): read it in a second
    # thread while this one reads the GPU tables (numpy releases the GIL in its loops),
    # where a second core is free for it.
    with ThreadPoolExecutor(max_workers=1) as pool:
        x.cols(RUNTIME)  # schema probe here, not in the helper thread
        rt_future = pool.submit(read_runtime, x) if x.has(RUNTIME) and x.cores >= 2 else None
        x.name_col = kernel_name_column(x)
        kern = x.read(KERNEL, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
                      + ([x.name_col] if x.name_col else []))
        if x.refuse_several:
            refuse_several(x, row_pids(kern))
        gpu_parts = read_gpu_tables(x, kern)
        if rt_future is not None:
            rt_raw = rt_future.result()
        else:
            rt_raw = read_runtime(x) if x.has(RUNTIME) else None
    x.pid = choose_pid(x, gpu_parts)
    for kind, cols in gpu_parts.items():
        gpu_parts[kind] = only_pid(x, cols, "globalPid", kind)
    runtime = runtime_rows(x, rt_raw)

    parts: list[Part] = []
    for kind, cols in gpu_parts.items():
        part = gpu_part(x, kind, cols, runtime)
        parts.append(part)
        x.counts[kind] = len(part)
    return _with_cpu_side(x, meta, parts, runtime)


def _nvtx_only(x: Export, meta: dict) -> RunData:
    """An export without GPU activity: its NVTX ranges (as CPU-side functions and markers),
    CUDA API calls and host tables.  Users who time their stages with NVTX alone compare
    those; the process is the one --pid names, else every process's ranges are read."""
    x.notes.append(Note("nvtx-only", "no CUDA kernel table: NVTX ranges and CPU-side tables only"))
    x.pid = x.want_pid
    runtime = runtime_rows(x, read_runtime(x)) if x.has(RUNTIME) else None
    return _with_cpu_side(x, meta, [], runtime)


def _with_cpu_side(x: Export, meta: dict, parts: list[Part], runtime: dict | None) -> RunData:
    """The run: `parts` (GPU work) with the CUDA API calls, NVTX ranges and host tables added."""
    api = None
    if runtime is not None:
        api = api_part(x, runtime)
        parts.append(api)
        x.counts["api"] = len(api)
    nvtx_part, markers = nvtx(x, api)
    if nvtx_part is not None:
        parts.append(nvtx_part)
        x.counts["cpu"] = len(nvtx_part)
    for part, label in ((osrt(x), "host_osrt"), (sched(x), "host_oncpu")):
        if part is not None:
            parts.append(part)
            x.counts[label] = len(part)
    activity = concat_parts("activity", parts, x.skip)
    host = activity["tid"].to_numpy()
    tids = sorted(int(t) for t in pd.unique(host[host != MISSING]))
    samples = gpu_metrics(x)  # before the manifest: its notes go into the manifest too
    manifest = nsys_manifest(x, meta, activity, tids)
    return RunData(manifest=manifest, activity=activity, samples=samples, markers=markers,
                   path=str(x.path), notes=list(x.notes) + text_notes(x.text))
