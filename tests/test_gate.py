"""The CI gate (`compare --fail-on`, perfdiff.analyze.gate): pass, regression or cannot judge,
with a stable reason, on small synthetic pairs whose truth is known; its outputs (stderr, the
report, JUnit XML, the job summary) and its exit codes 0 / 1 / 4."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from step_loops import T0_NS, serial_steps

import perfdiff
from perfdiff.analyze.gate_records import GateMetric, GateOutcome, GateReason
from perfdiff.bundle import RunData, base_manifest, normalize_table, write_bundle

HERE = Path(__file__).resolve().parent


def loop(out: Path, *, seed: int, n: int = 120, kernel_scale: float = 1.0, stall_share: float = 0.0,
         stall_ms: tuple[float, float] = (10.0, 28.0), gpu: bool = True, marked: bool = True) -> Path:
    """A training-like loop of `n` steps: the host schedules (300 µs), then six 1 ms GEMM
    kernels (× `kernel_scale`) run back to back; a `stall_share` of the steps first stall
    uniformly `stall_ms` with nothing running (a CPU quota's throttling); `gpu` False: no
    kernels at all (an empty capture of the GPU).  Steps perfdiff-marked unless not `marked`."""
    rng = np.random.default_rng(seed)

    def steps():
        for _ in range(n):
            stall = int(rng.uniform(*stall_ms) * 1e6) if rng.random() < stall_share else 0
            yield stall, [("schedule", "cpu", "Host", 300.0)] + (
                [("gemm_kernel", "kernel", "GPU 0", 1_000.0 * kernel_scale)] * 6 if gpu else [])
    return serial_steps(out, steps(), rng, sigma=0.02, marked=marked)


def one_shot(out: Path, *, seed: int) -> Path:
    """A one-shot program: 4,000 kernels back to back (1 µs apart: no idle gap), drawn at
    random from three names in the first half and three others in the second, no markers.
    No cycle source exists, and the mix changes between the halves: not stationary."""
    rng = np.random.default_rng(seed)
    rows, t = [], T0_NS
    for i in range(4_000):
        name = f"k{rng.integers(3) + (3 if i >= 2_000 else 0)}"
        dur = int(rng.uniform(20_000, 60_000))
        rows.append({"function": name, "kind": "kernel", "device": "GPU 0", "start_ns": t, "end_ns": t + dur,
                     "busy_ns": dur, "tid": 1, "launch_ns": t, "stream": -1, "correlation": -1, "bytes": -1})
        t += dur + 1_000
    run = RunData(manifest=base_manifest(run_name=out.name, created_ns=T0_NS),
                  activity=normalize_table("activity", pd.DataFrame(rows)),
                  samples=normalize_table("samples", pd.DataFrame(columns=["metric", "device", "t_start_ns",
                                                                          "t_end_ns", "value"])),
                  markers=normalize_table("markers", pd.DataFrame(columns=["name", "start_ns", "end_ns", "tid",
                                                                           "source"])))
    return write_bundle(out, run)


@pytest.fixture(scope="module")
def quota(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A target under a CPU quota: a third of the steps stall 10–28 ms, the kernels 2 % faster:
    the mean cycle about doubles and the P95 about quintuples while the median holds."""
    d = tmp_path_factory.mktemp("quota")
    return loop(d / "normal", seed=1), loop(d / "abnormal", seed=2, kernel_scale=0.98, stall_share=0.32)


@pytest.fixture(scope="module")
def faster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("faster")
    return loop(d / "normal", seed=3), loop(d / "abnormal", seed=4, kernel_scale=0.9)


def _checks(decision) -> dict[GateMetric, tuple[GateOutcome, GateReason]]:
    return {c.metric: (c.outcome, c.reason) for c in decision.checks}


def test_the_quota_pair_is_a_regression_under_the_default_though_its_median_held(quota, tmp_path, capsys) -> None:
    c = perfdiff.compare(*quota)
    a = c.analysis
    mean_pct = 100 * (a.abnormal.mean_us / a.normal.mean_us - 1)
    p95_pct = 100 * (a.quantiles_a["P95"] / a.quantiles_n["P95"] - 1)
    median_pct = c.cycle_time_change_pct
    assert 70 < mean_pct < 130 and p95_pct > 250 and -5 < median_pct < 0  # the issue's +96 %, +374 %, −1.7 %
    d = c.judge(5)
    assert d.outcome is GateOutcome.REGRESSION
    assert _checks(d) == {GateMetric.MEAN: (GateOutcome.REGRESSION, GateReason.GREW),
                          GateMetric.P95: (GateOutcome.REGRESSION, GateReason.GREW)}
    mean = d.checks[0]
    assert mean.change_pct == pytest.approx(mean_pct) and mean.lo_pct < mean_pct < mean.hi_pct and mean.p < 1e-6
    assert mean.threshold_pct == 5 and mean.alpha == 0.05
    # The median alone (the old gate) passes it: below the threshold.
    assert _checks(c.judge(5, gate_on=["median"])) == {GateMetric.MEDIAN: (GateOutcome.PASS,
                                                                           GateReason.BELOW_THRESHOLD)}
    code, _, err = run_cli(["compare", *quota, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
    assert code == 1
    line, = err.strip().splitlines()
    assert line.startswith("perfdiff: gate regression (--fail-on 5%, α 0.05): mean cycle ")
    assert "Welch's t test p <0.001" in line and "P95 cycle" in line and "95 % CIs of the P95 apart" in line
    md = (tmp_path / "r.md").read_text()
    assert "**CI gate: regression** (--fail-on 5%, α 0.05):" in md
    assert md.index("**Verdict:**") < md.index("**CI gate") < md.index("## 1.")


def test_a_ten_percent_faster_pair_passes(faster, tmp_path, capsys) -> None:
    d = perfdiff.compare(*faster).judge(5)
    assert d.outcome is GateOutcome.PASS and d.passes
    assert {c.reason for c in d.checks} == {GateReason.BELOW_THRESHOLD}
    assert all(-13 < c.change_pct < -7 for c in d.checks)
    code, _, err = run_cli(["compare", *faster, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
    assert code == 0 and err.startswith("perfdiff: gate pass (")
    # Swapped, the same pair is a 11 % slower one: a regression at 5 %, not at 20 %.
    code, _, _ = run_cli(["compare", faster[1], faster[0], "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"],
                         capsys)
    assert code == 1
    code, _, err = run_cli(["compare", faster[1], faster[0], "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "20"],
                           capsys)
    assert code == 0 and "grew by less than the threshold" in err


def test_identical_inputs_cannot_be_judged(quota, tmp_path, capsys) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(quota[0], copy)
    code, _, err = run_cli(["compare", quota[0], copy, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"],
                           capsys)
    assert code == 4
    assert err.splitlines()[-1].startswith("perfdiff: gate cannot judge (") and "same bytes" in err
    code, _, err = run_cli(["compare", quota[0], copy, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5",
                            "--allow-inconclusive"], capsys)
    assert code == 0 and "passed on purpose (--allow-inconclusive)" in err
    assert "**CI gate: cannot judge, passed on purpose (--allow-inconclusive)**" in (tmp_path / "r.md").read_text()
    d = perfdiff.compare(quota[0], copy).judge(5)
    assert {c.reason for c in d.checks} == {GateReason.IDENTICAL} and d.outcome is GateOutcome.CANNOT_JUDGE


def test_fixed_windows_cannot_be_judged(quota, tmp_path, capsys) -> None:
    """Windows of wall clock have the window's duration whatever the work did: no cycle time to
    gate on.  A function's time per window still can be."""
    code, _, err = run_cli(["compare", *quota, "--window", "5ms", "-o", tmp_path / "r.md", "--no-plots",
                            "--fail-on", "5"], capsys)
    assert code == 4 and "fixed windows" in err
    d = perfdiff.compare(*quota, window="5ms").judge(5, gate_on=["mean", "function:gemm"])
    assert _checks(d)[GateMetric.MEAN] == (GateOutcome.CANNOT_JUDGE, GateReason.WINDOWS)
    assert _checks(d)[GateMetric.FUNCTION][0] is not GateOutcome.CANNOT_JUDGE


def test_a_one_shot_program_without_cycles_cannot_be_judged(tmp_path, capsys) -> None:
    n, a = one_shot(tmp_path / "n", seed=1), one_shot(tmp_path / "a", seed=2)
    c = perfdiff.compare(n, a)
    d = c.judge(5)
    assert {(ch.outcome, ch.reason) for ch in d.checks} == {(GateOutcome.CANNOT_JUDGE, GateReason.NOT_STATIONARY)}
    code, _, err = run_cli(["compare", n, a, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
    assert code == 4 and "work changes over the run" in err


def test_an_empty_capture_cannot_be_judged(tmp_path) -> None:
    """The abnormal run captured no GPU work: its cycles are shorter, which no gate may read
    as a speed-up."""
    n, a = loop(tmp_path / "n", seed=5), loop(tmp_path / "a", seed=6, gpu=False)
    d = perfdiff.compare(n, a).judge(5)
    assert {(c.outcome, c.reason) for c in d.checks} == {(GateOutcome.CANNOT_JUDGE, GateReason.EMPTY_CAPTURE)}


def test_runs_on_other_hardware_cannot_be_judged(tmp_path) -> None:
    """An H100 run against an MI300X run: not like for like, whatever the numbers say."""
    from vendor_pair import vendor_pair

    d = perfdiff.compare(*vendor_pair(tmp_path)).judge(5, gate_on=["median", "mean", "function:gemm"])
    assert {(c.outcome, c.reason) for c in d.checks} == {(GateOutcome.CANNOT_JUDGE, GateReason.DIFFERENT_HARDWARE)}


def test_too_few_cycles_for_the_p95_interval(tmp_path) -> None:
    """40 steps a run: the mean is judged, the P95's 95 % interval needs 92 cycles a run."""
    n, a = loop(tmp_path / "n", seed=7, n=40), loop(tmp_path / "a", seed=8, n=40, kernel_scale=0.9)
    d = perfdiff.compare(n, a).judge(5)
    assert _checks(d) == {GateMetric.MEAN: (GateOutcome.PASS, GateReason.BELOW_THRESHOLD),
                          GateMetric.P95: (GateOutcome.CANNOT_JUDGE, GateReason.TOO_FEW_CYCLES)}
    assert d.checks[1].needed == 92 and d.outcome is GateOutcome.CANNOT_JUDGE


def test_a_function_gate_judges_each_matching_function(faster) -> None:
    c = perfdiff.compare(faster[1], faster[0])  # the GEMM 11 % slower
    d = c.judge(5, gate_on=["function:gemm", "function:^nothing$"])
    gemm, nothing = d.checks
    assert (gemm.function, gemm.outcome, gemm.reason) == ("gemm_kernel", GateOutcome.REGRESSION, GateReason.GREW)
    assert gemm.p <= 0.05 and 8 < gemm.change_pct < 14 and gemm.lo_pct > 0
    assert (nothing.outcome, nothing.reason) == (GateOutcome.CANNOT_JUDGE, GateReason.NO_FUNCTION)
    assert d.outcome is GateOutcome.REGRESSION  # a regression outranks a gate that cannot judge


def test_the_json_carries_the_decision(quota, tmp_path, capsys) -> None:
    js = tmp_path / "r.json"
    code, _, _ = run_cli(["compare", *quota, "-o", tmp_path / "r.md", "--no-plots", "--json", js, "--fail-on", "5"],
                         capsys)
    gate = json.loads(js.read_text())["gate"]
    assert code == 1 and gate["threshold_pct"] == 5 and not gate["allow_inconclusive"]
    assert [(c["metric"], c["outcome"], c["reason"], c["test"]) for c in gate["checks"]] == [
        ("mean", "regression", "grew", "welch"), ("p95", "regression", "grew", "quantile-ci")]
    again = perfdiff.read_comparison(js)
    assert again.gate is not None and again.gate.outcome is GateOutcome.REGRESSION
    assert "**CI gate: regression**" in again.to_markdown()


# --- JUnit XML -----------------------------------------------------------------------------

# The element and attribute set CI tools read (Jenkins' junit-10.xsd, which GitHub's and
# GitLab's test reports accept too): element -> (required attributes, optional attributes).
JUNIT = {
    "testsuites": (set(), {"name", "time", "tests", "failures", "errors"}),
    "testsuite": ({"name", "tests", "failures", "errors"},
                  {"group", "time", "skipped", "timestamp", "hostname", "id", "package", "file", "log", "url"}),
    "testcase": ({"name"}, {"time", "classname", "group"}),
    "failure": (set(), {"type", "message"}),
    "error": (set(), {"type", "message"}),
    "skipped": (set(), {"type", "message"}),
    "system-out": (set(), set()),
    "system-err": (set(), set()),
}
CHILDREN = {"testsuites": {"testsuite"}, "testsuite": {"testsuite", "properties", "testcase", "system-out",
                                                        "system-err"},
            "testcase": {"skipped", "error", "failure", "system-out", "system-err"}}


def check_junit(data: bytes) -> ET.Element:
    """`data` parses and uses only the documented elements and attributes, with every
    required attribute; counts are integers that add up."""
    root = ET.fromstring(data)
    assert root.tag == "testsuites"
    for el in root.iter():
        required, optional = JUNIT[el.tag]
        assert required <= set(el.attrib) <= required | optional, (el.tag, el.attrib)
        for child in el:
            assert child.tag in CHILDREN.get(el.tag, set()), (el.tag, child.tag)
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped", "0")) == sum(c.find("skipped") is not None for c in cases)
    return root


def validate_xsd(path: Path) -> None:
    """Validate against tests/data/junit-ci.xsd (the element and attribute set of JUNIT, as
    an XML Schema) with xmlschema, the test extra."""
    import xmlschema

    xmlschema.XMLSchema(HERE / "data" / "junit-ci.xsd").validate(str(path))


def test_junit_one_case_per_gate_validates(quota, tmp_path, capsys) -> None:
    xml = tmp_path / "gate.xml"
    code, _, _ = run_cli(["compare", *quota, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5",
                          "--gate-on", "mean", "--gate-on", "median", "--gate-on", "function:nothing_like_it",
                          "--junit", xml], capsys)
    assert code == 1
    root = check_junit(xml.read_bytes())
    validate_xsd(xml)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert list(cases) == ["mean cycle time", "median cycle time", "function:nothing_like_it"]
    fail = cases["mean cycle time"].find("failure")
    assert fail.get("type") == "regression" and fail.get("message").startswith("mean cycle ")
    assert "Verdict" not in fail.text and fail.text.count("\n") >= 1  # the check, then the verdict's lines
    assert cases["median cycle time"].find("failure") is None
    assert cases["function:nothing_like_it"].find("failure").get("type") == "cannot-judge"
    # Allowed, a gate that cannot judge is skipped, not failed.
    code, _, _ = run_cli(["compare", quota[0], quota[0], "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5",
                          "--allow-inconclusive", "--junit", xml], capsys)
    assert code == 0
    root = check_junit(xml.read_bytes())
    validate_xsd(xml)
    assert [c.find("skipped").get("type") for c in root.iter("testcase")] == ["cannot-judge"] * 2


def test_the_schema_refuses_what_ci_tools_do_not_read(tmp_path) -> None:
    """The schema is no rubber stamp: a test case without a name, or an element CI tools do
    not know, fails it."""
    import xmlschema

    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite name="x" tests="1" failures="0" errors="0"><testcase/></testsuite>'
                   '</testsuites>')
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        validate_xsd(bad)
    bad.write_text('<testsuites><testsuite name="x" tests="1" failures="0" errors="0"><testcase name="a">'
                   '<verdict/></testcase></testsuite></testsuites>')
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        validate_xsd(bad)


# --- The job summary, the options ----------------------------------------------------------


def test_the_first_screen_is_appended_to_the_job_summary(quota, tmp_path, capsys, monkeypatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    for _ in range(2):
        code, _, _ = run_cli(["compare", *quota, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
        assert code == 1
    text = summary.read_text()
    assert text.startswith("before\n# Cross Performance Comparison")
    assert text.count("**CI gate: regression**") == 2 and text.count("## 1. High-Level Performance Summary") == 2
    assert "## 2." not in text
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    run_cli(["compare", *quota, "-o", tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
    assert summary.read_text() == text


@pytest.mark.parametrize("args, needle", [
    (["--gate-on", "mean"], "--gate-on belongs to the gate: give --fail-on PCT too"),
    (["--junit", "x.xml"], "--junit belongs to the gate"),
    (["--allow-inconclusive"], "--allow-inconclusive belongs to the gate"),
    (["--fail-on", "5", "--gate-on", "p99"], "--gate-on: expected median, mean, p95 or function:REGEX, not 'p99'"),
    (["--fail-on", "5", "--gate-on", "function:("], "--gate-on: not a regular expression"),
    (["--fail-on", "5", "--gate-on", "function:"], "--gate-on: function: needs a regular expression"),
])
def test_gate_options_are_checked_before_any_input_is_read(args, needle, capsys) -> None:
    code, _, err = run_cli(["compare", "no-such-n", "no-such-a", *args], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.real
def test_a_real_one_shot_program_in_fixed_windows_cannot_be_judged(real: Path, tmp_path, capsys) -> None:
    """The issue's case: two nsys exports of Rodinia's Gaussian elimination compared in fixed
    100 ms windows passed `--fail-on 5`; the gate cannot judge them."""
    d = real / "kmcho2019/Rodinia_3.1_Gaussian"
    code, _, err = run_cli(["compare", d / "report3.sqlite", d / "report2.sqlite", "--window", "100ms", "-o",
                            tmp_path / "r.md", "--no-plots", "--fail-on", "5"], capsys)
    assert code == 4 and "fixed windows" in err


# --- The rules against simulations where the truth is known --------------------------------


def _gate_rate(shift: float, threshold: float, metric: GateMetric, sims: int = 200, n: int = 120) -> float:
    """The share of `sims` simulated pairs (lognormal cycles, σ 0.1; the abnormal run's
    × (1 + shift)) that `metric`'s gate calls a regression at `threshold` %."""
    from perfdiff.analyze.gate import cycle_stats_of, judge_cycles

    rng = np.random.default_rng(42)
    hits = 0
    for _ in range(sims):
        x = rng.lognormal(np.log(1_000.0), 0.1, n)
        y = rng.lognormal(np.log(1_000.0 * (1 + shift)), 0.1, n)
        hits += judge_cycles(cycle_stats_of(x, y, 0.0), metric, threshold, 0.05).outcome is GateOutcome.REGRESSION
    return hits / sims


@pytest.mark.parametrize("metric, caught", [(GateMetric.MEDIAN, 0.10), (GateMetric.MEAN, 0.10),
                                            (GateMetric.P95, 0.25)])
def test_null_pairs_stay_quiet_and_a_clear_regression_is_caught(metric: GateMetric, caught: float) -> None:
    """Null pairs: even at a threshold of 0 % a gate calls at most about α/2 of them a
    regression (one side of a two-sided test; the P95's disjoint CIs far fewer).  A run
    slower by `caught` is caught at 5 % nearly always (the P95's disjoint CIs are a
    conservative test: it needs a larger change); a 3 % slower one rarely, the estimate
    crossing the threshold by chance (docs/STATISTICS.md, "The CI gate")."""
    assert _gate_rate(0.0, 0.0, metric) <= 0.05
    assert _gate_rate(caught, 5.0, metric) >= 0.9
    assert _gate_rate(0.03, 5.0, metric) <= 0.2


def test_the_ci_docs_workflow_parses_and_its_command_is_accepted() -> None:
    """docs/CI.md's GitHub Actions workflow is YAML, uploads the report and its pictures, and
    its perfdiff command line is one the parser takes, with the gate and its JUnit file."""
    import re
    import shlex

    import yaml

    from perfdiff.cli import build_parser

    text = (HERE.parent / "docs" / "CI.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    steps = yaml.safe_load(block)["jobs"]["perfdiff"]["steps"]
    run = next(s["run"] for s in steps if "perfdiff compare" in s.get("run", ""))
    line = next(ln for ln in run.replace("\\\n", " ").splitlines() if ln.strip().startswith("perfdiff compare"))
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.fail_on == 5 and args.junit and args.json and args.output
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")
                  and "report.md" in s["with"]["path"])
    assert "report.*.png" in upload["with"]["path"] and upload["if"] == "always()"


def test_the_report_with_a_gate_keeps_its_first_screen(quota, tmp_path, capsys) -> None:
    from test_first_screen import check_first_screen

    c = perfdiff.compare(*quota)
    c.judge(5, gate_on=["mean", "p95", "median", "function:."])
    check_first_screen(c.to_markdown())


def test_every_gate_code_has_words() -> None:
    from perfdiff.analyze.gate_records import CANNOT_JUDGE_REASONS, GateTest
    from perfdiff.render import wording

    assert set(wording.GATE_REASON_WORDS) == set(GateReason)
    assert set(wording.GATE_OUTCOME_WORDS) == set(GateOutcome)
    assert set(wording.GATE_METRIC_WORDS) == set(GateMetric)
    assert set(wording.GATE_TEST_WORDS) == set(GateTest)
    assert set(CANNOT_JUDGE_REASONS) == set(GateReason) - {GateReason.GREW, GateReason.BELOW_THRESHOLD,
                                                           GateReason.NOT_SIGNIFICANT}
