"""The verdict names the right class of change on labelled pairs: the shipped examples, real
traces, fake-GPU scenarios and simulations; null pairs give "no material change"."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EXAMPLES

import perfdiff
from perfdiff.analyze.verdict import VerdictCode

KINETO = "pytorch/kineto/tb_plugin/samples"


def codes(c: perfdiff.Comparison) -> list[VerdictCode]:
    return [v.code for v in c.verdict]


def named(c: perfdiff.Comparison, code: VerdictCode) -> list[str]:
    v = next(v for v in c.verdict if v.code == code)
    return [c.findings[i].function for i in v.evidence if c.findings[i].function]


def test_cpufreq_example_names_the_clock_cut_and_the_kernel() -> None:
    c = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    assert codes(c)[0] == VerdictCode.CPU_CLOCK
    assert "Scheduler.get_next_batch_to_run" in named(c, VerdictCode.CPU_CLOCK)
    assert any(n.startswith("void flash::flash_fwd_kernel") for n in named(c, VerdictCode.GPU_KERNEL))
    assert "- **host CPU clock reduced**: CPU clock 85.86 → 22.50 %" in c.to_markdown()
    assert [(s.device, s.cause) for s in c.verdict[0].starved] == [("GPU 0", VerdictCode.CPU_CLOCK)]


def test_contention_example_names_cpu_contention() -> None:
    c = perfdiff.compare(EXAMPLES / "contention" / "normal", EXAMPLES / "contention" / "abnormal")
    assert codes(c) == [VerdictCode.CPU_CONTENTION] and named(c, VerdictCode.CPU_CONTENTION) == ["runq"]


@pytest.mark.real
def test_real_traces(real: Path) -> None:
    k = real / KINETO
    c = perfdiff.compare(k / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                         k / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert codes(c)[0] == VerdictCode.INPUT_PIPELINE
    (s,) = c.verdict[0].starved  # the GPU waited for the data loader: busy 75 → 58 % of the step
    assert s.cause == VerdictCode.INPUT_PIPELINE and s.busy_n_pct - s.busy_a_pct > 15
    r = real / "kmcho2019/Rodinia_3.1_Gaussian"
    c = perfdiff.compare(r / "report3.sqlite", r / "report2.sqlite")
    assert codes(c) == [VerdictCode.GPU_KERNEL] and named(c, VerdictCode.GPU_KERNEL)[0].startswith("Fan2")
    assert not c.verdict[0].starved  # a slower kernel makes the GPU busier, not idle
    c = perfdiff.compare(k / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                         k / "resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz")
    assert codes(c) == [VerdictCode.NO_MATERIAL]
    assert c.to_json()["verdict"][0]["code"] == "no-material-change"
    # Six cycles a run: a lone change cannot reach q ≤ 0.05, but changes shared by many can
    # (the other pair above, with as many cycles, has significant rows): the report says which.
    (needed,) = [x for x in c.to_markdown().splitlines() if "smallest attainable" in x]
    assert "a change in one function alone cannot reach q ≤ 0.05" in needed and "collect ≥ 7 cycles" in needed


@pytest.mark.real
def test_a_longer_collective_is_no_kernel_regression(real: Path) -> None:
    """HTA's pair (rank 3 of 8 against rank 1 of 2): the all-reduce kernel grew, which one
    rank's trace cannot tell from waiting for a later peer; the verdict says so instead of
    calling it a kernel regression."""
    root = real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff"
    c = perfdiff.compare(root / "control/control.json.gz", root / "test/test.json.gz")
    assert named(c, VerdictCode.COLLECTIVES)[0].startswith("ncclKernel_AllReduce")
    assert VerdictCode.GPU_KERNEL not in codes(c)
    assert "a collective waits for the last rank" in c.to_markdown()


def test_fake_gpu_scenario_with_another_process(tmp_path: Path) -> None:
    from fakes import make_scenario_bundle

    n, a = make_scenario_bundle("competing_process", tmp_path / "s", seed=3)
    c = perfdiff.compare(n, a)
    assert codes(c) == [VerdictCode.OTHER_PROCESS]  # the kernels' slowdown is that process's
    assert c.verdict[0].detail.devices == ("GPU 0",) and c.verdict[0].tau_pp > 5


def test_simulated_clock_cut_on_the_gpu_is_device_wide() -> None:
    from test_matched import CYCLES, compare, k, run_of

    import numpy as np

    from perfdiff.analyze.findings import build_findings
    from perfdiff.analyze.verdict import build_verdict

    def run(seed: int, scale: float):
        rng = np.random.default_rng(seed)
        rows, t = [], 0
        for _ in range(CYCLES):
            for name, d in zip(["k1", "k2", "k3", "k4"], [300_000, 200_000, 500_000, 400_000], strict=True):
                dur = int(d * scale * (1 + 0.01 * rng.standard_normal()))
                rows.append(k(name, t, t + dur))
                t += dur + 1_000
            t += 20_000
        return run_of(rows)
    c = compare(run(1, 1.0), run(2, 1.35))
    v = build_verdict(c, build_findings(c))
    assert [x.code for x in v] == [VerdictCode.GPU_DEVICE_WIDE] and 1.3 < v[0].detail.ratio < 1.4


def test_fake_gpu_power_cap_is_named_as_power_throttling(tmp_path: Path) -> None:
    from fakes import make_scenario_bundle

    n, a = make_scenario_bundle("power_cap", tmp_path / "s", seed=3)
    c = perfdiff.compare(n, a)
    v = next(v for v in c.verdict if v.code == VerdictCode.GPU_THROTTLING)
    assert v.detail.reason == "power" and codes(c)[0] == VerdictCode.GPU_THROTTLING
    assert "**GPU throttling** (power)" in c.to_markdown()
    assert not v.detail.held and codes(c).count(VerdictCode.GPU_THROTTLING) == 1  # said once, with its kernels


def test_a_power_cap_that_slows_no_kernel_is_on_the_first_screen(tmp_path: Path) -> None:
    """The same cap on a loop it does not slow: the cycle held, so no kernel is a cause, and the
    verdict said "no material change" while the GPU ran capped half the time.  It says so."""
    from fakes import make_scenario_bundle

    n, a = make_scenario_bundle("power_cap_idle", tmp_path / "s", seed=3)
    c = perfdiff.compare(n, a)
    assert codes(c) == [VerdictCode.GPU_THROTTLING]
    d = c.verdict[0].detail
    assert d.held and d.reason == "power" and d.device == "GPU 0" and d.share_n_pct == 0 and d.share_a_pct >= 45
    assert d.clock_a_mhz < 0.9 * d.clock_n_mhz
    first = c.to_markdown().split("## 1.")[0]
    assert re.search(r"\*\*GPU throttling\*\* \(power\): GPU 0 held back by its power limit [0-9.]+ % of the time "
                     r"\(normal run: 0\.0 %\), SM clock 1,9\d\d → 1,\d{3} MHz \(-1\d\.\d%\); no kernel got slower", first)
    assert "perfdiff" not in first.split("**Verdict:**")[1]  # never its own collector as another process


def test_a_host_wide_slowdown_is_cpu_work_not_no_change() -> None:
    """Every CPU-side function on the host slower per call by one ratio: the common-mode check
    takes them out of the causes, and the verdict must still name CPU-side work (it said "no
    material change" while the cycle grew 25 %)."""
    from dataclasses import replace

    from perfdiff.analyze.evidence import CauseEvidence, DeviceWideEvidence
    from perfdiff.analyze.findings import Finding, FindingCode
    from perfdiff.analyze.verdict import build_verdict
    from perfdiff.render.text import NameTable
    from perfdiff.render.wording import verdict_lines

    c = perfdiff.compare(EXAMPLES / "contention" / "normal", EXAMPLES / "contention" / "normal").analysis
    wide = Finding(FindingCode.DEVICE_WIDE, device="Host",
                   evidence=DeviceWideEvidence(ratio=1.3, k=6, iqr_log=0.02, absorbed=6, tau_pp=22.0, absorbed_funcs=(),
                                               host=True))
    v = build_verdict(c, [wide])
    assert [x.code for x in v] == [VerdictCode.CPU_WORK] and v[0].tau_pp == 22.0 and v[0].evidence == (0,)
    assert "every CPU-side function on Host ×1.30 per call" in verdict_lines(c, v, [wide], NameTable.plain())[0]
    faster = replace(wide, evidence=replace(wide.evidence, ratio=0.8, tau_pp=-5.0))
    assert [x.code for x in build_verdict(c, [faster])] == [VerdictCode.NO_MATERIAL]
    # A host state left among the causes (more time on CPU, 1.6 pp) is CPU work too, not a
    # reason that explains the host: the two are one class. Before, that state alone was the
    # verdict and the 22 pp host-wide slowdown (its slower ranges inside) was dropped.
    oncpu = next(i for i, f in enumerate(c.functions) if f.name == "oncpu" and f.kind == "host")
    state = Finding(FindingCode.CAUSE, function="oncpu", device="Host", q=1e-9, func=oncpu,
                    evidence=CauseEvidence(tau_pp=1.6, t_n_us=0.0, t_a_us=0.0, incl_n_us=float("nan"),
                                           incl_a_us=float("nan"), nested=0, tau_nested_pp=0.0))
    v = build_verdict(c, [wide, state])
    assert [x.code for x in v] == [VerdictCode.CPU_WORK] and v[0].tau_pp == pytest.approx(23.6)
    assert set(v[0].evidence) == {0, 1} and v[0].detail.host_wide.ratio == 1.3


@pytest.mark.real
def test_waits_of_idle_threads_are_no_symptoms(real: Path) -> None:
    """Rodinia's pair: two helper threads that never call CUDA wait through every cycle (poll,
    pthread_cond_timedwait, β ≈ 100 % in both runs), so their time grew with the cycle alone;
    the main thread's cudaThreadSynchronize (92 → 99 %, a GPU sync) waited on the slower kernel."""
    from perfdiff.analyze.findings import FindingCode

    r = real / "kmcho2019/Rodinia_3.1_Gaussian"
    c = perfdiff.compare(r / "report3.sqlite", r / "report2.sqlite")
    symptoms = [x.function for x in c.findings if x.code == FindingCode.SYMPTOM]
    (prop,) = [x for x in c.findings if x.code == FindingCode.PROPORTIONAL]
    assert symptoms == ["cudaThreadSynchronize"]
    assert {c.analysis.functions[i].name for i in prop.related} >= {"poll", "pthread_cond_timedwait"}
    top = c.to_markdown().split("## 2.")[0]
    assert "Wilcoxon signed-rank p <0.001, 4,094 vs 4,094 cycles)" in top  # counts read as counts
    assert "| poll | Host |" in top and [x for x in top.splitlines() if "| poll |" in x][0].endswith(
        "| wait, with the cycle |")


@pytest.mark.real
def test_fixed_windows_name_what_grew_per_window(real: Path) -> None:
    """Rodinia's pair cut into 100 ms windows: a last, partial window made the abnormal run's
    mean "cycle" shorter, so Fan2 (3.6× slower a call, +25 pp) read as moving against the
    change and the verdict said no material change.  Windows last alike by construction:
    what grew per window is what the abnormal run spent more time on."""
    r = real / "kmcho2019/Rodinia_3.1_Gaussian"
    c = perfdiff.compare(r / "report3.sqlite", r / "report2.sqlite", window="100ms")
    assert codes(c) == [VerdictCode.GPU_KERNEL] and named(c, VerdictCode.GPU_KERNEL)[0].startswith("Fan2")
    md = c.to_markdown()
    assert md[md.index("**Verdict:**"):].startswith("**Verdict:**\n")  # no median of windows to state
    assert "--window cuts both runs into fixed windows, so they are compared as rates" in md


@pytest.mark.real
def test_kernels_chosen_in_place_of_others_are_no_added_work(real: Path) -> None:
    """The ResNet pair: cuDNN ran its wgrad kernel 15 → 26 times a step (+2.19 pp) in place of
    the splitK GEMM, 12 → 1 (−2.06 pp), and two others; the GPU's time under the convolutions
    held.  The verdict called the wgrad kernel "new or added work"; it is a swap, said as one."""
    from perfdiff.analyze.findings import FindingCode

    k = real / KINETO
    c = perfdiff.compare(k / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                         k / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert codes(c) == [VerdictCode.INPUT_PIPELINE]
    (swap,) = [x for x in c.findings if x.code == FindingCode.KERNEL_SWAP]
    names = [c.analysis.functions[i].name for i in swap.related]
    assert names[0].startswith("void cudnn::cnn::wgrad_alg0_engine") and swap.evidence.grew == 1
    assert "volta_scudnn_128x128_stridedB_splitK_medium_nn_v1" in names[1:]
    assert abs(swap.evidence.net_pp) < 1.0
    assert "Kernel choice changed on GPU 0: **void cudnn::cnn::wgrad" in c.to_markdown()


def _gpu_bound_trace(path: Path, kernel_us: float, seed: int, steps: int = 20) -> Path:
    """One thread launches a kernel and waits for it in cudaDeviceSynchronize, step by step:
    the sync fills > 99 % of every step."""
    import json
    import random

    rnd, ev, t = random.Random(seed), [], 1000.0
    for s in range(steps):
        k = kernel_us * (1 + rnd.uniform(-0.02, 0.02))
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2, "dur": 5,
                "args": {"correlation": 2 * s + 1}},
               {"ph": "X", "cat": "kernel", "name": "my_gemm_kernel", "pid": 0, "tid": 7, "ts": t + 8, "dur": k,
                "args": {"device": 0, "stream": 7, "correlation": 2 * s + 1}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1, "ts": t + 8,
                "dur": k + 2, "args": {"correlation": 2 * s + 2}},
               {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t,
                "dur": k + 14}]
        t += k + 14.5
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def test_the_main_threads_gpu_sync_stays_a_symptom(tmp_path: Path) -> None:
    """A GPU-bound loop: the kernel 5 → 8 ms, and the thread's cudaDeviceSynchronize fills > 99 %
    of each step in both runs.  It is the symptom ("the host waited longer on the GPU"), not
    the wait of a thread idle through every cycle."""
    from perfdiff.analyze.findings import FindingCode

    c = perfdiff.compare(_gpu_bound_trace(tmp_path / "n.json", 5000, 1), _gpu_bound_trace(tmp_path / "a.json", 8000, 2))
    assert [x.function for x in c.findings if x.code == FindingCode.SYMPTOM] == ["cudaDeviceSynchronize"]
    assert not any(x.code == FindingCode.PROPORTIONAL and any(c.analysis.functions[i].name == "cudaDeviceSynchronize"
                                                               for i in x.related) for x in c.findings)


