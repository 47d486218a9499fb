"""perfdiff never counts itself: its own process tree on the GPU (the collector, the helpers it
starts) is neither the target nor "another process" in any per-process reading."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fakes.fake_nvml import GIB, TARGET_PID, Change, FakeProc, ProcEntry, make_scenario
from perfdiff.collectors.gpu import pids
from test_gpu_sampler import drive


def test_the_collectors_own_pid_is_no_other_process(tmp_path: Path) -> None:
    """A power-capped GPU on which NVML also lists this process (the collector, named perfdiff):
    no other-process event for it, and its share is in neither process_gpu_usage nor
    other_process_gpu_usage."""
    me = os.getpid()
    procs = (FakeProc(TARGET_PID, 60 * GIB, 50, 20), FakeProc(me, 1 * GIB, 7, 1))
    sc = make_scenario("power_cap", changes=[Change(0, 0, load={"procs": procs})])
    tree = dict(sc.proc)
    tree[me] = ProcEntry((me,), "perfdiff")
    run = drive(sc, tmp_path, proc=tree)
    assert [e for e in run.events("other-process") if e["pid"] == me] == []
    assert set(run.rows("other_process_gpu_usage")["value"]) == {0}
    assert set(run.rows("other_process_gpu_mem_used")["value"]) == {0}
    assert 50 in set(run.rows("process_gpu_usage")["value"])


def test_own_tree_is_this_process_and_its_helpers_not_the_target(tmp_path: Path) -> None:
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        m = pids.PidMatcher("/proc")
        m.set_targets({target.pid})
        assert m.is_own(os.getpid()) and m.is_own(helper.pid)
        assert not m.is_own(target.pid) and not m.is_own(1)
        assert pids.descends_from(helper.pid, os.getpid()) and not pids.descends_from(helper.pid, os.getpid(), {helper.pid})
    finally:
        for p in (helper, target):
            p.kill()
            p.wait()
