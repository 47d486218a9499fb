"""The verdict class different-hardware: runs on other GPU models or vendors name their kernels
and runtime calls differently; the verdict says so first, with the op categories whose GPU time
moved, instead of "new or added work" for renamed vendor calls."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from conftest import EXAMPLES
from vendor_pair import vendor_pair

import perfdiff
from perfdiff.analyze.records import OpCategory as C
from perfdiff.analyze.verdict import build_verdict
from perfdiff.analyze.verdict_records import HardwareDetail, VerdictCode


def test_cross_vendor_pair_verdict_is_different_hardware_first(tmp_path: Path) -> None:
    r = perfdiff.compare(*vendor_pair(tmp_path))
    v = r.verdict
    assert v[0].code == VerdictCode.DIFFERENT_HARDWARE
    assert VerdictCode.NEW_WORK not in {x.code for x in v}  # no "new work: hipMemcpyWithStream"
    d = v[0].detail
    assert isinstance(d, HardwareDetail)
    assert (d.gpus_n, d.gpus_a) == (("NVIDIA H100 80GB HBM3",), ("AMD Instinct MI300X",))
    assert (d.runtime_n, d.runtime_a) == ("cuda", "hip")
    assert [s.category for s in d.shifts][:2] == [C.ATTENTION, C.GEMM]
    md = r.to_markdown()
    verdict = md[md.index("**Verdict:**"):md.index("## 1. High-Level Performance Summary")]
    first = [ln for ln in verdict.splitlines() if ln.startswith("- ")][0]
    assert first.startswith("- **different hardware**: NVIDIA H100 80GB HBM3 → AMD Instinct MI300X; CUDA → HIP")
    assert "attention 150 µs → 401 µs" in first
    assert verdict.index("**different hardware**") < verdict.index("| Category |")
    # The class and its detail travel through the JSON.
    (tmp_path / "c.json").write_text(json.dumps(r.to_json()))
    back = perfdiff.read_comparison(tmp_path / "c.json")
    assert back.verdict == r.verdict and back.to_markdown() == md


def test_another_runtime_alone_is_different_hardware(tmp_path: Path) -> None:
    """Manifests that name no GPU: the CUDA calls against the HIP calls say the vendor changed."""
    r = perfdiff.compare(*vendor_pair(tmp_path))
    c = replace(r.analysis, comparability=())
    assert c.runtimes == ("cuda", "hip") and c.hardware_differs
    v = build_verdict(c, list(r.findings))
    assert v[0].code == VerdictCode.DIFFERENT_HARDWARE
    assert isinstance(v[0].detail, HardwareDetail) and v[0].detail.gpus_n == ()


def test_same_hardware_has_no_such_class() -> None:
    for example in ("cpufreq", "contention"):
        r = perfdiff.compare(EXAMPLES / example / "normal", EXAMPLES / example / "abnormal")
        assert not r.analysis.hardware_differs
        assert VerdictCode.DIFFERENT_HARDWARE not in {x.code for x in r.verdict}


def test_gpus_unnamed_or_fewer_of_one_model_are_no_other_hardware(tmp_path: Path) -> None:
    from perfdiff.analyze.records import Notice, NoticeCode

    r = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    for n, a in ((("A100",), ()), (("A100", "A100"), ("A100",)), (("?",), ("H100",))):
        c = replace(r.analysis, comparability=(Notice(NoticeCode.GPU_MODEL, normal=n, abnormal=a),))
        assert not c.hardware_differs and c.gpu_models == ()
    c = replace(r.analysis, comparability=(Notice(NoticeCode.GPU_MODEL, normal=("A100",), abnormal=("H100",)),))
    assert c.hardware_differs and c.gpu_models == (("A100",), ("H100",))
