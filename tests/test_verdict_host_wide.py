"""A host-wide slowdown per call and a host-side class that explains only part of it.

A host-only serving loop: per cycle one thread runs five CPU-side phases (one large, four
small).  CPU contention from outside makes each phase call wait on the run queue for about
the same time (a wake-up late), so the small phases slow by large ratios and the large one
barely.  When the large phase is also slower by itself (the planted cause), the phases' ratios
can agree well enough for the common-mode check to take them all as one host-wide ratio; the
contention explains only its own run-queue time of that, and the rest is CPU-side work that
the verdict must still name.  Under contention alone the run queue explains the common ratio.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfdiff
from step_loops import engine_run, host_state_rows
from perfdiff.analyze.findings import FindingCode
from perfdiff.analyze.verdict import VerdictCode

from verdict_pairs import _overlap

T0_NS = 1_760_000_000_000_000_000
TID = 77
TICK_NS = 10_000_000
CYCLES = 150
# (name, µs per call): one large phase and four small ones, run in this order every cycle.
PHASES = [("Executor.execute_model", 3_000.0), ("Scheduler.schedule", 300.0), ("Scheduler.update", 200.0),
          ("Executor.sample_tokens", 150.0), ("OutputProcessor.process", 100.0)]


def write_run(out: Path, *, seed: int, wait_us: float = 0.0, slow: float = 1.0) -> Path:
    """One run of the loop: each phase call waits `wait_us` on the run queue (recorded as
    `runq` host time inside the call) and the large phase's own work is × `slow`."""
    rng = np.random.default_rng(seed)
    n, rows = CYCLES, []
    t = np.zeros(n, np.int64)
    waits: list[tuple[np.ndarray, np.ndarray]] = []
    busy: list[tuple[np.ndarray, np.ndarray]] = []
    for j, (name, us) in enumerate(PHASES):
        work = rng.lognormal(np.log(us * (slow if j == 0 else 1.0) * 1e3), 0.04, n).astype(np.int64)
        wait = rng.lognormal(np.log(wait_us * 1e3), 0.1, n).astype(np.int64) if wait_us else np.zeros(n, np.int64)
        rows.append((name, t.copy(), t + wait + work))
        waits.append((t.copy(), t + wait))
        busy.append((t + wait, t + wait + work))
        t = t + wait + work
    dur = t + rng.lognormal(np.log(200e3), 0.05, n).astype(np.int64)
    starts = T0_NS + np.concatenate([[0], np.cumsum(dur)[:-1]])
    t_end = int(starts[-1] + dur[-1])
    activity = pd.concat([pd.DataFrame({"function": name, "kind": "cpu", "device": "Host", "start_ns": starts + s,
                                        "end_ns": starts + e, "busy_ns": e - s, "tid": TID, "launch_ns": -1,
                                        "stream": -1, "correlation": -1, "bytes": -1}) for name, s, e in rows])
    tick0 = np.arange(T0_NS, t_end, TICK_NS, dtype=np.int64)
    tick1 = np.minimum(tick0 + TICK_NS, t_end)

    def covered(spans: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        s = np.concatenate([starts + a for a, _ in spans])
        e = np.concatenate([starts + b for _, b in spans])
        order = np.argsort(s, kind="stable")
        return _overlap(tick0, tick1, s[order], e[order])

    width = (tick1 - tick0).astype(np.float64)
    states = {"oncpu": covered(busy), "runq": covered(waits) + width * rng.uniform(0.005, 0.01, len(tick0)),
              "iowait": width * rng.uniform(0.001, 0.003, len(tick0))}
    return engine_run(out, activity=activity, host=host_state_rows(states, tick0, tick1), starts=starts,
                      ends=starts + dur, tid=TID, seed=seed, generator="tests/test_verdict_host_wide.py", pid=2000 + seed,
                      collector={"name": "host", "interval_ns": TICK_NS})


def compare(tmp_path: Path, seed: int, *, wait_us: float, slow: float) -> perfdiff.Comparison:
    n = write_run(tmp_path / f"n{seed}", seed=2 * seed)
    a = write_run(tmp_path / f"a{seed}", seed=2 * seed + 1, wait_us=wait_us, slow=slow)
    return perfdiff.compare(n, a)


def test_contention_explains_only_its_share_of_a_host_wide_slowdown(tmp_path: Path) -> None:
    for seed in (1, 2, 3):
        c = compare(tmp_path, seed, wait_us=60.0, slow=1.3)
        wide = [x for x in c.findings if x.code == FindingCode.DEVICE_WIDE and x.device == "Host"]
        assert wide, "the phases' ratios agree: the common-mode check takes them as one"  # the case under test
        codes = [v.code for v in c.verdict]
        assert set(codes) == {VerdictCode.CPU_CONTENTION, VerdictCode.CPU_WORK}, c.verdict
        work = next(v for v in c.verdict if v.code == VerdictCode.CPU_WORK)
        runq = next(v for v in c.verdict if v.code == VerdictCode.CPU_CONTENTION)
        # The rest is the planted 900 µs of the large phase (as a share of the abnormal
        # cycle), not the run queue's 5 × 60 µs.
        planted_pp = 100 * 900 / float(np.median(c.analysis.abnormal.dur_us))
        rest = wide[0].evidence.tau_pp - runq.tau_pp
        hw = work.detail.host_wide
        assert hw.explained_pp == runq.tau_pp and hw.host_wide_pp == wide[0].evidence.tau_pp
        assert rest == pytest.approx(planted_pp, rel=0.15) and work.tau_pp >= rest > runq.tau_pp > 0
        md = c.to_markdown()
        assert (f"more than host CPU contention explains ({runq.tau_pp:.2f} of {wide[0].evidence.tau_pp:.2f} pp)"
                in md and "**Executor.execute\\_model**" in md)


def test_contention_alone_explains_the_host_wide_slowdown(tmp_path: Path) -> None:
    """The small phases' common ratio is all run-queue time: no CPU work is added for it.
    (The phases whose ratio deviates from the common one stay causes of their own; with no
    per-thread run-queue time inside them they cannot be told from CPU work, and rank after
    the contention.)"""
    for seed in (4, 5, 6):
        c = compare(tmp_path, seed, wait_us=60.0, slow=1.0)
        assert any(x.code == FindingCode.DEVICE_WIDE and x.device == "Host" for x in c.findings)
        assert c.verdict[0].code == VerdictCode.CPU_CONTENTION, c.verdict
        assert not any(getattr(v.detail, "host_wide", None) for v in c.verdict), c.verdict
        assert "more than host CPU contention explains" not in c.to_markdown()


def test_null_pairs_stay_quiet(tmp_path: Path) -> None:
    for seed in (7, 8, 9):
        c = compare(tmp_path, seed, wait_us=0.0, slow=1.0)
        assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL], c.verdict
