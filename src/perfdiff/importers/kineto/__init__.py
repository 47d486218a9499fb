"""Import a PyTorch-profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, as a RunData.

What is read (docs/FORMATS.md):

- GPU work, complete events (``ph: X``) of category ``kernel`` / ``gpu_memcpy`` /
  ``gpu_memset`` (2021: ``Kernel`` / ``Memcpy`` / ``Memset``) → activity kinds ``kernel``,
  ``memcpy``, ``memset`` on ``GPU <pid>`` with stream = tid (legacy ``"stream 7"`` → 7;
  ``args.device`` / ``args.stream`` when pid / tid are not numbers), correlation and
  bytes from ``args``.  ``launch_ns`` and the launching ``tid`` come from the runtime event with
  the same ``args.correlation`` (no need for the ``ac2g``/``async`` flow events).
- ``cuda_runtime`` / ``cuda_driver`` (2021: ``Runtime``) → kind ``api`` on "Host".
- ``cpu_op`` / ``user_annotation`` (2021: ``Operator``) → kind ``cpu`` on "Host" with
  busy_ns = self time: the time of CPU ranges and runtime calls nested inside on the same
  thread is subtracted (`perfdiff.model.intervals`).  ``ProfilerStep#N`` ranges are not
  functions but markers (source "profiler_step"); other user annotations are also markers
  (source "annotation").  ``python_function`` events (Python stack samples, nested dozens
  deep and a large share of modern traces) are not imported: they would multiply the rows
  and the self-time work for little signal; they are counted in ``manifest["dropped"]``.
- ``gpu_user_annotation`` (the GPU-side span of a ``record_function`` / user annotation: from
  its first kernel's start to its last kernel's end on one stream) → ``RunData.gpu_ranges`` on
  ``GPU <pid>`` with stream = tid, read by the range tree only (neither activity nor markers:
  the cycle planner and the function table do not see them).
- the process group an NCCL collective kernel names in its args (``Process Group Name`` or
  ``pg_name``, ``Process Group Ranks``) → ``RunData.process_groups``, one row per NCCL kernel
  (`process_groups`; only those kernels' args are decoded).
- ``deviceProperties`` → manifest GPUs; ``baseTimeNanoseconds`` and the clock (`clock`);
  ``distributedInfo`` → manifest target.

The modules: `scan` reads the bytes fast, block by block, with no Python object per event
(each block decoded by the C extension of `compiled` where it is built, else by
`numpy_block`, `swar` decoding its numbers and strings); `general` reads any valid JSON
(``json.loads``) when the scanner meets a layout it does not decode, both into `events.Events`; `tables` builds the RunData
from those (`join` for the launch join, `clock`, `manifest`).  `reference` is a plain reader
that tests check the others against.
"""
from __future__ import annotations

from pathlib import Path

from perfdiff.bundle import RunData
from perfdiff.errors import InputError
from perfdiff.importers.common import Note
from perfdiff.importers.kineto.events import NeedSlowPath
from perfdiff.importers.kineto.general import general_events
from perfdiff.importers.kineto.names import short_kernel_name
from perfdiff.importers.kineto.scan import FastScan
from perfdiff.importers.kineto.tables import build

__all__ = ["import_kineto", "short_kernel_name"]


def import_kineto(path: str | Path, *, group: str = "full", skip: frozenset[str] = frozenset(),
                  cores: int | None = None) -> RunData:
    """Read the Kineto/Chrome trace at `path` (.json or .json.gz) into a RunData.

    Times are wall-clock ns.  `group="short"` names kernels by their base name (template
    arguments, parameters and namespaces removed); `skip`: activity columns left unknown (see
    concat_parts); `cores`: CPU cores the import may keep busy (None: all).  Bad input raises
    InputError naming the file: unreadable, truncated gzip, invalid JSON, JSON that is not a
    trace.
    """
    p = Path(path)
    if group not in ("full", "short"):
        raise ValueError(f"group must be 'full' or 'short', not {group!r}")
    if not p.exists():
        raise InputError("no such file", path=p)
    if not p.is_file():
        raise InputError("not a file", path=p)
    try:
        events = FastScan(p, cores).run()
    except NeedSlowPath as why:
        events = general_events(p)
        events.notes.append(Note("kineto-general-reader", f"read with the general JSON parser ({why})"))
    return build(p, events, group, skip)
