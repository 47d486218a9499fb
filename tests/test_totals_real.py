"""Real captures of one step per run: compared, not refused and not cut into pieces."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import run_cli
from test_first_screen import check_first_screen

pytestmark = pytest.mark.real

TRACES = "AMD-AGI/TraceLens/tests/traces"
BERT = "gaunernst_bert-small-uncased__1016001.json.gz"
QWEN = f"{TRACES}/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def test_one_step_per_run_is_compared_by_totals(real: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """bert-small, one step on an H100 and one on an MI300: refused with exit 2 ("only 1/1
    profiler-step cycle(s)"); now compared by totals, said on the first screen."""
    code, _, err = run_cli(["compare", real / TRACES / "h100" / BERT, real / TRACES / "mi300" / BERT,
                            "-o", tmp_path / "r.md", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    check_first_screen((tmp_path / "r.md").read_text())
    first = "\n".join((tmp_path / "r.md").read_text().splitlines()[:15])
    assert "1 step per run: totals compared; per-call tests" in first
    assert "**Verdict:** step 4.43 ms → 4.01 ms, -9.5%; 1 step per run, not tested." in first
    # The other vendor leads the verdict, as in the JSON: its renamed kernels are the hardware's.
    verdict = (tmp_path / "r.md").read_text().split("**Verdict:**")[1].split("\n\n")[1]
    assert verdict.startswith("- **different hardware**: NVIDIA H100 80GB HBM3 → AMD Instinct MI300X VF; CUDA → HIP")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["plan"]["regime"] == "totals"
    # each call a sample: tested through `compare` too, whose runs keep only the rows μ needs
    assert len(data["per_call"]) >= 10 and "- **slower per call**: " in (tmp_path / "r.md").read_text()


def _scaled(src: Path, dst: Path, name_part: str, factor: float) -> str:
    """The trace with each launch of the first kernel whose name holds `name_part` ×factor
    long (the kernels after it unmoved: they overlap no more than a slower kernel would
    delay them)."""
    data = json.loads(gzip.open(src).read())
    kernel = next(e["name"] for e in data["traceEvents"] if e.get("cat") == "kernel" and name_part in e["name"])
    for e in data["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == kernel:
            e["dur"] = e["dur"] * factor
    with gzip.open(dst, "wt") as f:
        json.dump(data, f)
    return kernel


def test_a_kernel_slower_per_call_in_one_step_is_named(real: Path, tmp_path: Path) -> None:
    """Qwen, one step of 24 layers, against itself with one kernel ×1.5 per launch: that
    kernel is named, slower per call."""
    import perfdiff
    from perfdiff.parallel import Parallel

    kernel = _scaled(real / QWEN, tmp_path / "slow.json.gz", "silu_kernel", 1.5)
    c = perfdiff.compare(real / QWEN, tmp_path / "slow.json.gz", parallel=Parallel.serial())
    md = c.to_markdown()
    f = next(f for f in c.result.analysis.functions if f.name == kernel)
    assert f.per_call_a_us / f.per_call_n_us == pytest.approx(1.5, rel=0.02)
    assert f.q_t <= 0.05
    # one step of 24 layers: cut at the kernel sequence that repeats inside it, and said
    assert "repeats of a kernel sequence inside 1 step per run.**" in "\n".join(md.splitlines()[:8])
    verdict = md.split("**Verdict:**", 1)[1].split("## 1.", 1)[0]
    assert "silu" in verdict


def test_one_step_per_run_gives_a_tree_too(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`perfdiff tree` reads the same plan: the one step per run, not "too few to compare"."""
    code, _, err = run_cli(["tree", real / TRACES / "h100" / BERT, real / TRACES / "mi300" / BERT,
                            "-o", tmp_path / "t.md"], capsys)
    assert code == 0, err
    md = (tmp_path / "t.md").read_text()
    assert "1 ProfilerStep" in md and "too few to compare" not in md
