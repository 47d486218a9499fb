"""`perfdiff compare` on real third-party traces."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from test_first_screen import check_first_screen

pytestmark = pytest.mark.real

RODINIA = "kmcho2019/Rodinia_3.1_Gaussian"
KINETO = "pytorch/kineto/tb_plugin/samples"
NW4_A = f"{KINETO}/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
NW4_B = f"{KINETO}/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
NW0 = f"{KINETO}/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def compare(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], a: str, b: str, *extra: str) -> dict:
    code, _, err = run_cli(["compare", real / a, real / b, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json",
                            *extra], capsys)
    assert code == 0, err
    check_first_screen((tmp_path / "r.md").read_text())  # every real report is ticket-sized
    return json.loads((tmp_path / "r.json").read_text())


def test_rodinia_fan2_regression(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = compare(real, tmp_path, capsys, f"{RODINIA}/report3.sqlite", f"{RODINIA}/report2.sqlite")
    for side in ("normal", "abnormal"):  # no markers: a cycle is one Fan1 + Fan2 iteration
        assert rep[side]["cycle_source"] == "kernel-sequence"
        assert "period 2" in rep[side]["cycle_detail"] and "Fan1" in rep[side]["cycle_detail"]
        assert 4090 <= rep[side]["n_cycles"] <= 4095
    top = rep["details"][0]
    assert rep["functions"][top["func"]]["name"].startswith("Fan2")
    fan2 = next(f for f in rep["functions"] if f["name"].startswith("Fan2"))
    assert fan2["q_t"] <= 0.05
    assert fan2["per_call_n_us"] == pytest.approx(187, rel=0.03)
    assert fan2["per_call_a_us"] == pytest.approx(683, rel=0.03)
    assert fan2["per_call_a_us"] / fan2["per_call_n_us"] == pytest.approx(3.6, rel=0.05)
    first_cause = next(f for f in rep["findings"] if f["code"] == "cause")
    assert first_cause["function"].startswith("Fan2")


def test_rodinia_fan2_speedup_worded_as_faster(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same pair the other way round (report2, Fan2 3.6× slower, as the normal run): a
    speed-up, its verdict says Fan2 got faster, τ is a share of the normal (longer) cycle and no
    share runs past ±100 % of it; the kernel leads the table, the host states stand below it."""
    rep = compare(real, tmp_path, capsys, f"{RODINIA}/report2.sqlite", f"{RODINIA}/report3.sqlite")
    assert rep["tau_base"] == "normal"
    first = rep["verdict"][0]
    assert first["code"] == "gpu-kernel-regression" and first["direction"] == "faster"
    assert -100 <= first["tau_pp"] < -50
    cause = rep["findings"][first["evidence"][0]]
    assert cause["function"].startswith("Fan2")
    fs = rep["functions"]
    assert all(abs(f["tau_pp"]) <= 100 and f["beta_n"] <= 100 and f["beta_a"] <= 100 for f in fs), \
        [(f["name"], f["tau_pp"], f["beta_n"]) for f in fs if abs(f["tau_pp"]) > 100 or f["beta_n"] > 100]
    order = [fs[r["func"]] for r in rep["details"]]
    assert order[0]["name"].startswith("Fan2")
    first_host = next(i for i, f in enumerate(order) if f["kind"] == "host")
    assert all(f["kind"] != "host" for f in order[:first_host]) and first_host > 1
    md = (tmp_path / "r.md").read_text()
    verdict = md.split("**Verdict:**", 1)[1].split("## 1.", 1)[0]
    assert "**GPU kernels faster**: **Fan2(" in verdict and "pp of the normal cycle" in verdict, verdict
    assert "regression" not in verdict
    assert "| τ (pp of N cycle) |" in md


