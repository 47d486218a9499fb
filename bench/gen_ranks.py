#!/usr/bin/env python3
"""Seeded generator of multi-rank trace pairs: one trace per rank, Kineto JSON or nsys SQLite.

Every rank runs the same training step: a data-loader range on the host, then compute kernels
in `--collectives` segments, each ending in an NCCL all-reduce.  A collective ends on every
rank when the last rank has arrived plus its transfer time, so a rank that arrives late makes
the others wait inside the NCCL kernel, as on a real GPU.  The ranks share one clock.

    python bench/gen_ranks.py OUT --ranks 8 --kernels 100000 --format kineto
        [--straggler R --dataloader-factor 10] [--slow REGEX=F] [--slow-rank R:REGEX=F] [--xfer-factor F]
        [--tp 2]

writes OUT/normal/ and OUT/abnormal/: the normal run has no plant; the abnormal one has the
planted changes.  `--format kineto` writes rank-N.json (gzip with --gzip) with distributedInfo;
`--format nsys` writes report.N.sqlite with RANK / WORLD_SIZE in META_DATA_CAPTURE;
`--format nsys-one` writes one report.sqlite holding every rank as its own process.
Identical arguments give byte-identical files.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sqlite3
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

T0_US = 1_000_000.0  # trace time of the first step, µs
SESSION_NS = 1_760_000_000_000_000_000  # the nsys session start (wall clock)
FIRST_STEP = 5
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
# (kernel name, mean µs): the compute kernels of a step, in launch order, repeated.
KERNELS = (("ampere_sgemm_128x64_tn", 60.0),
           ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >"
            "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 2>)", 8.0),
           ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)", 50.0),
           ("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", 15.0),
           ("flash_fwd_kernel", 40.0))
DATALOADER_US = 2_000.0
XFER_US = 400.0  # an all-reduce's own transfer time once every rank has arrived


@dataclass
class Plant:
    """What the abnormal run changes."""

    straggler: int | None = None  # its data loader takes `dataloader_factor` × longer
    dataloader_factor: float = 10.0
    slow: list[tuple[str, float]] = field(default_factory=list)  # every rank: kernels matching REGEX × F
    slow_rank: list[tuple[int, str, float]] = field(default_factory=list)  # one rank: (rank, REGEX, F)
    xfer_factor: float = 1.0  # every collective's own transfer (after the last rank arrived) × F


@dataclass
class RankTrace:
    """One rank's events, times in µs of the shared clock."""

    kernel_name: np.ndarray  # index into names (len(KERNELS) is the NCCL kernel)
    kernel_start: np.ndarray
    kernel_dur: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    load_start: np.ndarray
    load_end: np.ndarray
    first_step: int = FIRST_STEP  # the ProfilerStep number of its first step
    kernel_group: np.ndarray | None = None  # per kernel: its collective's process group (-1: none)
    groups: dict[int, list[int]] = field(default_factory=dict)  # process group → its ranks
    nccl_payloads: bool = True  # nsys: NCCL's NVTX ranges name each all-reduce's communicator

    def without_first(self, n: int) -> RankTrace:
        """The trace as if profiling had started `n` steps later on this rank."""
        if n <= 0:
            return self
        cut = self.step_start[n]
        k = self.kernel_start >= cut
        return RankTrace(self.kernel_name[k], self.kernel_start[k], self.kernel_dur[k], self.step_start[n:],
                         self.step_end[n:], self.load_start[n:], self.load_end[n:], self.first_step + n,
                         None if self.kernel_group is None else self.kernel_group[k], self.groups)


def communicators(ranks: int, tp: int) -> tuple[list[list[int]], list[list[int]]]:
    """The tensor-parallel groups (consecutive ranks) and the data-parallel groups (ranks tp
    apart) of a job of `ranks` with tensor parallelism `tp`; tp 1: one group of every rank."""
    if tp <= 1:
        return [list(range(ranks))], []
    if ranks % tp:
        raise ValueError(f"{ranks} ranks do not split into tensor-parallel groups of {tp}")
    return ([list(range(g, g + tp)) for g in range(0, ranks, tp)],
            [list(range(r, ranks, tp)) for r in range(tp)])


