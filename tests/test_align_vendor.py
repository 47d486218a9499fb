"""CUDA runtime calls matched call for call with their HIP counterparts (analyze/align.py,
model/cuda_names.HIP_CALLS): on keys, on a synthetic H100 against MI300X pair and on the real
bert-small pair's calls."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REAL
from vendor_pair import vendor_pair

import perfdiff
from perfdiff.analyze.align import match_runtime
from perfdiff.model.cuda_names import hip_counterparts, is_launch_call, is_sync_call


def _api(*names: str) -> list[tuple[str, str, str]]:
    return [(n, "Host", "api") for n in names]


def test_counterparts_table_and_spelling() -> None:
    assert hip_counterparts("cudaMemcpyAsync") == ("hipMemcpyAsync", "hipMemcpyWithStream")
    assert hip_counterparts("cudaLaunchKernel_v7000")[0] == "hipLaunchKernel"
    assert hip_counterparts("cudaStreamCreateWithFlags") == ("hipStreamCreateWithFlags",)
    assert hip_counterparts("cuMemcpyDtoH") == ("hipMemcpyDtoH",)
    assert hip_counterparts("aten::mm") == () and hip_counterparts("culprit") == ()


def test_each_call_matched_once_by_preference_either_way() -> None:
    v = _api("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMalloc",
             "cudaEventRecord", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemsetAsync", "my_call")
    w = _api("hipLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyWithStream",
             "hipMalloc", "hipEventRecord", "hipStreamSynchronize", "hipDeviceSynchronize", "hipMemsetAsync")
    got = {a[0]: b[0] for a, b in match_runtime(v, w)}
    assert got == {"cudaLaunchKernel": "hipLaunchKernel", "cuLaunchKernel": "hipExtModuleLaunchKernel",
                   "cudaLaunchKernelExC": "hipModuleLaunchKernel", "cudaMemcpyAsync": "hipMemcpyWithStream",
                   "cudaMalloc": "hipMalloc", "cudaEventRecord": "hipEventRecord",
                   "cudaStreamSynchronize": "hipStreamSynchronize", "cudaDeviceSynchronize": "hipDeviceSynchronize",
                   "cudaMemsetAsync": "hipMemsetAsync"}
    # The normal run on HIP, the abnormal on CUDA: the pairs keep (normal, abnormal) order.
    back = {a[0]: b[0] for a, b in match_runtime(_api("hipMemcpy"), _api("cudaMemcpy"))}
    assert back == {"hipMemcpy": "cudaMemcpy"}
    # Other devices, other kinds: no match.
    assert match_runtime([("cudaMalloc", "Host", "api")], [("hipMalloc", "GPU 0", "api")]) == []
    assert match_runtime([("cudaMalloc", "Host", "cpu")], [("hipMalloc", "Host", "cpu")]) == []


def test_matched_names_are_still_launches_and_syncs() -> None:
    assert is_launch_call("cudaLaunchKernel ⇄ hipLaunchKernel")
    assert is_sync_call("cudaStreamSynchronize ⇄ hipStreamSynchronize")
    assert not is_launch_call("cudaMalloc ⇄ hipMalloc")


def test_synthetic_cross_vendor_pair_reads_runtime_calls_as_renames(tmp_path: Path) -> None:
    r = perfdiff.compare(*vendor_pair(tmp_path))
    assert set(r.analysis.renames) >= {("cudaLaunchKernel", "hipLaunchKernel"),
                                       ("cudaMemcpyAsync", "hipMemcpyWithStream"),
                                       ("cudaStreamSynchronize", "hipStreamSynchronize")}
    rows = {f.name: f for f in r.analysis.functions if f.kind == "api"}
    copy = rows["cudaMemcpyAsync ⇄ hipMemcpyWithStream"]
    assert copy.presence == "both" and (copy.calls_n, copy.calls_a) == (1.0, 1.0)
    assert "hipMemcpyWithStream" not in rows and "cudaMemcpyAsync" not in rows
    md = r.to_markdown()
    assert "cudaMemcpyAsync ⇄ hipMemcpyWithStream" in md


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not found at {REAL}")
def test_real_bert_small_calls_matched() -> None:
    from perfdiff.inputs import open_run

    def keys(gpu: str) -> list[tuple[str, str, str]]:
        a = open_run(REAL / "AMD-AGI" / "TraceLens" / "tests" / "traces" / gpu
                     / "gaunernst_bert-small-uncased__1016001.json.gz").activity
        a = a[a["kind"].astype(str) == "api"]
        return sorted({(str(n), str(d), "api") for n, d in zip(a["function"], a["device"], strict=True)})

    kn, ka = keys("h100"), keys("mi300")
    got = {a[0]: b[0] for a, b in match_runtime([k for k in kn if k not in ka], [k for k in ka if k not in kn])}
    assert got == {"cudaLaunchKernel": "hipLaunchKernel", "cuLaunchKernel": "hipExtModuleLaunchKernel",
                   "cudaLaunchKernelExC": "hipModuleLaunchKernel", "cudaMemcpyAsync": "hipMemcpyWithStream",
                   "cudaDeviceSynchronize": "hipDeviceSynchronize"}