def test_classes_are_ordered_by_the_share_they_explain_not_a_sum_over_devices() -> None:
    """+10 pp on the host and +10 pp on the GPU overlap in the cycle: that class explains
    10 pp, less than a 15 pp class on one device (it once came first, by its sum of 20)."""
    from perfdiff.analyze.verdict import VerdictClass

    both = VerdictClass(VerdictCode.NEW_WORK, tau_pp=20.0, tau_by_device=(("Host", 10.0), ("GPU 0", 10.0)))
    one = VerdictClass(VerdictCode.GPU_KERNEL, tau_pp=15.0)
    assert both.share_pp == 10.0 and one.share_pp == 15.0
    assert VerdictClass(VerdictCode.GPU_KERNEL, tau_pp=-7.0, tau_by_device=(("Host", 2.0), ("GPU 0", -9.0))).share_pp == -9.0


@pytest.mark.parametrize(("calls_n", "calls_a", "same"), [(100.0, 105.0, True), (105.0, 100.0, True),
                                                         (100.0, 106.0, False), (0.0, 0.0, False), (3.0, 0.0, False)])
def test_same_calls_is_within_five_percent_in_both_runs(calls_n: float, calls_a: float, same: bool) -> None:
    """One rule for "the same calls per cycle", read by the per-call common mode and by the
    clock's verdict: called in both runs, counts within ±5 % (|ln ratio| ≤ 0.05)."""
    from perfdiff.analyze.records import FunctionStats

    nan = float("nan")
    f = FunctionStats(name="op", device="host", kind="cpu", wait=False, presence="both", tested=True, t_n_us=1.0,
                      t_a_us=1.0, tau_pp=0.0, t=None, q_t=nan, beta_n=1.0, beta_a=1.0, d_beta=0.0, beta=None,
                      q_beta=nan, presence_n=1.0, presence_a=1.0, calls_n=calls_n, calls_a=calls_a,
                      per_call_n_us=1.0, per_call_a_us=1.0)
    assert f.same_calls is same
