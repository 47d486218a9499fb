"""`perfdiff bench` end to end: the shipped sample as printed, the outputs (Markdown that fits a
screen, CSV, versioned JSON), user errors as one line with exit 2, the --fail-on gate."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from golden import check_golden
from test_bench_read import SAMPLE

from perfdiff.benchtable import JSON_FORMAT, read_bench_json
from perfdiff.errors import InputError

SAMPLE_ARG = "../shared/reference/kernel-bench-table.txt"  # as a user in the repository would type it


@pytest.fixture
def in_repo(monkeypatch):
    if not SAMPLE.is_file():
        pytest.skip(f"sample absent: {SAMPLE}")
    monkeypatch.chdir(ROOT)


def test_the_sample_report(in_repo, capsys, tmp_path) -> None:
    code, out, err = run_cli(["bench", SAMPLE_ARG, "--by", "backend", "--csv", tmp_path / "r.csv",
                              "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert out.startswith("# Benchmark comparison: latency (lower is better)")
    assert max(len(line) for line in out.splitlines()) <= 200
    assert "## stage decode · b\\_dtype uint4b" in out
    # the story: at decode with batch 16, uint4b bitblas 86.59 ms vs mutis 13.23 ms
    line = next(ln for ln in out.splitlines() if ln.startswith("| google/gemma-2-9b | 16 | 35.05 | 86.59 | 13.23"))
    assert "×0.153" in line and line.endswith("| mutis |")
    assert "| mutis / bitblas | all | 24 | ×0.533 |" in out
    assert "every configuration with model Qwen/Qwen2.5-Coder-32B-Instruct, meta-llama/Meta-Llama-3-70B-Instruct" \
        in " ".join(out.split())
    rows = pd.read_csv(tmp_path / "r.csv")
    assert len(rows) == 24 * 3 and {"reference", "candidate", "ratio", "p_value", "test", "outcome"} <= set(rows.columns)
    doc = read_bench_json((tmp_path / "r.json").read_text())
    assert doc["format"] == JSON_FORMAT and doc["baseline"] == "torch-f16" and len(doc["rows"]) == 72
    overall = [s for s in doc["summaries"] if not s["grouping"]]
    assert [round(s["geomean"], 3) for s in overall] == [0.985, 0.575, 0.533]


def test_the_sample_report_matches_its_golden(in_repo, capsys) -> None:
    code, out, err = run_cli(["bench", SAMPLE_ARG, "--by", "backend"], capsys)
    assert code == 0, err
    check_golden(ROOT / "tests" / "golden" / "bench" / "kernel-bench-table.md", out)


def _many(tmp_path, names: list[str]) -> str:
    rng = np.random.default_rng(8)
    df = pd.DataFrame([{"impl": v, "stage": s, "model": f"some/model-name-{m}", "ms": rng.uniform(1, 2000)}
                       for v in names for s in ("decode", "prefill") for m in range(3)])
    df.to_csv(tmp_path / "t.csv", index=False)
    return tmp_path / "t.csv"


def test_many_variants_still_fit_200_characters(capsys, tmp_path) -> None:
    variants = [f"{i}-implementation-with-a-long-name" for i in range(9)]
    code, out, err = run_cli(["bench", _many(tmp_path, variants), "--by", "impl"], capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 200
    decode = out.split("## stage decode")[1].split("## ")[0]
    assert decode.count("| model |") >= 2  # cut into several tables, each with the key column
    assert "| 8-implementation … -name |" in decode


def test_variants_alike_when_shortened_are_numbered(capsys, tmp_path) -> None:
    # shortened, the names would all read "implementation-n … -name": v1 … v9, named in the header
    variants = [f"implementation-number-{i}-with-a-long-name" for i in range(9)]
    code, out, err = run_cli(["bench", _many(tmp_path, variants), "--by", "impl"], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert all(f"v{i + 1} = **{v}**" in flat for i, v in enumerate(variants))
    assert "| v2 / v1 |" in out and "| v9 |" in out


def test_an_unknown_json_version_is_refused() -> None:
    with pytest.raises(InputError, match="format_version"):
        read_bench_json(json.dumps({"format": JSON_FORMAT, "format_version": 99}))


def test_names_are_escaped(capsys, tmp_path) -> None:
    df = pd.DataFrame({"kernel": ["a|b<script>", "a|b<script>", "c_d", "c_d"], "impl": ["old", "new*"] * 2,
                       "ms": [1.5, 1.2, 2.5, 2.6]})
    df.to_csv(tmp_path / "t.csv", index=False)
    code, out, err = run_cli(["bench", tmp_path / "t.csv", "--by", "impl"], capsys)
    assert code == 0, err
    assert "a\\|b&lt;script&gt;" in out and "<script>" not in out and "new\\*" in out


def _pair(tmp_path, factor: float) -> list:
    rng = np.random.default_rng(7)
    before = pd.DataFrame({"op": [f"op{i}" for i in range(12)], "bs": [1, 8] * 6, "us": rng.uniform(5, 50, 12)})
    before.to_csv(tmp_path / "before.csv", index=False)
    before.assign(us=before["us"] * factor).to_csv(tmp_path / "after.csv", index=False)
    return [tmp_path / "before.csv", tmp_path / "after.csv"]


def test_fail_on_trips_on_a_regression(capsys, tmp_path) -> None:
    code, _, err = run_cli(["bench", *_pair(tmp_path, 1.15), "--fail-on", "10", "-o", tmp_path / "r.md"], capsys)
    assert code == 1 and "15.0% worse than before.csv" in err
    code, _, err = run_cli(["bench", *_pair(tmp_path, 1.05), "--fail-on", "10", "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    assert (tmp_path / "r.md").read_text().startswith("# Benchmark comparison: us")


def test_two_tables_of_one_name_are_named_by_their_paths(capsys, tmp_path) -> None:
    a, b = _pair(tmp_path, 1.15)
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    a.rename(tmp_path / "old" / "results.csv")
    b.rename(tmp_path / "new" / "results.csv")
    code, out, err = run_cli(["bench", tmp_path / "old" / "results.csv", tmp_path / "new" / "results.csv",
                              "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["variants"] == [str(tmp_path / "old" / "results.csv"), str(tmp_path / "new" / "results.csv")]


@pytest.mark.parametrize("table,args,match", [
    ("k,impl\na,x\nb,y\n", ["--by", "impl"], "no numeric column"),
    ("impl,ms\nx,1.5\ny,2.5\n", ["--by", "impl"], "no key column"),
    ("k,impl,ms\na,x,1.5\na,y,\n", ["--by", "impl"], "has no ms value"),
    ("k,impl,ms\na,x,1.5\na,y,2.5\n", ["--by", "backend"], "unknown --by"),
    ("k,impl,ms\na,x,1.5\na,y,2.5\n", ["--by", "impl", "--metric", "latency"], "unknown --metric"),
    ("k,impl,ms\na,x,1.5\na,y,2.5\n", ["--by", "impl", "--baseline", "z"], "no row has impl 'z'"),
    ("k,impl,ms\na,x,1.5\na,y,2.5\n", ["--by", "impl", "--fail-on", "-3"], "percentage of at least 0, not -3"),
    ("k,impl,ms\na,x,1.5\na,y,2.5\n", ["--by", "impl", "--fail-on", "nan"], "percentage of at least 0, not nan"),
    (None, ["--by", "impl"], "no such file"),
    ("/", ["--by", "impl"], "is a folder, expected a table"),
])
def test_user_errors_are_one_line_and_exit_2(capsys, tmp_path, table, args, match) -> None:
    path = tmp_path / "t.csv"
    if table == "/":
        path.mkdir()
    elif table is not None:
        path.write_text(table)
    code, out, err = run_cli(["bench", path, *args], capsys)
    assert code == 2 and match in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_input_is_never_overwritten(capsys, tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("k,impl,ms\na,x,1.5\na,y,2.5\n")
    code, _, err = run_cli(["bench", path, "--by", "impl", "--csv", path], capsys)
    assert code == 2 and "overwrite" in err and path.read_text().startswith("k,impl,ms")


def test_a_group_of_two_shows_no_interval_and_a_group_of_three_does(tmp_path, capsys) -> None:
    """A t interval on two log ratios (1 degree of freedom) spans ×1e-5 – ×1e5 for ratios a
    factor 10 apart: a group of two prints "—" and null with its reason; a group of three
    (MIN_CI_CONFIGS), an interval around its geometric mean."""
    rows = []
    for stage, ratios in (("pair", (0.1, 1.0)), ("three", (0.8, 0.9, 1.0))):
        for i, r in enumerate(ratios):
            rows += [{"impl": "a", "stage": stage, "bs": i, "ms": 100.0},
                     {"impl": "b", "stage": stage, "bs": i, "ms": 100.0 * r}]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    code, out, err = run_cli(["bench", tmp_path / "t.csv", "--by", "impl", "--group", "stage", "--metric", "ms",
                              "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    pair = next(ln for ln in out.splitlines() if "| stage pair |" in ln)
    three = next(ln for ln in out.splitlines() if "| stage three |" in ln)
    assert pair.split("|")[5].strip() == "—" and "e-0" not in pair and "e+0" not in pair
    assert "×0.316 |" in pair  # the geometric mean stays
    assert " – " in three.split("|")[5]
    assert "— : no CI for a group of fewer than 3 configurations" in " ".join(out.split())
    doc = read_bench_json((tmp_path / "r.json").read_text())
    by_stage = {s["group"].get("stage"): s for s in doc["summaries"] if s["grouping"] == ["stage"]}
    assert by_stage["pair"]["ci_low"] is None and by_stage["pair"]["ci_high"] is None
    assert by_stage["pair"]["ci_reason"] == "2 configurations; an interval needs 3"
    assert 0.6 < by_stage["three"]["ci_low"] < 0.896 < by_stage["three"]["ci_high"] < 1.25
    assert by_stage["three"]["ci_reason"] == ""
