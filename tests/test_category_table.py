"""The op-category table as result data (Analysis.categories, the JSON, the DataFrame) and where
the report shows it: on the first screen for runs on other GPUs (a synthetic H100 against
MI300X pair, names CUDA against HIP), nowhere for the shipped examples (same GPU, rows match)."""
from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES
from vendor_pair import vendor_pair

import perfdiff
from perfdiff.analyze.records import OpCategory as C
from perfdiff.render.markdown import categories_place


def test_cross_vendor_pair_has_the_table_on_its_first_screen(tmp_path: Path) -> None:
    r = perfdiff.compare(*vendor_pair(tmp_path))
    c = r.analysis
    assert c.hardware_differs and c.unmatched_gpu_share > 0.5
    rows = {x.category: x for x in c.categories}
    assert set(rows) == {C.GEMM, C.ATTENTION, C.NORMALIZATION, C.ELEMENTWISE, C.MEMCPY}
    assert rows[C.GEMM].t_n_us > rows[C.GEMM].t_a_us and rows[C.ATTENTION].d_us > 200.0
    assert (rows[C.GEMM].calls_n, rows[C.GEMM].calls_a) == (1.0, 1.0)
    assert categories_place(c) == "first"
    md = r.to_markdown()
    first = md[:md.index("## 1. High-Level Performance Summary")]
    assert "| Category | GPU time N → A | share N → A | Δ | calls N → A | functions N → A |" in first
    assert "| GEMM |" in first and "| attention |" in first
    assert first.index("**Verdict:**") < first.index("| Category |")
    df = r.categories
    assert list(df["category"]) == ["gemm", "attention", "normalization", "elementwise", "memcpy"]
    import json

    (tmp_path / "c.json").write_text(json.dumps(r.to_json()))
    back = perfdiff.read_comparison(tmp_path / "c.json")
    assert back.analysis.categories == c.categories


def test_examples_show_no_category_table() -> None:
    for example in ("cpufreq", "contention"):
        r = perfdiff.compare(EXAMPLES / example / "normal", EXAMPLES / example / "abnormal")
        assert categories_place(r.analysis) is None
        assert "| Category |" not in r.to_markdown()
    assert {x.category for x in r.analysis.categories} == set()  # contention: no GPU work


def test_some_unmatched_gpu_time_puts_the_table_in_the_body(tmp_path: Path) -> None:
    from dataclasses import replace

    r = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    c = r.analysis
    k = next(i for i, f in enumerate(c.functions) if f.kind == "kernel")
    fs = list(c.functions)
    fs[k] = replace(fs[k], presence="new")  # one kernel one run only: a few % of the GPU time
    c2 = replace(c, functions=tuple(fs))
    assert 0 < c2.unmatched_gpu_share < 0.5 and categories_place(c2) == "body"


def test_first_screen_holds_the_five_largest_changes_and_section_1_all(tmp_path: Path) -> None:
    from dataclasses import replace

    from perfdiff.analyze.records import CategoryRow
    from perfdiff.render.markdown import render_markdown

    r = perfdiff.compare(*vendor_pair(tmp_path)).result
    extra = tuple(CategoryRow(k, 1.0, 1.0, 0.1, 0.1, 0.0, 1.0, 1.0, 1, 1) for k in (C.COMMUNICATION, C.OTHER))
    c = replace(r.analysis, categories=r.analysis.categories + extra)
    md = render_markdown(replace(r, analysis=c))
    first, rest = md.split("## 1. High-Level Performance Summary")
    assert first.count("\n| ") == 1 + 5 and "| communication |" not in first and "| GEMM |" in first
    assert "The other 2 categories are in section 1." in first
    body = rest[:rest.index("## 2.")]
    assert "GPU time by kind of work, every category:" in body
    assert "| communication |" in body and "| other |" in body and "| GEMM |" in body
