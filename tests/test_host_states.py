"""Host states per thread and below the functions (docs/STATISTICS.md, "Host states per thread").

A vLLM-like engine loop: one thread runs the step's phases (`Executor.execute_model` the large
one), seven more threads of the process sleep through every tick (a tokenizer pool, an RPC
reader), so the host collector's `blocked` and `read` are several threads' time summed, many
times the cycle.  When `execute_model` gets 30 % slower, the cycle grows and every idle thread's
blocked time with it: summed over threads, `blocked` led the table with τ past +100 pp.  Per
thread, no host row is more than its cycle, and the one that changed leads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfdiff
from step_loops import engine_run, host_state_rows
from perfdiff.analyze.order import named_by_verdict
from perfdiff.analyze.verdict import VerdictCode

from test_verdict_host_wide import compare as contention_pair
from verdict_pairs import _overlap

T0_NS = 1_760_000_000_000_000_000
TID = 77
THREADS = 8  # the engine thread and seven that sleep through every tick
TICK_NS = 10_000_000
CYCLES = 150
PHASES = [("Scheduler.schedule", 300.0), ("Executor.execute_model", 3_000.0), ("Executor.sample_tokens", 150.0),
          ("OutputProcessor.process_outputs", 100.0)]


def write_run(out: Path, *, seed: int, slow: float = 1.0) -> Path:
    """One run of the loop; `slow` scales execute_model's own work."""
    rng = np.random.default_rng(seed)
    n, rows, busy = CYCLES, [], []
    t = np.zeros(n, np.int64)
    for name, us in PHASES:
        work = rng.lognormal(np.log(us * (slow if name == "Executor.execute_model" else 1.0) * 1e3), 0.04, n)
        work = work.astype(np.int64)
        rows.append((name, t.copy(), t + work))
        busy.append((t.copy(), t + work))
        t = t + work
    dur = t + rng.lognormal(np.log(200e3), 0.05, n).astype(np.int64)  # the engine waits for its next batch
    starts = T0_NS + np.concatenate([[0], np.cumsum(dur)[:-1]])
    t_end = int(starts[-1] + dur[-1])
    activity = pd.concat([pd.DataFrame({"function": name, "kind": "cpu", "device": "Host", "start_ns": starts + s,
                                        "end_ns": starts + e, "busy_ns": e - s, "tid": TID, "launch_ns": -1,
                                        "stream": -1, "correlation": -1, "bytes": -1}) for name, s, e in rows])
    tick0 = np.arange(T0_NS, t_end, TICK_NS, dtype=np.int64)
    tick1 = np.minimum(tick0 + TICK_NS, t_end)
    width = (tick1 - tick0).astype(np.float64)
    s = np.concatenate([starts + a for a, _ in busy])
    e = np.concatenate([starts + b for _, b in busy])
    order = np.argsort(s, kind="stable")
    oncpu = _overlap(tick0, tick1, s[order], e[order])
    # The host collector's states, summed over the process's threads at every tick: six idle
    # threads and the engine thread between steps blocked, one reader asleep in read().
    states = {"oncpu": oncpu + width * rng.uniform(0.01, 0.02, len(tick0)),
              "blocked": 6 * width + (width - oncpu),
              "read": width * rng.uniform(0.97, 1.0, len(tick0))}
    return engine_run(out, activity=activity, host=host_state_rows(states, tick0, tick1), starts=starts,
                      ends=starts + dur, tid=TID, seed=seed, generator="tests/test_host_states.py", pid=3000 + seed,
                      collector={"name": "host", "interval_ns": TICK_NS, "max_threads": THREADS})


def test_execute_model_leads_every_host_state(tmp_path: Path) -> None:
    c = perfdiff.compare(write_run(tmp_path / "n", seed=1), write_run(tmp_path / "a", seed=2, slow=1.3))
    fs = c.analysis.functions
    order = [fs[r.func] for r in c.analysis.details]
    first = order[0]
    assert first.name == "Executor.execute_model" and first.tau_pp > 10, order[:3]
    host = [f for f in fs if f.kind == "host"]
    assert {f.name for f in host} == {"oncpu", "blocked", "read"}
    # Per thread: no host state is more than its cycle, in share or in τ.
    for f in host:
        assert f.beta_n <= 100 and f.beta_a <= 100 and abs(f.tau_pp) <= 100, f
    blocked = next(f for f in host if f.name == "blocked")
    assert blocked.t_a_us < np.mean(c.analysis.abnormal.dur_us)
    assert c.verdict[0].code == VerdictCode.CPU_WORK
    assert c.findings[c.verdict[0].evidence[0]].function == "Executor.execute_model"
    md = c.to_markdown()
    top = md.split("| # | Function |", 1)[1].split("\n\n", 1)[0].splitlines()
    assert top[2].startswith("| 1 | Executor.execute\\_model | Host |"), top
    assert all("per thread" in row for row in top if "| oncpu |" in row or "| blocked |" in row or "| read |" in row)


def test_null_pair_stays_quiet(tmp_path: Path) -> None:
    c = perfdiff.compare(write_run(tmp_path / "n", seed=3), write_run(tmp_path / "a", seed=4))
    assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL], c.verdict


def test_a_host_state_the_verdict_names_stays_with_the_functions(tmp_path: Path) -> None:
    """CPU contention names `runq` as its cause: it stays in the first tier, above the waits and
    the host states that only moved with the cycle."""
    c = contention_pair(tmp_path, 4, wait_us=60.0, slow=1.0)
    assert c.verdict[0].code == VerdictCode.CPU_CONTENTION
    named = named_by_verdict(c.findings, c.verdict)
    fs = c.analysis.functions
    runq = next(i for i, f in enumerate(fs) if f.name == "runq")
    assert runq in named
    pos = [r.func for r in c.analysis.details]
    unnamed_host = [pos.index(i) for i, f in enumerate(fs) if f.kind == "host" and i not in named and i in pos
                    and fs[i].q_t <= c.analysis.alpha]
    assert all(pos.index(runq) < p for p in unnamed_host)


@pytest.mark.parametrize(("max_threads", "threads"), [(None, 7), (4, 7), (10, 10)])
def test_counter_threads(tmp_path: Path, max_threads: int | None, threads: int) -> None:
    """The threads a state read as a counter is divided by: the collector's largest thread
    count, at least the threads a state holds on average (the test's `blocked`: about 6.6, so 7)."""
    from perfdiff.attribute import counter_threads
    from perfdiff.bundle import load_bundle

    run = load_bundle(write_run(tmp_path / "r", seed=5))
    run.manifest["collectors"] = [{"name": "host"} if max_threads is None else {"name": "host",
                                                                                 "max_threads": max_threads}]
    assert counter_threads(run) == threads
