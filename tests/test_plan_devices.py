"""The plan says, for every GPU of a process that drives several, what it would choose on that
GPU's work alone and what it would pass over there.  The export is synthetic
(tests/nsys_job.write_server with one process): a thread per GPU, the thread of GPU 0 marking
each model step with NVTX ranges, the thread of GPU 1 marking nothing; in the abnormal run
GPU 1's attention kernel is 30 % slower."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from nsys_job import SAMPLER, write_server

from perfdiff.api import compare, read_comparison
from perfdiff.model.cycles import PassReason
from perfdiff.model.schema import CycleSource

ONE_PROCESS = {"pids": (3000, 3000), "nvtx": (True, False), "server": None, "tokenizer": None}


def _pair(tmp: Path) -> tuple[Path, Path]:
    return (write_server(tmp / "normal.sqlite", (1_000_000, 1_000_000), seed=1, **ONE_PROCESS),
            write_server(tmp / "abnormal.sqlite", (1_000_000, 1_300_000), seed=2, **ONE_PROCESS))


def test_each_gpu_has_its_own_choice_and_what_it_passed_over(tmp_path: Path) -> None:
    n, a = _pair(tmp_path)
    plan = compare(n, a).analysis.plan
    assert (plan.source, plan.name) == (CycleSource.ANNOTATION, "execute_model")
    # Per iteration, as GPU 0 alone says it: the process's kernel period mixes both GPUs'
    # sequences, and per period the layer's range read 4x.
    assert [(r.name, r.per_step) for r in plan.rejected] == [("aten::linear", 8.0)]
    gpu0, gpu1 = plan.devices
    assert (gpu0.device, gpu0.same, gpu0.plan.source, gpu0.plan.name) == \
        ("GPU 0", True, CycleSource.ANNOTATION, "execute_model")
    # GPU 0's own ranges: the layer's range repeats 8 times a step there (4 layers × 2 linears).
    assert [(r.why, r.name, r.per_step) for r in gpu0.plan.rejected] == [
        (PassReason.RANGE_INSIDE_STEP, "aten::linear", 8.0)]
    # GPU 1's thread marks nothing: its kernels repeat, one step's 17 at the sampler's.
    assert (gpu1.device, gpu1.same, gpu1.plan.source, gpu1.plan.period, gpu1.plan.name) == \
        ("GPU 1", False, CycleSource.KERNEL_SEQUENCE, 17, SAMPLER[1])
    assert not gpu1.plan.rejected and not gpu1.plan.devices


def test_the_report_and_the_json_say_each_gpus_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n, a = _pair(tmp_path)
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    code, _, err = run_cli(["compare", n, a, "-o", out, "--json", js, "--no-plots"], capsys)
    assert code == 0, err
    md = out.read_text(encoding="utf-8")
    plan = md[:md.index("**Verdict:**")]
    assert "The process drives 2 GPUs; each GPU's work alone" in plan
    assert ("- GPU 0: the repeating range **execute\\_model**, a cycle running from one's start to the next's — the "
            "plan's own choice. Passed over, unfit: the range **aten::linear** (it repeats 8× per iteration") in plan
    assert "- GPU 1: a repeating kernel sequence (17 kernels), a cycle starting at each launch of **void" in plan
    devices = json.loads(js.read_text())["plan"]["devices"]
    assert [(d["device"], d["same"], d["plan"]["source"], [r["why"] for r in d["plan"]["rejected"]])
            for d in devices] == [("GPU 0", True, "annotation", ["range-inside-step"]),
                                  ("GPU 1", False, "kernel-sequence", [])]
    # The JSON reads back into the same report.
    assert read_comparison(js).to_markdown() == compare(n, a).to_markdown()


def test_one_gpu_or_cycles_the_user_chose_have_no_plan_per_gpu(tmp_path: Path) -> None:
    n, a = _pair(tmp_path)
    assert compare(n, a, cycle="execute_model").analysis.plan.devices == ()
    one_n = write_server(tmp_path / "n1.sqlite", (1_000_000, 1_000_000), seed=1, server=None, tokenizer=None)
    one_a = write_server(tmp_path / "a1.sqlite", (1_000_000, 1_000_000), seed=2, server=None, tokenizer=None)
    assert compare(one_n, one_a, pid=3000).analysis.plan.devices == ()
