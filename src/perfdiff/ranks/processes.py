"""The processes of one nsys export that are not the ranks of a job (a server and its
workers, processes sharing a GPU): each one's role, and the two runs' processes paired, to be
compared process by process (perfdiff.api.compare_processes runs one pair comparison per
pair, each process cut into cycles of its own).

Only a few rows of the export are read, through perfdiff.importers.nsys.query: each process's
GPU activities (kernels, memcpys, memsets) per GPU, the names of its kernels, its name, and
which processes made CUDA calls.

A process's role (ProcessRole) comes from its GPU work alone:

- WORKER: it does the most GPU work on each GPU it uses;
- SHARING: it works on a GPU where another process does more;
- LIGHT: fewer than LIGHT_SHARE of the busiest process's GPU activities (a server's, a
  launcher's share);
- NO_GPU_WORK: CUDA calls and no GPU work: listed, nothing to compare.

The runs' processes are paired by what they run, greedily, the best pair first: processes
that launch mostly the same kernels (SIMILAR of their kernel names in common, Jaccard) pair on
the same GPUs first, then by more kernels in common, the same role, the same name, the nearer
place by GPU activity.  Processes with no kernel in common are not paired (each is said to be
in one run only); processes without GPU work pair by name.  The pairs are numbered P1, P2 …
by the normal run's GPU activities, the most first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from perfdiff.errors import InputError
from perfdiff.inputs import trace_kind
from perfdiff.ranks.identity import NotRanks

if TYPE_CHECKING:
    from perfdiff.analyze.result import ComparisonResult

__all__ = ["LIGHT_SHARE", "SIMILAR", "ExportProcess", "PairCode", "ProcessListing", "ProcessPair", "ProcessReport",
           "ProcessRole", "export_of", "finish_pairs", "is_process_export", "list_processes", "pair_processes"]

LIGHT_SHARE = 0.01  # GPU activities under this share of the busiest process's: little GPU work
SIMILAR = 0.5  # kernel names in common (Jaccard) from which two processes run the same code


class ProcessRole(str, Enum):
    """A process's part in its export, from its GPU work (see the module docstring)."""

    WORKER = "worker"  # the most GPU work on each GPU it uses
    SHARING = "sharing"  # GPU work on a GPU where another process does more
    LIGHT = "light"  # little GPU work (under LIGHT_SHARE of the busiest process's)
    NO_GPU_WORK = "no-gpu-work"  # CUDA calls, no GPU work

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ExportProcess:
    """One process of an export: its pid and name (PROCESSES.name, "" where not recorded), its
    role, the GPUs it ran work on (device ids), its GPU activities (kernels, memcpys, memsets),
    their share of the export's (a fraction), the other processes with GPU work on its GPUs,
    and its place by GPU activities in the export (0: the most)."""

    pid: int
    name: str
    role: ProcessRole
    gpus: tuple[int, ...]
    activities: int
    share: float
    shares_with: tuple[int, ...] = ()
    order: int = 0


@dataclass(frozen=True)
class ProcessListing:
    """The processes of one export (by GPU activities, the most first; those without GPU work
    last, by pid) and the names of each one's kernels (pid → names), which pair them."""

    path: str
    processes: tuple[ExportProcess, ...]
    kernels: dict[int, frozenset[str]]

    @property
    def working(self) -> tuple[ExportProcess, ...]:
        """The processes with GPU work."""
        return tuple(p for p in self.processes if p.role is not ProcessRole.NO_GPU_WORK)


class PairCode(str, Enum):
    """What became of a pair of processes."""

    COMPARED = "compared"  # compared as a pair of runs
    NOT_COMPARED = "not-compared"  # the comparison refused the pair (`reason`: its one line)
    NO_GPU_WORK = "no-gpu-work"  # neither launched GPU work: nothing to compare
    NORMAL_ONLY = "normal-only"  # a process of the normal run with no counterpart
    ABNORMAL_ONLY = "abnormal-only"  # a process of the abnormal run with no counterpart

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ProcessPair:
    """A process of the normal run and its counterpart in the abnormal run (one of them None
    where it has none), numbered `label` (P1 …).  `kernels_in_common`: the share of their kernel
    names in common (Jaccard; NaN where either launched no kernel); `same_gpus`: they ran on
    the same device ids.  Once compared: `changed`, its comparison found a material change (a
    verdict class other than no material change); `cycle_change_pct`, how much its median
    cycle grew (%, negative: it fell; NaN where not compared); `reason`: why a pair was not
    compared (the comparison's own line)."""

    label: int
    code: PairCode
    normal: ExportProcess | None
    abnormal: ExportProcess | None
    kernels_in_common: float = math.nan
    same_gpus: bool = False
    changed: bool = False
    cycle_change_pct: float = math.nan
    reason: str = ""

    @property
    def pids(self) -> tuple[int | None, int | None]:
        """(the normal process's pid, the abnormal's); None where it has none."""
        return (self.normal.pid if self.normal else None, self.abnormal.pid if self.abnormal else None)


