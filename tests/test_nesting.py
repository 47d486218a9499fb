"""Nested work is reported under its parent: own time of each CPU range inside each enclosing
range, and causes that run inside another cause's range listed under it."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_segment_attribute import run_of

import perfdiff
from perfdiff.analyze import FindingCode
from perfdiff.attribute import attribute_activity
from perfdiff.nesting import nesting_of
from perfdiff.model.cycles import Cycles
from perfdiff.model.schema import CycleSource

KINETO = "pytorch/kineto/tb_plugin/samples"


def cpu(name: str, s: int, e: int, busy: int, tid: int = 1) -> dict:
    return {"function": name, "kind": "cpu", "device": "Host", "start_ns": s, "end_ns": e, "busy_ns": busy,
            "tid": tid}


def test_own_time_inside_each_enclosing_range() -> None:
    import numpy as np

    run = run_of([
        cpu("step", 0, 100, 40),  # holds load and copy
        cpu("load", 10, 60, 30),  # holds one copy
        cpu("copy", 20, 40, 20),  # inside load, inside step
        cpu("copy", 70, 80, 10),  # inside step only
        cpu("copy", 200, 210, 10),  # outside everything
        cpu("copy", 20, 40, 20, tid=2),  # another thread: inside nothing
    ])
    n = nesting_of(run, attribute_activity(run, Cycles(np.array([0]), np.array([300]), CycleSource.WINDOW, "")))
    key = {name: (name, "Host", "cpu") for name in ("step", "load", "copy")}
    assert n.own_ns[key["copy"]] == 60
    assert n.inside_ns[(key["copy"], key["load"])] == 20
    assert n.inside_ns[(key["copy"], key["step"])] == 30
    assert n.inside_ns[(key["load"], key["step"])] == 30
    assert n.share(key["copy"], key["step"]) == pytest.approx(0.5)
    assert (key["step"], key["copy"]) not in n.inside_ns


@pytest.mark.real
def test_dataloader_holds_the_ops_it_calls(real: Path) -> None:
    """Kineto num_workers 4 vs 0: the DataLoader step is the first cause, and aten::copy_,
    aten::div, aten::_cat that run inside it are listed under it, not as causes of their own."""
    base = real / KINETO
    c = perfdiff.compare(base / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                         base / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    causes = [f for f in c.findings if f.code == FindingCode.CAUSE]
    assert causes[0].function.startswith("enumerate(DataLoader)")
    inner = {c.analysis.functions[i].name for i in causes[0].related}
    assert {"aten::copy_", "aten::div", "aten::_cat"} <= inner
    assert not {"aten::copy_", "aten::div", "aten::_cat"} & {f.function for f in causes}
    assert "Inside it, also slower: **aten::copy\\_**" in c.to_markdown()


@pytest.mark.real
def test_two_windows_of_one_run_name_no_cause(real: Path) -> None:
    """Kineto num_workers 4, window 1 against window 2 (steps #5-#10 and #16-#21 of one job):
    no cause is named."""
    base = real / KINETO / "resnet50_num_workers_4"
    c = perfdiff.compare(base / "worker0.1623212756351.pt.trace.json.gz", base / "worker0.1623213129365.pt.trace.json.gz")
    assert not [f for f in c.findings if f.code in (FindingCode.CAUSE, FindingCode.DEVICE_WIDE)]
    assert any(f.code == FindingCode.NO_CAUSE for f in c.findings)
