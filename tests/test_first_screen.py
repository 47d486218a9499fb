"""The first screen of a report is ticket-sized: the verdict and the top table within about 40
lines, no line in it wider than ~200 characters, on the examples and on real traces."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES

import perfdiff

SCREEN = 45  # lines
WIDTH = 220  # characters


def check_first_screen(md: str) -> None:
    lines = md.splitlines()
    screen = lines[:SCREEN]
    text = "\n".join(screen)
    assert "**Verdict:**" in text and "| # | Function | Device | τ (pp of " in text, text
    wide = [ln for ln in screen if len(ln) > WIDTH]
    assert not wide, wide
    assert "p 0 " not in md and "p 0," not in md and "[" not in screen[2]  # no list reprs in the header


@pytest.mark.parametrize("example", ["cpufreq", "contention"])
def test_examples(example: str) -> None:
    check_first_screen(perfdiff.compare(EXAMPLES / example / "normal", EXAMPLES / example / "abnormal").to_markdown())


@pytest.mark.real
@pytest.mark.parametrize("pair", [
    ("kmcho2019/Rodinia_3.1_Gaussian/report3.sqlite", "kmcho2019/Rodinia_3.1_Gaussian/report2.sqlite"),
    ("pytorch/kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
     "pytorch/kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
    ("facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
     "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz"),
], ids=["rodinia", "kineto", "hta"])
def test_real_traces(real: Path, pair: tuple[str, str]) -> None:
    check_first_screen(perfdiff.compare(real / pair[0], real / pair[1]).to_markdown())


def test_identical_gpus_are_collapsed() -> None:
    from perfdiff.render.markdown import gpu_list

    gpus = [{"name": "NVIDIA A100-SXM4-80GB"}] * 8 + [{"name": "T4"}, "junk"]
    assert gpu_list(gpus) == "8 × NVIDIA A100-SXM4-80GB, T4"
    assert gpu_list(None) == "" and gpu_list([{"index": 0}]) == "?"


@pytest.mark.real
def test_kernels_alike_but_for_a_template_argument_read_apart(real: Path) -> None:
    """The HTA pair's report names two embedding kernels that differ only inside their
    template arguments (…cta_per_row_1<float, float, float, 2ul>… and …5ul…): one took 10 ms
    more per cycle, the other moved against the cycle.  Their shortened names differ in every
    sentence (each with its argument), and any tag shown is in the list of names in full."""
    import re

    md = perfdiff.compare(real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
                          real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz",
                          ).to_markdown()
    bold = set(re.findall(r"\*\*(void split\\_embedding\\_backward[^*]*)\*\* on GPU", md))
    assert len(bold) >= 2, bold
    head, full = md.split("<summary>Function names in full</summary>")
    full = full[:full.index("</details>")]
    tags = set(re.findall(r"\\\[([0-9a-f]{4,16})\\\]", head))
    assert all(f"\\[{t}\\] " in full for t in tags), tags  # every tag the report shows, explained
    assert any("5ul" in b for b in bold) and any("2ul" in b for b in bold)  # what tells them apart, shown


@pytest.mark.real
def test_the_renamed_data_loader_reads_as_its_change(real: Path) -> None:
    """The ResNet-50 pair's cause is the data loader's move from worker processes to the main
    process, a function matched under another name: the verdict names it by what changed,
    not by a head and tail that read like the normal run's name alone."""
    root = real / "pytorch/kineto/tb_plugin/samples"
    md = perfdiff.compare(root / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                          root / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz").to_markdown()
    verdict = md[md.index("**Verdict:**"):md.index("## 1.")]
    assert "**input pipeline stall**: **enumerate…{MultiProcessing ⇄ SingleProcess}Data…**" in verdict
    # Its share holds the copies and casts nested in it (+9.7 pp), not its self time alone (+25.3).
    assert "(+35.00 pp of the abnormal cycle, with the work nested in it, q 0.004)" in verdict
    assert "- **A ⇄ B**: one function under two names, A in the normal run and B in the abnormal one" in md


@pytest.mark.real
def test_a_class_on_host_and_gpu_states_each_share(real: Path) -> None:
    """On the HTA pair, "new or added work" holds cudaMemcpyAsync on the host and the copies
    it issues on the GPU: their times overlap in the cycle, so the verdict gives each device's
    share (their sum would explain more than the 37 pp the cycle grew).  The pair ran on an
    A100 and a V100: "different hardware" comes first and holds the kernels one GPU ran only."""
    from perfdiff.analyze.verdict_records import VerdictCode

    root = real / "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff"
    c = perfdiff.compare(root / "control/control.json.gz", root / "test/test.json.gz")
    assert c.verdict[0].code == VerdictCode.DIFFERENT_HARDWARE
    v = next(x for x in c.verdict if x.code == VerdictCode.NEW_WORK)
    assert [d for d, _ in v.tau_by_device] == ["Host", "GPU 3"]
    assert sum(pp for _, pp in v.tau_by_device) == pytest.approx(v.tau_pp)
    verdict = (md := c.to_markdown())[md.index("**Verdict:**"):md.index("## 1.")]
    assert "(+39.29 pp on Host and +12.12 pp on GPU 3 of the abnormal cycle" in verdict
    assert "(+7.95 pp of the abnormal cycle" in verdict  # one device: its share alone


@pytest.mark.real
def test_the_verdict_gives_throughput_where_the_median_held(tmp_path: Path) -> None:
    """Prefill in 24 % of the serving steps against 12 %: the median step held (+0.8 %) while
    the mean one grew 31 %.  The verdict's first line gave the +0.8 % alone, under "new or added
    work +23 pp"; it now gives the throughput lost too."""
    from test_direction import decode_loop

    n = decode_loop(tmp_path / "n", seed=3, prefill_share=0.10, attention_us=30.0, n=300)
    a = decode_loop(tmp_path / "a", seed=4, prefill_share=0.25, attention_us=30.0, n=300)
    (line,) = [x for x in perfdiff.compare(n, a).to_markdown().splitlines() if x.startswith("**Verdict:**")]
    assert line == ("**Verdict:** median cycle 617 µs → 622 µs (+0.8%; Mann–Whitney p <0.001, 300 vs 300 "
                    "cycles); mean cycle 911 µs → 1.19 ms: throughput -23.6% (Welch p <0.001).")


def test_the_verdict_opens_with_how_much_and_how_sure(real: Path) -> None:
    """The ResNet pair's median step rose 39 % on 6 steps a run, which the U-test does not
    find significant (p 0.065): the verdict's first line says both, where the summary table
    shows the +39 % alone and the test came only in section 3.  Six steps are too few to check
    that they are independent: the class resting on that cause is marked †, and the first line
    says what † means (issue 34)."""
    root = real / "pytorch/kineto/tb_plugin/samples"
    md = perfdiff.compare(root / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                          root / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz").to_markdown()
    (line,) = [x for x in md.splitlines() if x.startswith("**Verdict:**")]
    assert line == ("**Verdict:** median cycle 127 ms → 176 ms (+39.3%; Mann–Whitney p 0.065, 6 vs 6 cycles; "
                    "not significant at α 0.05). † Under 20 cycles a run: too few to check their independence; "
                    "the q of a † class may be too small.")
    assert [x for x in md.splitlines() if x.startswith("- **input pipeline stall**") and x.endswith(". †")]
