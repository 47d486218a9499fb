"""The collective kernels under every library's naming (perfdiff.model.cuda_names.COLLECTIVE_KERNEL):
NCCL before 2.19 (`ncclKernel_*`), NCCL 2.19 on (`ncclDevKernel_*`), RCCL (its NCCL-named kernels,
`rcclKernel_*`) and RCCL's MSCCL executor (`mscclKernel_*`), as profilers write them.  Each stage
that singles collectives out reads the one rule: the op categories, the straggler analysis's
cause kinds, the verdict's collectives, the nsys query that names each kernel's communicator and
the Kineto importer's process groups."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfdiff.analyze.categories import classify
from perfdiff.analyze.records import OpCategory
from perfdiff.importers.kineto.process_groups import COLLECTIVE
from perfdiff.importers.nsys import query
from perfdiff.model.cuda_names import is_collective_kernel
from perfdiff.ranks.part import excess_kind

# Literal names, one or more per family, as nsys (demangled) and Kineto write them.
COLLECTIVES = [
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",  # NCCL < 2.19
    "void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",  # Kineto's "void " prefix
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",  # NCCL ≥ 2.19
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "void ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",  # RCCL ≥ 2.18
    "rcclKernel_AllReduce_RING_LL_Sum_bf16",
    "mscclKernel_Sum_bf16_LL128(ncclDevComm*, mscclAlgo*, mscclWork*)",  # RCCL's MSCCL executor
]
# Not collective kernels: NCCL's host calls and ranges, and compute kernels that say "reduce".
NOT_COLLECTIVE_KERNELS = ["ncclAllReduce", "ncclCommInitRank", "ncclGroupEnd",
                          "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(…)",
                          "cross_device_reduce_1stage", "my_nccl_kernel_wrapper"]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_every_family_is_a_collective_everywhere(name: str) -> None:
    assert is_collective_kernel(name)
    assert classify(name, "kernel") == OpCategory.COMMUNICATION
    assert excess_kind(name, "kernel") is None  # a symptom in the straggler analysis, not a compute cause
    assert COLLECTIVE.match(name)  # the Kineto importer reads its process group


@pytest.mark.parametrize("name", NOT_COLLECTIVE_KERNELS)
def test_host_calls_and_compute_are_no_collective_kernels(name: str) -> None:
    assert not is_collective_kernel(name)


def test_nsys_query_finds_every_family(tmp_path: Path) -> None:
    """The query that names each collective's communicator sees every family's kernels, and
    only those."""
    path = tmp_path / "report.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
                "shortName INTEGER)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "globalTid INTEGER, correlationId INTEGER, nameId INTEGER)")
    names = COLLECTIVES + NOT_COLLECTIVE_KERNELS
    gpid = 77 << 24
    for i, name in enumerate(names):
        con.execute("INSERT INTO StringIds VALUES (?, ?)", (i, name))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?, ?)",
                    (1000 * i + 10, 1000 * i + 20, i, gpid, i, i))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 0)",
                    (1000 * i, 1000 * i + 5, gpid + 1, i))
    con.commit()
    con.close()
    con = query.open_export(path)
    try:
        found = sorted(r[3] for r in query.nccl_launches(con))
        assert found == sorted(COLLECTIVES)
        assert sorted(r[3] for r in query.nccl_launches(con, 77)) == sorted(COLLECTIVES)
        assert query.nccl_launches(con, 78) == []
    finally:
        con.close()
