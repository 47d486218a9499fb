"""Which rank each process of one nsys export holding several processes is.

An export records, per source and most trusted first:

- the launcher variables (`RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID` …) of a
  process nsys started or attached to, in the environment it recorded of that process.  nsys
  records the environment of the processes it launched, not of their children: a job started
  as `nsys profile torchrun …` has none for its ranks;
- the rank NCCL gave each process: NCCL (2.19 and later, with NVTX on) annotates
  `ncclCommInitRank*` with an NVTX range whose extended payload holds the communicator id, the
  number of ranks and the rank (exports made with `--include-blobs=true`, or as JSON).  The
  communicator with the most ranks is the world's;
- the GPU each process ran its kernels on, when each process used one GPU and no two the
  same: ranks in device order (one node's local ranks);
- else pid order, said so.

Only metadata and these few rows are read, never the trace's events, through the queries of
perfdiff.importers.nsys.query (which says where in the export each comes from).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from perfdiff.ranks.records import MAX_RANK, IdentitySource

if TYPE_CHECKING:
    from perfdiff.importers.nsys.query import Connection

__all__ = ["NotRanks", "ProcessRanks", "own_gpus", "process_ranks", "why_not_ranks"]

_INIT = re.compile(r"^ncclCommInitRank")


@dataclass(frozen=True)
class ProcessRanks:
    """pid → rank for every process given, where the numbers came from, and the world size
    the source declares (None: not declared)."""

    ranks: dict[int, int]
    source: IdentitySource
    world_size: int | None = None


def _valid(ranks: dict[int, int], pids: list[int]) -> bool:
    """Every pid has a rank within any job's world (else the source is not believed), and no
    two the same."""
    return (set(ranks) >= set(pids) and len({ranks[p] for p in pids}) == len(pids)
            and all(0 <= ranks[p] <= MAX_RANK for p in pids))


def _from_environment(con: Connection, pids: list[int]) -> ProcessRanks | None:
    from perfdiff.importers.nsys import query
    from perfdiff.importers.nsys.manifest import launcher_vars, rank_and_size

    ranks: dict[int, int] = {}
    sizes = []
    for pid, env in query.process_environments(con):
        declared = rank_and_size(launcher_vars(env))
        if declared.get("rank", -1) >= 0:
            ranks[pid] = declared["rank"]
        sizes += [declared["world_size"]] if "world_size" in declared else []
    if not _valid(ranks, pids):
        return None
    return ProcessRanks({p: ranks[p] for p in pids}, IdentitySource.ENVIRONMENT, max(sizes) if sizes else None)


def _from_nccl(con: Connection, pids: list[int]) -> ProcessRanks | None:
    from perfdiff.importers.nsys import query

    best: dict[int, tuple[int, int]] = {}  # pid → (ranks in the communicator, rank)
    for pid, _tid, _start, _end, name, values in query.nccl_ranges(con, "ncclCommInitRank%"):
        if not _INIT.match(name):
            continue
        rank, size = values.get("Rank"), values.get("No. of ranks")
        if isinstance(rank, int) and isinstance(size, int) and 0 <= rank < size:
            if int(pid) not in best or size > best[int(pid)][0]:
                best[int(pid)] = (size, rank)
    ranks = {p: r for p, (_, r) in best.items()}
    if not _valid(ranks, pids):
        return None
    return ProcessRanks({p: ranks[p] for p in pids}, IdentitySource.NCCL, max(best[p][0] for p in pids))


def _from_devices(con: Connection, pids: list[int]) -> ProcessRanks | None:
    from perfdiff.importers.nsys import query

    if not own_gpus(con, pids):
        return None
    devices = query.kernel_devices(con)
    dev = {p: next(iter(devices[p])) for p in pids}
    order = sorted(pids, key=lambda p: dev[p])
    return ProcessRanks({p: i for i, p in enumerate(order)}, IdentitySource.DEVICE)


class NotRanks(str, Enum):
    """Why the processes of one export that ran kernels are not the ranks of one job: the rule
    of `why_not_ranks` that failed first."""

    FEW_PROCESSES = "few-processes"  # fewer than two processes ran kernels
    SHARED_GPU = "shared-gpu"  # two of them ran kernels on one GPU
    SEVERAL_GPUS = "several-gpus"  # one ran kernels on more than one GPU
    NO_COLLECTIVES = "no-collectives"  # no launcher numbered them, and one ran no collective kernel
    SEPARATE_COMMUNICATORS = "separate-communicators"  # ... all did, and NCCL names no communicator of all
    UNREADABLE = "unreadable"  # the export's tables could not tell


def own_gpus(con: Connection, pids: list[int]) -> bool:
    """Whether each of `pids` ran its kernels on one GPU, and no two on the same."""
    from perfdiff.importers.nsys import query

    return _gpu_rule(query.kernel_devices(con), pids) is None


def _gpu_rule(devices: dict[int, set[int]], pids: list[int]) -> NotRanks | None:
    """How `pids` fail own_gpus (`devices`: pid → its kernels' GPUs), a GPU shared said first;
    None where each ran on one GPU of its own."""
    gpus = [g for p in pids for g in devices.get(p, ())]
    if len(gpus) != len(set(gpus)):
        return NotRanks.SHARED_GPU
    if any(len(devices.get(p, ())) != 1 for p in pids):
        return NotRanks.SEVERAL_GPUS
    return None


def _communicators(con: Connection) -> dict[int, set[int]]:
    """pid → the NCCL communicators its ncclCommInitRank ranges name (where the export holds
    their payloads)."""
    from perfdiff.importers.nsys import query

    comms: dict[int, set[int]] = {}
    for pid, _tid, _start, _end, name, values in query.nccl_ranges(con, "ncclCommInitRank%"):
        comm = values.get("NCCL communicator ID")
        if _INIT.match(name) and isinstance(comm, int):
            comms.setdefault(int(pid), set()).add(comm)
    return comms


def why_not_ranks(con: Connection, pids: list[int]) -> NotRanks | None:
    """Why the processes `pids` of one export (those that ran kernels) are not the ranks of
    one job; None when they are: two or more, each drives a GPU of its own, and either the
    launcher variables number each one, or each ran collective kernels and, where NCCL's
    ncclCommInitRank ranges name their communicators, all share one.  A server and its workers
    (one GPU shared, or no collectives) are not."""
    from perfdiff.importers.nsys import query

    if len(pids) < 2:
        return NotRanks.FEW_PROCESSES
    try:
        gpus = _gpu_rule(query.kernel_devices(con), pids)
        if gpus is not None:
            return gpus
        if _from_environment(con, pids) is not None:
            return None
        if not set(pids) <= query.collective_pids(con):
            return NotRanks.NO_COLLECTIVES
        comms = _communicators(con)
        named = [comms[p] for p in pids if p in comms]
        return None if len(named) < len(pids) or set.intersection(*named) else NotRanks.SEPARATE_COMMUNICATORS
    except query.QueryError:
        return NotRanks.UNREADABLE


def process_ranks(con: Connection, pids: list[int]) -> ProcessRanks:
    """The rank of each of `pids` (the processes that ran kernels) of the export open as `con`
    (perfdiff.importers.nsys.query.open_export) from the best source it has (see the module
    docstring); pid order when none names every process apart."""
    from perfdiff.importers.nsys import query

    for source in (_from_environment, _from_nccl, _from_devices):
        try:
            found = source(con, pids)
        except query.QueryError:
            found = None
        if found is not None:
            return found
    return ProcessRanks({p: i for i, p in enumerate(sorted(pids))}, IdentitySource.PROCESS)
