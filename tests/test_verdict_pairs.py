"""The verdict on labelled synthetic pairs (tests/verdict_pairs.py): its first class is the
label on every pair, null pairs give exactly "no material change", a GPU that starved points
at the host-side class that starved it, and two classes are ordered by the share of the cycle
they explain."""
from __future__ import annotations

from pathlib import Path

import pytest
from verdict_pairs import PAIRS, params, write_pair

import perfdiff
from perfdiff.analyze import Thresholds
from perfdiff.analyze.verdict import HOST_SIDE, VerdictCode

NULL_SEEDS = (11, 12, 13, 14)
_cache: dict[str, perfdiff.Comparison] = {}


def compared(label: str, tmp: Path) -> perfdiff.Comparison:
    """The comparison of a labelled pair (or "null-SEED"), computed once per session."""
    if label not in _cache:
        if label.startswith("null-"):
            n, a = write_pair(tmp / label, None, seed=int(label[5:]))
        else:
            n, a = write_pair(tmp / label, label)
        _cache[label] = perfdiff.compare(n, a)
    return _cache[label]


def code_of(label: str) -> VerdictCode:
    """A pair's label: its key up to "/" (a second pair of one class is "class/variant")."""
    return VerdictCode(label.split("/")[0])


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verdict-pairs")


@pytest.mark.parametrize("label", [*PAIRS, *(f"null-{s}" for s in NULL_SEEDS)])
def test_the_first_class_is_the_label(label: str, tmp: Path) -> None:
    codes = [v.code for v in compared(label, tmp).verdict]
    if label.startswith("null-"):
        assert codes == [VerdictCode.NO_MATERIAL]
    else:
        assert codes[0] == code_of(label), codes


@pytest.mark.parametrize("label", list(PAIRS))
def test_a_starved_gpu_points_at_the_host_side_class(label: str, tmp: Path) -> None:
    """Host-side pairs idle the GPU: the first class carries the starved GPU, in the record,
    the JSON and the report; GPU-side pairs make the GPU busier and say nothing of starving."""
    c = compared(label, tmp)
    starved = [(v.code, s) for v in c.verdict for s in v.starved]
    if code_of(label) not in HOST_SIDE:
        assert not starved and "GPU starved" not in c.to_markdown()
        return
    assert len(starved) == 1
    code, s = starved[0]
    assert code == s.cause == code_of(label) and s.device == "GPU 0"
    assert s.busy_a_pct < s.busy_n_pct - 5 and s.p <= c.analysis.alpha
    assert c.to_json()["verdict"][0]["starved"][0]["cause"] == code_of(label).value
    assert "**GPU starved**: GPU 0 busy" in c.to_markdown()


def test_cuda_graphs_turned_off_is_launch_bound(tmp: Path) -> None:
    """One cudaGraphLaunch per cycle became a launch per kernel: launches more numerous than
    the kernels they feed (unchanged), so launch-bound, not new work."""
    v = compared("launch-bound/graphs-off", tmp).verdict[0]
    assert [x.name for x in v.detail.launches] == ["cudaLaunchKernel"]
    assert (v.detail.launches[0].calls_n, v.detail.launches[0].calls_a) == (0.0, 28.0)
    assert v.detail.kernel_calls_n == v.detail.kernel_calls_a


def test_launch_bound_evidence_chain(tmp: Path) -> None:
    """The slower launch calls, the kernels they feed unchanged, the GPU's busy share N → A."""
    v = compared("launch-bound", tmp).verdict[0]
    (call,) = v.detail.launches
    name, per_n, per_a, calls_n, calls_a = call.name, call.per_call_n_us, call.per_call_a_us, call.calls_n, call.calls_a
    assert name == "cudaLaunchKernel" and per_a > 10 * per_n and calls_n == calls_a
    assert v.detail.kernel_calls_n == v.detail.kernel_calls_a == 28
    assert "**cudaLaunchKernel** 5.01 µs → 60 µs per call" in compared("launch-bound", tmp).to_markdown()


def test_added_synchronisation_counts_the_sync_points(tmp: Path) -> None:
    c = compared("added-synchronisation", tmp)
    v = c.verdict[0]
    assert [(x.name, x.calls_n, x.calls_a) for x in v.detail.calls] == [("cudaStreamSynchronize", 1.0, 8.0)]
    assert all(c.findings[i].code.value == "symptom" for i in v.evidence)  # waits stay symptoms
    assert "**cudaStreamSynchronize** 1.0 → 8.0 calls per cycle" in c.to_markdown()


@pytest.mark.parametrize(("input_us", "flash", "first"), [
    (3_000.0, 1.3, VerdictCode.INPUT_PIPELINE), (600.0, 2.5, VerdictCode.GPU_KERNEL)])
def test_two_classes_are_ordered_by_the_share_they_explain(input_us: float, flash: float, first: VerdictCode,
                                                            tmp_path: Path) -> None:
    """A data-loading stall and a kernel regression in one run: whichever explains more of the
    cycle comes first."""
    n, a = write_pair(tmp_path, None, abnormal=params("input-pipeline", input_us=input_us,
                                                     kernel_scale={"flash_fwd_kernel": flash}))
    v = perfdiff.compare(n, a).verdict
    assert [x.code for x in v] [:2] == [first, ({VerdictCode.INPUT_PIPELINE, VerdictCode.GPU_KERNEL} - {first}).pop()]
    assert abs(v[0].tau_pp) > abs(v[1].tau_pp) > 1.0


