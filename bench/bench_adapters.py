"""Cost of the framework adapters per engine step, in the target.

    .venv/bin/python bench/bench_adapters.py [--calls 200000] [--requests 64]

Drives the vLLM and SGLang stand-ins of tests/fakes/frameworks with their GPU sleeps removed and
their schedulers returning one prebuilt batch (a decode step of `--requests` requests), so a
step is little more than the calls the adapters wrap, and times every step with
perf_counter_ns:

* unwrapped: before the adapters are installed;
* listening: adapters installed and a collector's marks file present (every step writes its
  cycle, phases and load records in one write);
* idle: adapters installed, nobody listening (the wrappers pass straight through).

The cost per step is the difference of the medians (ns).  `--requests` is the decode batch
the stand-in schedules at every step (the load computation reads one entry per request).
Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fakes" / "frameworks"))


def cost_ns(base: Callable[[], object], wrapped: Callable[[], object], calls: int,
            touch: Callable[[], None]) -> tuple[float, float]:
    """(median ns of `base()`, median ns of `wrapped()`) over `calls` calls each, alternated in
    chunks of 1,000 (this shared VM's speed drifts; only alternated runs compare), the marks
    file's atime refreshed between chunks as a listening collector does."""
    clock = time.perf_counter_ns
    out: tuple[list[int], list[int]] = ([], [])
    for start in range(0, calls, 1_000):
        touch()
        for fn, times in ((base, out[0]), (wrapped, out[1])):
            for _ in range(min(1_000, calls - start)):
                t0 = clock()
                fn()
                times.append(clock() - t0)
    return statistics.median(out[0]), statistics.median(out[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--requests", type=int, default=64)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="perfdiff-bench-adapters-")
    os.environ.update(PERFDIFF_MARKER_DIR=tmp, FAKE_BATCH=str(a.requests), FAKE_OUTPUT=str(10**9),
                      FAKE_REQUESTS=str(a.requests))
    marks = Path(tmp) / f"{os.getpid()}.marks"

    def touch() -> None:
        if marks.exists():
            os.utime(marks, ns=(time.time_ns(), marks.stat().st_mtime_ns))

    import sglang.srt.managers.scheduler as sgl
    import vllm.v1.executor.abstract as vex
    from vllm.v1.engine.core import EngineCore

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    vex._gpu = lambda s: None  # noqa: SLF001 - the stand-in's GPU sleep
    sgl.time = types.SimpleNamespace(sleep=lambda s: None)
    ids = [f"r{i}" for i in range(a.requests)]
    decode = SchedulerOutput([], CachedRequestData(ids, [False] * len(ids), [[]] * len(ids), [0] * len(ids)),
                             dict.fromkeys(ids, 1), len(ids))
    VllmScheduler.schedule = lambda self, *args: decode  # type: ignore[method-assign]
    VllmScheduler.update_from_output = lambda self, out, model_out: {}  # type: ignore[method-assign]
    VllmScheduler.has_requests = lambda self: True  # type: ignore[method-assign]
    batch = ScheduleBatch([Req(r, [0]) for r in ids], ForwardMode.DECODE)
    sgl.Scheduler.get_next_batch_to_run = lambda self: batch  # type: ignore[method-assign]
    sgl.Scheduler.process_batch_result = lambda self, b, result: None  # type: ignore[method-assign]

    def vllm_engine() -> Callable[[], object]:
        engine = EngineCore()
        for i in range(a.requests):
            engine.add_request(f"r{i}")
        engine.step_fn()  # the prefill step: every later one decodes the whole batch
        return engine.step_fn

    def sglang_iteration(sched: object) -> Callable[[], object]:
        recv, nxt = sched.request_receiver.recv_requests, sched.get_next_batch_to_run  # type: ignore[attr-defined]
        run, proc = sched.run_batch, sched.process_batch_result  # type: ignore[attr-defined]

        def one() -> None:
            recv()
            b = nxt()
            proc(b, run(b))
        return one

    base_v, base_s = vllm_engine(), sglang_iteration(sgl.Scheduler())  # built before the adapters

    from perfdiff.collectors.cupti import adapters
    from perfdiff.collectors.cupti.adapters.sglang import _Iteration
    from perfdiff.marker import listening

    rec = adapters.install()
    assert rec is not None
    os.close(os.open(marks, os.O_CREAT | os.O_WRONLY, 0o600))
    touch()
    assert listening()
    sched = sgl.Scheduler()
    it = _Iteration.install(rec, sched)
    assert it is not None
    wrapped_v, wrapped_s = vllm_engine(), sglang_iteration(sched)
    on_v = cost_ns(base_v, wrapped_v, a.calls, touch)
    on_s = cost_ns(base_s, wrapped_s, a.calls, touch)
    size = marks.stat().st_size
    marks.unlink()
    del os.environ["PERFDIFF_MARKER_DIR"]  # else the target makes its own file in the announced directory
    time.sleep(0.2)  # the target notices within marker.CHECK_NS
    it.boundary()  # the scheduler's open iteration ends at its next recv_requests, as in its loop
    idle_v = cost_ns(base_v, wrapped_v, a.calls, lambda: None)
    idle_s = cost_ns(base_s, wrapped_s, a.calls, lambda: None)
    assert rec.errors == 0, rec.error_texts
    shutil.rmtree(tmp, ignore_errors=True)
    rows = [("vLLM EngineCore.step (5 phases, load)", on_v, idle_v),
            ("SGLang scheduler iteration (4 phases, load)", on_s, idle_s)]
    print(f"Adapters, {a.calls:,} steps each, decode batch of {a.requests} requests "
          f"({platform.python_version()}, {os.cpu_count()} CPUs); {size / 1e6:.1f} MB of records written")
    print()
    print("| step | unwrapped (µs) | listening: cost per step (µs) | nobody listening: cost per step (µs) |")
    print("|---|---|---|---|")
    for name, on, idle in rows:
        print(f"| {name} | {on[0] / 1e3:.2f} | {(on[1] - on[0]) / 1e3:.2f} | {(idle[1] - idle[0]) / 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
