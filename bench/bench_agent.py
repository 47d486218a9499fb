"""Benchmark of the CUPTI agent's work inside the target, and of its collector side, with the fake.

    .venv/bin/python bench/bench_agent.py [--records 200000] [--repeat 5]

Records are built once as the fake cupti-python's record objects (a realistic mix: 40 %
kernels, 40 % runtime calls, 6 % memcpys, 4 % memsets, 10 % NVTX start/end markers) and
handed to the agent the way CUPTI hands over a completed buffer.  Measured, best of --repeat:

* callback: the buffer-completed callback, per record — the only agent work on the thread
  CUPTI completes a buffer on (CUPTI's worker thread, or a thread filling a buffer);
* drain: encoding the queued rows and appending them to the hand-off files, per record — on
  the agent's background thread;
* flush: one periodic flush with nothing to hand over (activity_flush_all, dropped-record
  count), per flush, and one with 10,000 records queued by the callback (encode, write, status);
* read: the collector reading and converting the records to bundle rows, per record (in the
  collector, not the target).

Attribute reads on the fake's records are plain Python slots; cupti-python's are Cython
properties, so the callback row is an estimate of the real cost, not a measurement of it.
Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import fakes.fake_cupti as fc  # noqa: E402
from perfdiff.collectors.cupti import agent as ag  # noqa: E402
from perfdiff.collectors.cupti.reader import AgentTraceSource  # noqa: E402


def make_records(n: int, t0: int) -> list:
    """`n` fake CUPTI records in the mix of a model's step (kernel launches, copies, NVTX)."""
    out = []
    kinds = fc.ActivityKind
    names = [f"kernel_{i:02d}_gemm_bf16_128x128x64_warpspecialized" for i in range(40)]
    for i in range(n):
        t = t0 + i * 2_000
        r = i % 50
        if r < 20:
            out.append(fc._make(fc.ActivityKernel11, kind=int(kinds.CONCURRENT_KERNEL), name=names[i % 40], start=t,
                                end=t + 1_500, correlation_id=i, stream_id=7, device_id=0))
        elif r < 40:
            out.append(fc._make(fc.ActivityAPI, kind=int(kinds.RUNTIME), cbid=211, start=t, end=t + 800,
                                correlation_id=i, process_id=1, thread_id=1234))
        elif r < 43:
            out.append(fc._make(fc.ActivityMemcpy6, kind=int(kinds.MEMCPY), copy_kind=1, src_kind=2, dst_kind=3,
                                bytes=1 << 20, start=t, end=t + 900, correlation_id=i, stream_id=7, device_id=0))
        elif r < 45:
            out.append(fc._make(fc.ActivityMemset4, kind=int(kinds.MEMSET), memory_kind=3, bytes=4096, start=t,
                                end=t + 300, correlation_id=i, stream_id=7, device_id=0))
        else:
            flag = 2 if r % 2 else 4
            out.append(fc._make(fc.ActivityMarker2, kind=int(kinds.MARKER), flags_=flag, timestamp=t, id=i // 2,
                                name="decode_step" if flag == 2 else "", domain="", object_kind=2,
                                object_id=fc.ActivityObjectKindId(1, 1234)))
    return out


def best(fn, repeat: int) -> float:
    """Smallest wall time (ns) of `repeat` calls of fn() (each call gets fresh state from fn)."""
    times = []
    for _ in range(repeat):
        times.append(fn())
    return min(times)


def run(n: int, repeat: int) -> list[str]:
    os.environ.pop(ag.NVTX_ENV, None)
    t0 = time.time_ns()
    records = make_records(n, t0)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # where `collect -- CMD` puts the files
    tmp = tempfile.mkdtemp(prefix="bench-agent-", dir=shm)
    results: dict[str, float] = {}

    def fresh() -> tuple[ag.Agent, object]:
        d = tempfile.mkdtemp(dir=tmp)
        load, m = fc.loader()
        a = ag.Agent(d, announced=True, load_cupti=load, flush_ns=10**12, handle_signals=False)
        assert a.start_recording(), a.reason
        return a, m

    agents = []

    def callback() -> float:
        a, _ = fresh()
        agents.append(a)
        s = time.perf_counter_ns()
        a._buffer_completed(records)
        return time.perf_counter_ns() - s

    results["callback"] = best(callback, repeat) / n

    def drain() -> float:
        a, _ = fresh()
        a._buffer_completed(records)
        s = time.perf_counter_ns()
        a._drain()
        e = time.perf_counter_ns() - s
        a.stop_recording()
        return e

    results["drain"] = best(drain, repeat) / n

    a, m = fresh()
    for _ in range(3):
        a.flush()
    empty = []
    for _ in range(max(repeat, 20)):
        s = time.perf_counter_ns()
        a.flush()
        empty.append(time.perf_counter_ns() - s)
    results["flush_empty"] = min(empty)
    results["flush_empty_p50"] = sorted(empty)[len(empty) // 2]
    a.stop_recording()  # else its exit-time flush writes into the folder removed below

    batch = records[:10_000]

    def flush_10k() -> float:
        a, _ = fresh()
        a._buffer_completed(batch)  # queued as CUPTI's thread leaves them (measured above)
        s = time.perf_counter_ns()
        a.flush()
        e = time.perf_counter_ns() - s
        a.stop_recording()
        return e

    results["flush_10k"] = best(flush_10k, repeat)

    def read() -> float:
        a, _ = fresh()
        a._buffer_completed(records)
        a.stop_recording()
        src = AgentTraceSource(a.directory, announced=True, warn=lambda m: None)
        s = time.perf_counter_ns()
        rows = src.stop()
        e = time.perf_counter_ns() - s
        assert len(rows["activity"]) > 0
        return e

    results["read"] = best(read, repeat) / n
    for a in agents:
        a.stop_recording()
    shutil.rmtree(tmp, ignore_errors=True)
    per_rec = results["callback"] + results["drain"]
    return [
        f"Agent work with the fake cupti-python: {n:,} records, best of {repeat} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}).",
        "",
        "| where | what | cost |",
        "|---|---|---|",
        f"| target, CUPTI's thread | buffer callback (copy fields, queue) | {results['callback']:.0f} ns/record |",
        f"| target, agent thread | encode + append to files | {results['drain']:.0f} ns/record |",
        f"| target, total | per activity record | {per_rec:.0f} ns/record "
        f"({1e9 / per_rec / 1e6:.2f} M records/s of one core) |",
        f"| target, agent thread | periodic flush, nothing waiting | {results['flush_empty'] / 1e3:.0f} µs "
        f"(p50 {results['flush_empty_p50'] / 1e3:.0f} µs) per flush |",
        f"| target, agent thread | flush with 10,000 records queued (encode, write, status) | "
        f"{results['flush_10k'] / 1e6:.1f} ms per flush |",
        f"| collector | read + convert to bundle rows | {results['read']:.0f} ns/record |",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print("\n".join(run(args.records, args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