def simulate(ranks: int, kernels: int, steps: int, collectives: int, seed: int, plant: Plant,
             tp: int = 1) -> list[RankTrace]:
    """Every rank's events for `steps` steps of about kernels/steps kernels each.  `tp` > 1: the
    step's all-reduces run within each tensor-parallel group, and one more all-reduce ends the
    step within each data-parallel group; a collective ends when its group's last rank arrives."""
    rng = np.random.default_rng(seed)
    tp_groups, dp_groups = communicators(ranks, tp)
    labels = {id(g): i + 1 for i, g in enumerate(tp_groups + dp_groups)} if tp > 1 else {}
    per_step = max(collectives, kernels // steps - collectives)
    names = np.arange(per_step) % len(KERNELS)
    base = np.array([k[1] for k in KERNELS])[names]
    factor = np.ones((ranks, per_step))
    for rx, f in plant.slow:
        factor[:, [bool(re.search(rx, KERNELS[i][0])) for i in names]] *= f
    for r, rx, f in plant.slow_rank:
        factor[r, [bool(re.search(rx, KERNELS[i][0])) for i in names]] *= f
    load_factor = np.ones(ranks)
    if plant.straggler is not None:
        load_factor[plant.straggler] = plant.dataloader_factor
    bounds = np.linspace(0, per_step, collectives + 1).astype(int)
    k_name, k_start, k_dur, k_group = [], [], [], []
    st, se, ls, le = [], [], [], []
    t = T0_US

    def collective(arrive: np.ndarray, groups: list[list[int]]) -> np.ndarray:
        done = np.empty(ranks)
        label = np.zeros((ranks, 1), dtype=np.int64)
        for g in groups:
            done[g] = arrive[g].max() + XFER_US * plant.xfer_factor * rng.lognormal(0.0, 0.02)
            label[g] = labels.get(id(g), 0)
        k_name.append(np.full((ranks, 1), len(KERNELS)))
        k_start.append(arrive[:, None])
        k_dur.append((done - arrive)[:, None])
        k_group.append(label)
        return done + 2.0

    for _ in range(steps):
        load = DATALOADER_US * load_factor * rng.lognormal(0.0, 0.03, ranks)
        ls.append(np.full(ranks, t))
        le.append(t + load)
        st.append(np.full(ranks, t))
        dur = base * factor * rng.lognormal(0.0, 0.05, (ranks, per_step))
        at = t + load + 5.0  # the first kernel starts once its batch is loaded
        for j in range(collectives):
            seg = dur[:, bounds[j]:bounds[j + 1]]
            ends = at[:, None] + np.cumsum(seg, axis=1)
            k_name.append(np.broadcast_to(names[bounds[j]:bounds[j + 1]], seg.shape))
            k_start.append(ends - seg)
            k_dur.append(seg)
            k_group.append(np.full(seg.shape, -1))
            at = collective(ends[:, -1] + 2.0, tp_groups)
        if dp_groups:
            at = collective(at + 2.0, dp_groups)
        t = float(at.max()) + 50.0
        se.append(np.full(ranks, t - 10.0))
    kn, ks, kd, kg = (np.concatenate(x, axis=1) for x in (k_name, k_start, k_dur, k_group))
    groups = {labels[id(g)]: g for g in tp_groups + dp_groups if id(g) in labels}
    return [RankTrace(kn[r], ks[r], kd[r], np.array([s[r] for s in st]), np.array([s[r] for s in se]),
                      np.array([s[r] for s in ls]), np.array([s[r] for s in le]),
                      kernel_group=kg[r] if groups else None, groups=groups) for r in range(ranks)]


def _names() -> list[str]:
    return [k[0] for k in KERNELS] + [NCCL]


def write_kineto(tr: RankTrace, rank: int, world: int, path: Path, gz: bool, pg_args: bool = True) -> None:
    """rank-N.json[.gz]: a PyTorch-profiler trace with distributedInfo (and, with `pg_args`, the
    process group of each collective in its kernel's args, when the run has several)."""
    names = [json.dumps(n) for n in _names()]
    host = 100_000 + rank
    out = [f'{{"schemaVersion": 1, "distributedInfo": {{"backend": "nccl", "rank": {rank}, '
           f'"world_size": {world}}}, "traceEvents": [']
    ev = []
    for i, (a, b) in enumerate(zip(tr.step_start, tr.step_end, strict=True)):
        ev.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{tr.first_step + i}", '
                  f'"pid": {host}, "tid": {host}, "ts": {a:.3f}, "dur": {b - a:.3f}}}')
    for a, b in zip(tr.load_start, tr.load_end, strict=True):
        ev.append(f'{{"ph": "X", "cat": "cpu_op", "name": "{DATALOADER}", "pid": {host}, "tid": {host}, '
                  f'"ts": {a:.3f}, "dur": {b - a:.3f}}}')
    nccl = len(KERNELS)
    for c, (n, s, d) in enumerate(zip(tr.kernel_name.tolist(), tr.kernel_start.tolist(), tr.kernel_dur.tolist(),
                                      strict=True)):
        stream = 13 if n == nccl else 7
        pg = ""
        if n == nccl and pg_args and tr.kernel_group is not None:
            g = int(tr.kernel_group[c])
            # As PyTorch's profiler records a collective's process group in its kernel's args.
            pg = (f', "Process Group Name": "{g}", "Process Group Ranks": "{tr.groups[g]}", '
                  f'"Group size": {len(tr.groups[g])}')
        ev.append(f'{{"ph": "X", "cat": "kernel", "name": {names[n]}, "pid": {rank}, "tid": {stream}, '
                  f'"ts": {s:.3f}, "dur": {d:.3f}, "args": {{"device": {rank}, "stream": {stream}, '
                  f'"correlation": {c + 1}{pg}}}}}')
    data = ("".join(out) + ",\n".join(ev) + "]}\n").encode()
    if gz:
        path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    else:
        path.write_bytes(data)


