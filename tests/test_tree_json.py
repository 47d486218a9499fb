"""The range tree in the comparison JSON: key `tree`, the TreeDiff's records as they are, when
the report has its section (either run's own ranges nest), null otherwise."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_cli
from test_tree import make_nvtx_export
from test_tree_gpu import kineto_trace

import perfdiff
from perfdiff.render import FORMAT_VERSION, read_comparison_json
from perfdiff.render.json_report import read_comparison


def test_nested_ranges_are_in_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The NVTX pair with attention 10× slower: the JSON written by `compare --json` holds the
    tree the Markdown shows, node for node, and reads back."""
    n = make_nvtx_export(tmp_path / "normal.sqlite", slow=1.0, seed=1)
    a = make_nvtx_export(tmp_path / "abnormal.sqlite", slow=10.0, seed=2)
    out = tmp_path / "report.json"
    code, _, err = run_cli(["compare", n, a, "-o", tmp_path / "report.md", "--json", out], capsys)
    assert code in (0, 1), err
    data = read_comparison_json(out)
    assert data["format_version"] == FORMAT_VERSION == 3
    t = data["tree"]
    d = perfdiff.compare(n, a).tree
    assert d is not None
    assert t["basis"] == "per-cycle" and t["n_cycles"] == list(d.n_cycles) and t["nested"] == [True, True]
    assert t["roots"] == list(d.roots) and d.n_material == 3
    assert [tuple(x["path"]) for x in t["nodes"]] == [x.path for x in d.nodes]
    attn = t["nodes"][2]
    assert attn["path"] == ["iteration", "forward", "attention"] and attn["material"] and not attn["gpu_side"]
    assert attn["q"] == pytest.approx(d.nodes[2].q) and attn["test"]["p_mwu"] == pytest.approx(d.nodes[2].test.p_mwu)
    assert attn["parent"] == 1 and attn["presence"] == "both"
    # NVTX only: GPU time unknown (NaN in the record) is null, never 0.
    assert math.isnan(d.nodes[0].gpu_n_us) and t["nodes"][0]["gpu_n_us"] is None
    assert t["gpu_reason"][0] == d.gpu_reason[0] is not None
    assert list(t["nodes"][0]) == list(t["nodes"][1])  # every node has the same keys, in one order
    json.dumps(data, allow_nan=False)
    back = read_comparison(out).tree  # the records again, depth and Δ derived as before
    assert back is not None and back.nodes[2].depth == 2 and back.nodes[2].delta_us == d.nodes[2].delta_us


def test_runs_whose_ranges_do_not_nest_have_no_tree_key(tmp_path: Path) -> None:
    """Steps holding forward and backward, on the CPU and the GPU side alike: no nesting of
    the process's own, no Range tree section, no key."""
    n = kineto_trace(tmp_path / "n.json", fwd_kernel_us=300, seed=1)
    a = kineto_trace(tmp_path / "a.json", fwd_kernel_us=3000, seed=2)
    c = perfdiff.compare(n, a)
    assert c.tree is None and c.to_json()["tree"] is None
    assert "Range tree" not in c.to_markdown()