def test_gpu_busy_share_is_capped_tested_and_adjusted_over_the_gpus() -> None:
    """GPU 0: two rows summing past the cycle read 100 %, then 80 % (starved); GPU 1 unchanged;
    the host's row counts for neither; p is Bonferroni over the two GPUs."""
    import numpy as np
    import pandas as pd

    from perfdiff.analyze.busy import gpu_busy_shares

    keys = pd.DataFrame({"name": ["k1", "copy", "op", "k3"], "device": ["GPU 0", "GPU 0", "Host", "GPU 1"],
                         "kind": ["kernel", "memcpy", "cpu", "kernel"]})
    rng = np.random.default_rng(0)
    K, dur = 60, np.full(60, 1_000.0)

    def own(k1: float) -> np.ndarray:
        return np.vstack([k1 + rng.normal(0, 5, K), np.full(K, 600.0), np.full(K, 900.0),
                          500 + rng.normal(0, 20, K)])
    b0, b1 = gpu_busy_shares(keys, own(600.0), dur, keys, own(200.0), dur, matched=False,
                              thresholds=Thresholds())
    assert (b0.device, b1.device) == ("GPU 0", "GPU 1")
    assert b0.busy_n_pct == 100.0 and abs(b0.busy_a_pct - 80.0) < 1 and b0.p < 1e-10
    assert abs(b1.busy_n_pct - b1.busy_a_pct) < 2 and b1.p == min(1.0, 2 * b1.res.p_mwu)


def test_launch_and_sync_calls_are_known_by_name() -> None:
    from perfdiff.model.cuda_names import is_launch_call, is_sync_call

    assert all(map(is_launch_call, ["cudaLaunchKernel_v7000", "cudaLaunchKernelExC", "cuLaunchKernel",
                                    "cudaGraphLaunch", "hipLaunchKernel"]))
    assert not any(map(is_launch_call, ["cudaLaunchKernelFoo", "cudaMemcpyAsync", "Model.forward"]))
    assert all(map(is_sync_call, ["cudaStreamSynchronize", "cudaDeviceSynchronize_v3020", "cudaStreamWaitEvent",
                                  "cudaMemcpy", "aten::item", "aten::_local_scalar_dense"]))
    assert not any(map(is_sync_call, ["cudaMemcpyAsync", "cudaEventQuery", "cudaStreamIsCapturing", "aten::copy_"]))


@pytest.mark.parametrize("label,metric,words", [
    ("cpu-contention", "host_pressure_cpu_some", "CPU stalls (some)"),
    ("io-wait", "host_pressure_io_some", "I/O stalls (some)"),
])
def test_pressure_stalls_back_contention_and_io_wait(label: str, metric: str, words: str, tmp: Path) -> None:
    """The grown run queue (I/O wait) is backed by the CPU (I/O) pressure stalls that rose with
    it: a signal of the class, its finding among the evidence, its words on the verdict line."""
    c = compared(label, tmp)
    v = c.verdict[0]
    (sig,) = v.detail.signals
    assert sig.metric == metric and sig.mean_a > sig.mean_n + 30
    assert any(getattr(c.findings[i].evidence, "metric", None) == metric for i in v.evidence)
    line = next(x for x in c.to_markdown().splitlines() if "host CPU contention" in x or "host I/O wait" in x)
    assert words in line



@pytest.mark.parametrize(("dropped", "swap"), [(3, True), (2, False)])
def test_kernels_chosen_in_place_of_others(dropped: int, swap: bool, tmp_path: Path) -> None:
    """A new kernel (4 calls of 25 µs a cycle) while rms_norm loses calls (8 → 8 − dropped, 30 µs
    each): taking back 90 µs of the 100 added it is a swap (net ≈ 0.3 pp), said once and no
    cause; taking back 60 µs (60 %) the new kernel stays new work."""
    from perfdiff.analyze.findings import FindingCode

    n, a = write_pair(tmp_path, None, abnormal=params(None, new_kernels=[("winograd_kernel", "kernel", 25.0, 4,
                                                                          "compute")],
                                                      extra_calls={"rms_norm_kernel": -dropped}))
    c = perfdiff.compare(n, a)
    swaps = [x for x in c.findings if x.code == FindingCode.KERNEL_SWAP]
    if swap:
        (x,) = swaps
        names = [c.analysis.functions[i].name for i in x.related]
        assert names == ["winograd_kernel", "rms_norm_kernel"] and abs(x.evidence.net_pp) < 1.0
        assert [v.code for v in c.verdict] == [VerdictCode.NO_MATERIAL]
        codes = {f.code for f in c.findings}
        assert FindingCode.NO_CAUSE not in codes
        assert not any(f.code == FindingCode.OPPOSITE and any(c.analysis.functions[i].name == "rms_norm_kernel"
                                                               for i in f.related) for f in c.findings)
    else:
        assert not swaps and c.verdict[0].code == VerdictCode.NEW_WORK