def _nsys_schema(con: sqlite3.Connection) -> None:
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(_names(), start=1)))
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [("EXPORT_SCHEMA_VERSION", "3.11.0"),
                                                                    ("EXPORT_PRODUCT_VERSION", "2024.4.1")])
    con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (SESSION_NS,))
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")


LAUNCH = "cudaLaunchKernel_v7000"
NCCL_DOMAIN, ALLREDUCE_SCHEMA = 7, 0x2000


def _nccl_schema(con: sqlite3.Connection) -> None:
    """What an export of NCCL with NVTX on (`--include-blobs=true`) adds: the runtime calls that
    launch kernels, and the payload schema of NCCL's ncclAllReduce range."""
    con.execute("INSERT INTO StringIds VALUES (?, ?)", (len(_names()) + 1, LAUNCH))
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER)")
    con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN binaryData BLOB")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, "
                "flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER)")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER, "
                "flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, "
                "offset INTEGER)")
    con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, 'NcclNvtxParamsAllReduce', 1, 0, 3, 24, 8)",
                (NCCL_DOMAIN, ALLREDUCE_SCHEMA))
    con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, 0, 0, ?, NULL, NULL, ?)",
                    [(NCCL_DOMAIN, ALLREDUCE_SCHEMA, i, n, off) for i, (n, off) in enumerate(
                        (("NCCL communicator ID", 0), ("Message size [bytes]", 8), ("Reduction operation", 16)))])


def _nccl_rows(con: sqlite3.Connection, tr: RankTrace, pid: int, ns) -> None:
    """Each all-reduce's launch (a runtime call correlated with its kernel) inside NCCL's
    ncclAllReduce range, whose payload names the communicator (0x1000 + process group)."""
    g = pid << 24
    k = np.flatnonzero(tr.kernel_name == len(KERNELS))
    at = np.asarray(ns(tr.kernel_start[k] - 3.0))
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?)",
                    [(int(a), int(a) + 1000, g | pid, int(c) + 1, len(_names()) + 1) for a, c in zip(at, k, strict=True)])
    blobs = [struct.pack("<QQQQ", NCCL_DOMAIN, ALLREDUCE_SCHEMA, 24, 32)
             + struct.pack("<QQi4x", 0x1000 + int(tr.kernel_group[c]), 4 << 20, 0) for c in k]
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, binaryData) "
                    "VALUES (?, ?, 59, 'ncclAllReduce', ?, ?, ?)",
                    [(int(a) - 1000, int(a) + 2000, g | pid, NCCL_DOMAIN, b) for a, b in zip(at, blobs, strict=True)])


def _nsys_rows(con: sqlite3.Connection, tr: RankTrace, rank: int, world: int, pid: int) -> None:
    g = pid << 24
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
                    [(f"PROCESS_{rank + 1}:ENVIRONMENT_VARIABLE", f"RANK={rank}"),
                     (f"PROCESS_{rank + 1}:ENVIRONMENT_VARIABLE", f"WORLD_SIZE={world}")])
    ns = lambda us: (np.round(np.asarray(us) * 1000.0)).astype(np.int64).tolist()  # noqa: E731
    s, e = ns(tr.kernel_start), ns(tr.kernel_start + tr.kernel_dur)
    ids = (tr.kernel_name + 1).tolist()
    stream = np.where(tr.kernel_name == len(KERNELS), 13, 7).tolist()
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,1,?,?,?,?,?,NULL)",
                    zip(s, e, [rank] * len(s), stream, range(1, len(s) + 1), [g] * len(s), ids, ids, strict=True))
    rows = [(a, b, 59, None, None, None, f"ProfilerStep#{tr.first_step + i}", g | pid, None, None, 0)
            for i, (a, b) in enumerate(zip(ns(tr.step_start), ns(tr.step_end), strict=True))]
    rows += [(a, b, 59, None, None, None, DATALOADER, g | pid, None, None, 0)
             for a, b in zip(ns(tr.load_start), ns(tr.load_end), strict=True)]
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, category, color, text, globalTid, "
                    "endGlobalTid, textId, domainId) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    if tr.kernel_group is not None and tr.nccl_payloads:
        _nccl_rows(con, tr, pid, ns)