def export_of(path: str | Path) -> Path | None:
    """The nsys SQLite export `path` is, or the one a plain directory holds alone; else None."""
    from perfdiff.ranks.discover import _members

    p = Path(path)
    inside = _members(p)
    if len(inside) == 1 and inside[0].is_file():
        p = inside[0]
    return p if p.is_file() and trace_kind(p) == "nsys" else None


def is_process_export(path: str | Path) -> bool:
    """Whether `path` is an nsys export (or a directory holding only one) in which two or more
    processes launched kernels and they are not the ranks of one job (perfdiff.ranks.discover.
    export_processes, as is_job_export reads it).  Reads a few rows; False for anything else, a
    damaged export included (its import says why)."""
    from perfdiff.ranks.discover import export_processes

    p = export_of(path)
    facts = export_processes(p) if p is not None else None
    return facts is not None and len(facts[0]) >= 2 and not facts[1]


def list_processes(path: str | Path) -> ProcessListing:
    """Every process of the export at `path` that ran GPU work or made CUDA calls, with its role
    (see the module docstring).  InputError where the export cannot be read."""
    from perfdiff.importers.nsys import query

    p = export_of(path)
    if p is None:
        raise InputError("not an nsys SQLite export (.sqlite), nor a directory holding one alone", path=path)
    try:
        con = query.open_export(p)
        try:
            work, names = query.gpu_work(con), query.process_names(con)
            kernels, cuda = query.kernel_names(con), query.cuda_pids(con)
        finally:
            con.close()
    except query.EXPORT_ERRORS as exc:
        raise InputError(f"cannot list the processes of the export ({exc.__class__.__name__})", path=p) from None
    return ProcessListing(str(p), _roles(work, names, cuda),
                          {pid: frozenset(k) for pid, k in kernels.items()})


def _roles(work: dict[int, dict[int, int]], names: dict[int, str], cuda: set[int]) -> tuple[ExportProcess, ...]:
    """The processes of `work` (pid → {device → GPU activities}) with their roles, the most
    active first; then those of `cuda` without GPU work, by pid."""
    total = {pid: sum(per.values()) for pid, per in work.items()}
    everything = sum(total.values())
    busiest = max(total.values(), default=0)
    # Per GPU, the process that does the most there (the lower pid of equals).
    top: dict[int, int] = {}
    for pid in sorted(work):
        for dev, n in work[pid].items():
            if dev >= 0 and (dev not in top or n > work[top[dev]][dev]):
                top[dev] = pid
    out = []
    for order, pid in enumerate(sorted(total, key=lambda q: (-total[q], q))):
        gpus = tuple(sorted(d for d in work[pid] if d >= 0))
        others = tuple(sorted(q for q in work if q != pid and any(d in work[q] for d in gpus)))
        if total[pid] < LIGHT_SHARE * busiest:
            role = ProcessRole.LIGHT
        elif all(top.get(d) == pid for d in gpus):
            role = ProcessRole.WORKER
        else:
            role = ProcessRole.SHARING
        out.append(ExportProcess(pid, names.get(pid, ""), role, gpus, total[pid],
                                 total[pid] / everything if everything else math.nan, others, order))
    out += [ExportProcess(pid, names.get(pid, ""), ProcessRole.NO_GPU_WORK, (), 0, 0.0, (), len(out) + i)
            for i, pid in enumerate(sorted(cuda - set(work)))]
    return tuple(out)


