"""Kernels matched by what launched them: a kernel that vanished and one that appeared under
the same launching op are one finding ("replaced"), and the verdict says the implementation
was swapped, instead of naming the new kernel as added work."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from block_trace import FLASH, SAGE, SDPA, block_trace

import perfdiff
from perfdiff.analyze.evidence import FindingCode, ReplacedEvidence
from perfdiff.analyze.verdict_records import VerdictCode
from perfdiff.bundle import RunData
from perfdiff.launches import launch_chains
from perfdiff.render.markdown import render_markdown

QWEN = "AMD-AGI/TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
FLASH_QWEN = "pytorch_flash::flash_fwd_kernel"


def _pair(tmp_path: Path) -> perfdiff.api.Comparison:
    n = block_trace(tmp_path / "flash.json", seed=1)
    a = block_trace(tmp_path / "sage.json", seed=2, attention=SAGE, inner_op="sage::fwd")
    return perfdiff.compare(n, a)


def test_a_kernels_launch_chain_is_the_ops_open_at_its_launch(tmp_path: Path) -> None:
    run: RunData = perfdiff.load(block_trace(tmp_path / "t.json", blocks=2))
    chains = launch_chains(run)
    assert chains[(FLASH[0][0], "GPU 0", "kernel")] == ("aten::_flash_attention_forward", SDPA)
    assert chains[("sm90_xmma_gemm_qkv", "GPU 0", "kernel")] == ("aten::addmm", "aten::linear")
    assert chains[("layer_norm_kernel", "GPU 0", "kernel")] == ("aten::layer_norm",)


def test_one_step_of_28_blocks_with_attention_swapped_is_one_replacement(tmp_path: Path) -> None:
    r = _pair(tmp_path).result
    c = r.analysis
    # Cut at the block inside the one step, not compared as one piece.
    assert c.plan is not None and c.plan.source.value == "kernel-sequence"
    assert c.normal.n_cycles >= 20 and c.abnormal.n_cycles >= 20
    replaced = [f for f in r.findings if f.code is FindingCode.REPLACED]
    assert len(replaced) == 1
    x = replaced[0]
    assert x.function == SDPA and x.device == "GPU 0"
    assert isinstance(x.evidence, ReplacedEvidence)
    gone = [c.functions[i].name for i in x.related[:x.evidence.gone]]
    new = [c.functions[i].name for i in x.related[x.evidence.gone:]]
    assert gone == ["flash_fwd_kernel"] and new == ["sage_fwd_kernel", "sage_quant_kernel"]
    # The new kernels, the implementations' own ops and the added launches are said in it, not as new work.
    assert [v.code for v in r.verdict] == [VerdictCode.IMPLEMENTATION_SWAPPED]
    assert not [f for f in r.findings if f.code is FindingCode.CAUSE]
    md = render_markdown(r)
    head = md[:md.index("## 1.")]
    assert "implementation swapped" in head and "flash\\_fwd\\_kernel" in head and "sage\\_fwd\\_kernel" in head
    assert "scaled\\_dot\\_product\\_attention" in head


def test_the_same_kernels_under_the_same_ops_are_no_replacement(tmp_path: Path) -> None:
    n = block_trace(tmp_path / "n.json", seed=1)
    a = block_trace(tmp_path / "a.json", seed=2)
    r = perfdiff.compare(n, a).result
    assert r.analysis.replacements == ()
    assert not [f for f in r.findings if f.code is FindingCode.REPLACED]


def test_a_kernel_renamed_in_a_real_qwen_trace_is_named_as_replaced(real: Path, tmp_path: Path) -> None:
    """The Qwen H100 trace against itself with its flash-attention kernel renamed: the
    replacement is named under the op that launched it, both kernels in it."""
    src = real / QWEN
    doc = json.loads(gzip.decompress(src.read_bytes()))
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and str(e.get("name", "")).startswith(f"void {FLASH_QWEN}"):
            e["name"] = "sage_attention_fwd_kernel"
            renamed += 1
    assert renamed == 34
    other = tmp_path / "renamed.json"
    other.write_text(json.dumps(doc))
    r = perfdiff.compare(src, other).result
    replaced = [f for f in r.findings if f.code is FindingCode.REPLACED]
    assert len(replaced) == 1
    x = replaced[0]
    names = [r.analysis.functions[i].name for i in x.related]
    assert any(FLASH_QWEN in n for n in names[:1]) and names[1:] == ["sage_attention_fwd_kernel"]
    assert "attention" in (x.function or "")
    assert r.verdict[0].code is VerdictCode.IMPLEMENTATION_SWAPPED
    assert not [f for f in r.findings if f.code is FindingCode.KERNEL_SWAP]  # said once, as the replacement


def test_one_step_with_its_attention_swapped_is_compared_by_totals_and_says_so(tmp_path: Path) -> None:
    """One step per run and nothing repeating inside it (a FLUX step, in the small): compared by
    totals, the swap is the verdict (alone: nothing else changed), stated with the step's change."""
    n = block_trace(tmp_path / "flash.json", blocks=1, seed=1)
    a = block_trace(tmp_path / "sage.json", blocks=1, seed=2, attention=SAGE, inner_op="sage::fwd")
    r = perfdiff.compare(n, a).result
    assert r.analysis.plan is not None and r.analysis.plan.regime.value == "totals"
    assert [f.code for f in r.findings][:2] == [FindingCode.STEP_CHANGE, FindingCode.REPLACED]
    assert [v.code for v in r.verdict] == [VerdictCode.IMPLEMENTATION_SWAPPED]
    # The new kernels are said in the replacement, not again as new work.
    assert not [f for f in r.findings if f.code is FindingCode.NEW and "sage" in (f.function or "")]
    md = render_markdown(r)
    head = md[:md.index("## 1.")]
    assert "**Verdict:** step " in head and "1 step per run, not tested" in head
    assert "**implementation swapped**: under **aten::scaled\\_dot\\_product\\_attention**" in head