def write_nsys(traces: list[RankTrace], ranks: list[int], world: int, path: Path) -> None:
    """One SQLite export holding `ranks` (one process each)."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    _nsys_schema(con)
    if any(tr.kernel_group is not None and tr.nccl_payloads for tr in traces):
        _nccl_schema(con)
    for tr, r in zip(traces, ranks, strict=True):
        _nsys_rows(con, tr, r, world, 4000 + r)
    con.commit()
    con.close()


def write_run(folder: Path, traces: list[RankTrace], fmt: str, gz: bool, pg_args: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    world = len(traces)
    for tr in traces:
        tr.nccl_payloads = pg_args
    if fmt == "kineto":
        for r, tr in enumerate(traces):
            write_kineto(tr, r, world, folder / f"rank-{r}.json{'.gz' if gz else ''}", gz, pg_args)
    elif fmt == "nsys":
        for r, tr in enumerate(traces):
            write_nsys([tr], [r], world, folder / f"report.{r}.sqlite")
    else:
        write_nsys(traces, list(range(world)), world, folder / "report.sqlite")


def generate(out: Path, *, ranks: int, kernels: int, steps: int = 40, collectives: int = 4, fmt: str = "kineto",
             gz: bool = False, seed: int = 1, plant: Plant | None = None, normal_ranks: int | None = None,
             late: dict[int, int] | None = None, tp: int = 1, pg_args: bool = True) -> tuple[Path, Path]:
    """Write out/normal and out/abnormal; `normal_ranks`: a normal run of another world size;
    `late`: rank → steps its abnormal trace misses at the start (profiling began later there);
    `tp`: tensor parallelism (tp > 1: tensor- and data-parallel groups, see simulate), their
    process groups named (Kineto: in the kernels' args; nsys: in NCCL's NVTX payloads) unless
    `pg_args` is False."""
    common = dict(kernels=kernels, steps=steps, collectives=collectives, tp=tp)
    normal = simulate(normal_ranks or ranks, seed=seed, plant=Plant(), **common)
    abnormal = simulate(ranks, seed=seed + 1, plant=plant or Plant(), **common)
    abnormal = [tr.without_first((late or {}).get(r, 0)) for r, tr in enumerate(abnormal)]
    write_run(out / "normal", normal, fmt, gz, pg_args)
    write_run(out / "abnormal", abnormal, fmt, gz, pg_args)
    return out / "normal", out / "abnormal"


def _regex_factor(text: str) -> tuple[str, float]:
    rx, _, f = text.rpartition("=")
    return rx, float(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=10_000, help="kernels per rank and run")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--collectives", type=int, default=4, help="all-reduces per step")
    ap.add_argument("--format", choices=("kineto", "nsys", "nsys-one"), default="kineto")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--straggler", type=int, default=None, help="this rank's data loader is slow in the abnormal run")
    ap.add_argument("--dataloader-factor", type=float, default=10.0)
    ap.add_argument("--slow", action="append", default=[], metavar="REGEX=F", help="every rank's kernels")
    ap.add_argument("--slow-rank", action="append", default=[], metavar="R:REGEX=F")
    ap.add_argument("--xfer-factor", type=float, default=1.0,
                    help="every collective's transfer (once the last rank arrived) takes F × longer: a slower network")
    ap.add_argument("--normal-ranks", type=int, default=None, help="world size of the normal run")
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor parallelism: all-reduces within tensor-parallel groups, one per step within "
                         "data-parallel groups (Kineto: process groups in the NCCL kernels' args)")
    ap.add_argument("--no-pg-args", action="store_true",
                    help="name no process group (Kineto kernel args, nsys NCCL NVTX payloads)")
    args = ap.parse_args(argv)
    plant = Plant(straggler=args.straggler, dataloader_factor=args.dataloader_factor,
                  slow=[_regex_factor(s) for s in args.slow],
                  slow_rank=[(int(s.split(":", 1)[0]), *_regex_factor(s.split(":", 1)[1])) for s in args.slow_rank],
                  xfer_factor=args.xfer_factor)
    generate(args.out, ranks=args.ranks, kernels=args.kernels, steps=args.steps, collectives=args.collectives,
             fmt=args.format, gz=args.gzip, seed=args.seed, plant=plant, normal_ranks=args.normal_ranks, tp=args.tp,
             pg_args=not args.no_pg_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