def test_kineto_dataloader_cause(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = compare(real, tmp_path, capsys, NW4_A, NW0)
    assert rep["normal"]["cycle_source"] == rep["abnormal"]["cycle_source"] == "profiler-step"
    assert rep["normal"]["median_us"] == pytest.approx(125_000, rel=0.05)
    assert rep["abnormal"]["median_us"] == pytest.approx(176_000, rel=0.05)
    first_cause = next(f for f in rep["findings"] if f["code"] == "cause")
    assert "DataLoader" in first_cause["function"] and "__next__" in first_cause["function"]
    assert first_cause["q"] <= 0.05
    v = first_cause["evidence"]
    assert v["incl_n_us"] == pytest.approx(1_400, rel=0.1)
    assert v["incl_a_us"] == pytest.approx(69_000, rel=0.05)
    # the two iterator names are matched as one step, side by side
    assert any("MultiProcessing" in a and "SingleProcess" in b for a, b in rep["renames"])
    cm = [c for c in rep["common_modes"] if c["triggered"]]
    assert len(cm) == 1 and cm[0]["ratio"] < 0.85
    assert any(f["code"] == "common-mode" for f in rep["findings"])


def test_kineto_same_config_windows_have_no_kernel_finding(real: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rep = compare(real, tmp_path, capsys, NW4_A, NW4_B)
    kernels = [f for f in rep["functions"] if f["kind"] == "kernel" and f["tested"]]
    assert kernels
    assert all(f["q_t"] > 0.05 and f["q_beta"] > 0.05 for f in kernels)
    assert not [f for f in rep["findings"] if f["code"] == "cause" and f["function"] in {k["name"] for k in kernels}]


@pytest.mark.parametrize("a,b", [
    ("facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
     "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz"),
    ("hpcgroup/pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite",
     "hpcgroup/pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"),
    ("AMD-AGI/TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
     "AMD-AGI/TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
], ids=["hta-control-test", "cloverleaf", "tracelens-h100"])
def test_other_real_pairs_compare(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], a: str, b: str) -> None:
    rep = compare(real, tmp_path, capsys, a, b)
    assert rep["normal"]["n_cycles"] >= 2 and rep["details"]
    if "control" in a:  # an A100 job against a V100 one: said before the findings
        assert any(x["code"] == "gpu-model" and any("A100" in g for g in x["normal"])
                   and any("V100" in g for g in x["abnormal"]) for x in rep["comparability"])
        md = (tmp_path / "r.md").read_text()
        top = md[:md.index("## 1.")]  # before any finding: at the top of the report
        assert "GPU model differs: 8 × NVIDIA A100-PG509-200 vs 2 × Tesla V100-SXM2-16GB" in top
        assert "world size differs: 8 (rank 3) vs 2 (rank 1)" in top
        assert any(x["code"] == "world-size" and x["normal"] == 8 and x["abnormal"] == 2 for x in rep["comparability"])
        # rank 3's GPU 3 against rank 1's GPU 1: matched by role, so each NCCL kernel is one row
        assert rep["plan"]["device_map"] == [["GPU 1", "GPU 3"]]
        nccl = [f for f in rep["functions"] if f["name"].startswith("ncclKernel")]
        assert nccl and all(f["presence"] == "both" and f["device"] == "GPU 3" for f in nccl)
        assert "matched by their order of activity: the abnormal run's GPU 1 as GPU 3" in top
        assert "rank 3 of 8" in top and "rank 1 of 2" in top
        assert "The runs are not like for like (see the top of this report)" in md
    assert (tmp_path / "r.md").read_text().startswith("# Cross Performance Comparison")


def test_fuser_export_compares(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = "NVIDIA/Fuser/@ee4fcf30/report1.sqlite"
    rep = compare(real, tmp_path, capsys, f, f)
    assert rep["normal"]["n_cycles"] >= 2


@pytest.mark.real
def test_waits_never_rank_above_the_kernel_that_changed(real: Path) -> None:
    """Rodinia report3 vs report2: Fan2 is the first row, and no wait (pthread_cond_timedwait,
    cudaThreadSynchronize, poll) comes before a significant non-wait row; the host state `oncpu`,
    which grew with the cycle and which the verdict does not name, comes after the waits."""
    import perfdiff

    rodinia = real / "kmcho2019/Rodinia_3.1_Gaussian"
    a = perfdiff.compare(rodinia / "report3.sqlite", rodinia / "report2.sqlite").analysis
    rows = [a.functions[r.func] for r in a.details]
    assert rows[0].name.startswith("Fan2")
    waits = [i for i, f in enumerate(rows) if f.wait]
    significant = [i for i, f in enumerate(rows) if not f.wait and not f.host_state and f.q_t <= a.alpha]
    states = [i for i, f in enumerate(rows) if f.host_state and f.q_t <= a.alpha]
    assert waits and max(significant) < min(waits) and states and max(waits) < min(states)
