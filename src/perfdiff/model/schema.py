"""The run tables, their columns and units, and the names every stage shares.

Standard library only: collectors import it at start-up, before numpy or pandas.  The
on-disk format built from these is docs/FORMAT.md.
"""
from __future__ import annotations

from enum import Enum

from perfdiff.model.cuda_names import COLLECTIVE_KERNEL  # noqa: F401  (re-exported: the collective kernels' rule)

MISSING = -1
"""In memory, an optional integer column's unknown value (a Parquet null on disk).  None of
those columns (launch_ns, tid, stream, correlation, bytes) can be negative."""

# Column name → dtype kind.  "str" columns are dictionary-encoded on disk and categorical in
# memory; "i8?" columns are nullable int64 on disk and MISSING in memory.  Times are int64 ns
# of one wall clock (CLOCK_REALTIME).
SCHEMAS: dict[str, dict[str, str]] = {
    "activity": {
        "function": "str",  # kernel name, memcpy kind, cpu range name, host state
        "kind": "str",  # a Kind
        "device": "str",  # "GPU 0", "Host"
        "start_ns": "i8",
        "end_ns": "i8",
        # own time: end-start for a kernel, self time for nested cpu ranges, summed thread
        # time for a host counter interval (may exceed end-start)
        "busy_ns": "i8",
        "launch_ns": "i8?",  # when the CPU launched it (GPU work)
        "tid": "i8?",  # host thread id
        "stream": "i8?",  # GPU stream id
        "correlation": "i8?",  # launch correlation id
        "bytes": "i8?",  # memcpy/memset size
    },
    "samples": {
        "metric": "str",  # a name of perfdiff.registry
        "device": "str",
        "t_start_ns": "i8",  # interval start; a point reading has t_start_ns == t_end_ns
        "t_end_ns": "i8",
        "value": "f8",  # in the registry's unit
    },
    "markers": {
        "name": "str",  # "ProfilerStep#5", a perfdiff.cycle name, an NVTX range name
        "start_ns": "i8",
        "end_ns": "i8",
        "tid": "i8?",
        "source": "str",  # a MarkerSource
    },
}
TABLES = tuple(SCHEMAS)
# GPU-side ranges (RunData.gpu_ranges): a range on a GPU stream's timeline, such as the span of
# the kernels a record_function launched (Kineto ``gpu_user_annotation``).  An optional bundle
# table: written only by an import that read such ranges; a bundle without it has none.  Same
# dtype kinds as SCHEMAS.
GPU_RANGE_COLUMNS: dict[str, str] = {
    "name": "str",
    "device": "str",  # "GPU 0"
    "stream": "i8?",
    "start_ns": "i8",
    "end_ns": "i8",
}
OPTIONAL_SCHEMAS: dict[str, dict[str, str]] = {"gpu_ranges": GPU_RANGE_COLUMNS}
OPTIONAL_TABLES = tuple(OPTIONAL_SCHEMAS)
# Every table a bundle may hold: the required ones (every bundle has a part of each), then
# the optional ones.
BUNDLE_SCHEMAS: dict[str, dict[str, str]] = {**SCHEMAS, **OPTIONAL_SCHEMAS}
# The process group (communicator) of each NCCL collective kernel of a run
# (RunData.process_groups), in memory only (not a bundle table): one row per kernel of
# `activity` whose name matches COLLECTIVE_KERNEL, NaN where the trace does not say.
PROCESS_GROUP_COLUMNS: dict[str, str] = {
    "row": "i8",  # the kernel's row (position) in RunData.activity
    "group": "str",  # the process group's name as the trace writes it ("0", "tp"); NaN: not named
    "ranks": "str",  # its members' global ranks, sorted, "[0, 1]"; NaN: not listed
}
INTERVAL_COLUMNS = {"activity": ("start_ns", "end_ns"), "samples": ("t_start_ns", "t_end_ns"),
                    "markers": ("start_ns", "end_ns"), "gpu_ranges": ("start_ns", "end_ns")}

# The columns a collector's sampler hands over (optional ones it never knows are left out).
SAMPLER_COLUMNS = {
    "activity": ("function", "kind", "device", "start_ns", "end_ns", "busy_ns", "bytes"),
    "samples": ("metric", "device", "t_start_ns", "t_end_ns", "value"),
    "markers": ("name", "start_ns", "end_ns", "tid", "source"),
}


class Kind(str, Enum):
    """What an activity row is.  A str, so it compares equal to the stored value."""

    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    CPU = "cpu"  # CPU operators, annotations, NVTX ranges
    HOST = "host"  # host states: oncpu, runq, blocked, iowait, read, write …
    API = "api"  # CUDA runtime / OS runtime calls

    def __str__(self) -> str:
        return self.value


KINDS = tuple(k.value for k in Kind)
GPU_KINDS = (Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value)


class MarkerSource(str, Enum):
    """Who wrote a marker row."""

    PERFDIFF = "perfdiff"  # perfdiff.cycle() in the target
    NVTX = "nvtx"
    PROFILER_STEP = "profiler_step"
    ANNOTATION = "annotation"

    def __str__(self) -> str:
        return self.value


class CycleSource(str, Enum):
    """Where a run's cycles came from, in the order they are preferred (docs/ARCHITECTURE.md)."""

    PERFDIFF_MARKERS = "perfdiff-markers"
    PROFILER_STEP = "profiler-step"
    ANNOTATION = "annotation"
    REGEX = "regex"  # the user's --cycle
    KERNEL_SEQUENCE = "kernel-sequence"
    IDLE_GAPS = "idle-gaps"
    WINDOW = "window"

    def __str__(self) -> str:
        return self.value

    @property
    def marked(self) -> bool:
        """Cycles the process itself delimited (markers, steps, named ranges)."""
        return self in (CycleSource.PERFDIFF_MARKERS, CycleSource.PROFILER_STEP, CycleSource.ANNOTATION,
                        CycleSource.REGEX)