def _in_common(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of kernel names two processes have in common (Jaccard); NaN where either
    launched none."""
    return len(a & b) / len(a | b) if a and b else math.nan


def pair_processes(n: ProcessListing, a: ProcessListing) -> tuple[ProcessPair, ...]:
    """The runs' processes paired (see the module docstring), numbered by the normal run's GPU
    activities; the abnormal run's processes without a counterpart last."""
    candidates = []
    for pn in n.processes:
        for pa in a.processes:
            gpu_n, gpu_a = pn.role is not ProcessRole.NO_GPU_WORK, pa.role is not ProcessRole.NO_GPU_WORK
            common = _in_common(n.kernels.get(pn.pid, frozenset()), a.kernels.get(pa.pid, frozenset()))
            if gpu_n != gpu_a or (gpu_n and not common > 0) or (not gpu_n and pn.name != pa.name):
                continue
            score = (common >= SIMILAR, pn.gpus == pa.gpus, common if gpu_n else 0.0, pn.role == pa.role,
                     pn.name == pa.name, -abs(pn.order - pa.order))
            candidates.append((score, pn.order, pa.order, pn, pa, common))
    candidates.sort(key=lambda c: (tuple(-float(x) for x in c[0]), c[1], c[2]))
    taken_n, taken_a, found = set(), set(), {}
    for _, _, _, pn, pa, common in candidates:
        if pn.pid in taken_n or pa.pid in taken_a:
            continue
        taken_n.add(pn.pid)
        taken_a.add(pa.pid)
        found[pn.pid] = (pa, common)
    pairs = []
    for pn in n.processes:
        if pn.pid in found:
            pa, common = found[pn.pid]
            code = PairCode.NO_GPU_WORK if pn.role is ProcessRole.NO_GPU_WORK else PairCode.COMPARED
            pairs.append(ProcessPair(len(pairs) + 1, code, pn, pa, common, pn.gpus == pa.gpus))
        else:
            pairs.append(ProcessPair(len(pairs) + 1, PairCode.NORMAL_ONLY, pn, None))
    for pa in a.processes:
        if pa.pid not in taken_a:
            pairs.append(ProcessPair(len(pairs) + 1, PairCode.ABNORMAL_ONLY, None, pa))
    return tuple(pairs)


def finish_pairs(pairs: tuple[ProcessPair, ...], results: dict[int, ComparisonResult | str]
                 ) -> tuple[ProcessPair, ...]:
    """The pairs once compared (`results`: label → its comparison, or the one line that refused
    it), in the report's order: the pairs whose comparison found a material change first, the
    largest change of the median cycle first; then the others by label."""
    from perfdiff.analyze.evidence import FindingCode
    from perfdiff.analyze.verdict_records import VerdictCode

    done = []
    for p in pairs:
        r = results.get(p.label)
        if isinstance(r, str):
            p = replace(p, code=PairCode.NOT_COMPARED, reason=r)
        elif r is not None:
            n, a = r.analysis.normal.median_us, r.analysis.abnormal.median_us
            identical = bool(r.findings) and r.findings[0].code == FindingCode.IDENTICAL
            changed = not identical and any(v.code != VerdictCode.NO_MATERIAL for v in r.verdict)
            p = replace(p, changed=changed, cycle_change_pct=100.0 * (a / n - 1.0) if n > 0 else math.nan)
        done.append(p)

    def size(p: ProcessPair) -> float:
        return abs(p.cycle_change_pct) if math.isfinite(p.cycle_change_pct) else 0.0

    return tuple(sorted(done, key=lambda p: (not p.changed, -size(p) if p.changed else 0.0, p.label)))


@dataclass(frozen=True)
class ProcessReport:
    """A process-by-process comparison: the pairs in the report's order (finish_pairs), the
    comparison of each pair compared (label → its result), the runs' names as given, the
    false-discovery rate the pairs were compared at, and why each run's processes are not the
    ranks of one job (perfdiff.ranks.identity.why_not_ranks; None: unknown, or one process)."""

    pairs: tuple[ProcessPair, ...]
    results: dict[int, ComparisonResult]
    labels: tuple[str, str]
    alpha: float
    not_ranks: tuple[NotRanks | None, NotRanks | None] = (None, None)

    @property
    def compared(self) -> tuple[ProcessPair, ...]:
        """The pairs compared, in the report's order."""
        return tuple(p for p in self.pairs if p.label in self.results)
