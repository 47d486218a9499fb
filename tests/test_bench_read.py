"""Reading benchmark tables: pandas-printed text (the shipped sample, wrapped frames, index
columns, headers with spaces), CSV, TSV and JSON lines; a round trip of DataFrame.to_string()."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from hypothesis import assume, HealthCheck, given, settings
from hypothesis import strategies as st

from perfdiff.benchtable.aligned import parse_aligned
from perfdiff.benchtable.read import read_table, sniff_format
from perfdiff.errors import InputError

SAMPLE = ROOT.parent / "shared" / "reference" / "kernel-bench-table.txt"

SMALL = pd.DataFrame({
    "stage": ["decode", "decode", "prefill", "prefill"],
    "model": ["google/gemma-2-9b", "Qwen/Qwen2.5-Coder-32B-Instruct", "google/gemma-2-9b", "x"],
    "backend": ["bitblas", "mutis", "bitblas", "mutis"],
    "bs": [1, 16, 1, 16],
    "latency": [13.230752, np.nan, 363.050156, 1093.395935],
})


@pytest.fixture
def sample():
    if not SAMPLE.is_file():
        pytest.skip(f"sample absent: {SAMPLE}")
    return SAMPLE


def test_the_sample_reads_as_printed(sample) -> None:
    df = read_table(sample)
    assert list(df.columns) == ["device", "stage", "mode", "model", "backend", "a_dtype", "b_dtype", "bs",
                                "tokens", "group_size", "latency"]
    assert len(df) == 51
    assert df["bs"].dtype == np.int64 and df["group_size"].dtype == np.int64
    assert df["latency"].dtype == np.float64
    # first, a middle and the last line of the text (the last has no newline)
    assert df.iloc[0].tolist() == ["NVIDIA-L40S", "decode", "cgraph", "google/gemma-2-9b", "torch-f16",
                                   "float16", "float16", 1, 2048, -1, 33.604448]
    assert df.loc[10, "latency"] == 86.588142 and df.loc[10, "backend"] == "bitblas"
    assert df.iloc[-1]["model"] == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert df.iloc[-1]["latency"] == 2291.803955


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False,
                                  check_exact=False, rtol=1e-6)


@pytest.mark.parametrize("how", ["print", "to_string", "no-index", "left-justified"])
def test_printed_frames_read_back(how: str) -> None:
    with pd.option_context("display.width", 60, "display.max_columns", None):
        text = {"print": str(SMALL), "to_string": SMALL.to_string(line_width=50),
                "no-index": SMALL.to_string(index=False),
                "left-justified": SMALL.to_string(index=False, justify="left")}[how]
    if how in ("print", "to_string"):
        assert "\\" in text  # pandas wrapped it into blocks
    _same(parse_aligned(text), SMALL)


def test_index_names_and_sparsified_multiindex_rows_become_columns() -> None:
    text = SMALL.set_index(["stage", "model"]).to_string()
    assert "\nprefill" in text and "\n        " in text  # a sparsified level
    got = parse_aligned(text)
    _same(got, SMALL)


def test_a_wrapped_frame_with_a_named_index() -> None:
    with pd.option_context("display.width", 50, "display.max_columns", None):
        text = str(SMALL.set_index("model"))
    assert text.count("\\") >= 1 and text.count("\nmodel ") >= 2  # each block repeats the index names
    _same(parse_aligned(text), SMALL[["model", "stage", "backend", "bs", "latency"]])


def test_a_pivoted_table_is_melted_back() -> None:
    wide = SMALL.pivot_table(index=["stage", "bs"], columns="backend", values="latency", dropna=False)
    got = parse_aligned(wide.to_string())
    want = wide.reset_index().melt(id_vars=["stage", "bs"], var_name="backend", value_name="value")
    assert list(got.columns) == ["stage", "bs", "backend", "value"]
    _same(got, want)


@pytest.mark.parametrize("index", [True, False])
def test_a_header_over_several_lines_joins_its_levels(index: bool) -> None:
    agg = SMALL.groupby(["stage", "backend"]).agg({"latency": ["median", "min"], "bs": ["max"]})
    text = (agg if index else agg.reset_index()).to_string(index=index)
    got = parse_aligned(text)
    assert list(got.columns) == ["stage", "backend", "latency_median", "latency_min", "bs_max"]
    assert got["latency_min"].tolist() == pytest.approx(agg[("latency", "min")].tolist(), nan_ok=True)


def test_a_header_with_a_space_stays_one_column() -> None:
    df = SMALL.rename(columns={"bs": "batch size"})
    got = parse_aligned(df.to_string())
    assert list(got.columns) == list(df.columns)
    _same(got, df)


def test_a_truncated_frame_is_refused() -> None:
    big = pd.DataFrame({"k": [f"c{i}" for i in range(100)], "v": np.arange(100) + 0.5})
    with pd.option_context("display.max_rows", 10):
        text = str(big)
    with pytest.raises(InputError, match="truncated"):
        parse_aligned(text)


def test_csv_tsv_jsonl_and_sniffing(tmp_path) -> None:
    paths = {"a.csv": SMALL.to_csv(index=False), "a.tsv": SMALL.to_csv(index=False, sep="\t"),
             "a.jsonl": SMALL.to_json(orient="records", lines=True), "a.txt": SMALL.to_string(),
             "b.out": SMALL.to_csv(index=False), "c.out": SMALL.to_csv(index=False, sep="\t"),
             "d.out": SMALL.to_json(orient="records", lines=True), "index.csv": SMALL.to_csv()}
    for name, text in paths.items():
        (tmp_path / name).write_text(text)
        _same(read_table(tmp_path / name), SMALL)
    assert sniff_format(tmp_path / "b.out", paths["b.out"]) == "csv"
    assert sniff_format(tmp_path / "c.out", paths["c.out"]) == "tsv"
    assert sniff_format(tmp_path / "d.out", paths["d.out"]) == "jsonl"
    assert sniff_format(tmp_path / "a.txt", paths["a.txt"]) == "text"


@pytest.mark.parametrize("content,match", [
    (None, "no such file"), ("", "empty"), ("\n\n", "empty"), (b"\xff\xfe\x00", "UTF-8"),
    ("a,b\n1,2\n1,2,3,4\n", "cannot read"),
])
def test_unreadable_tables_are_one_line_errors(tmp_path, content, match) -> None:
    p = tmp_path / "t.csv"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    with pytest.raises(InputError, match=match) as exc:
        read_table(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value)


_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-/.0123456789", min_size=1, max_size=12).filter(
    lambda s: not any(c.isdigit() for c in s[:1]) and s not in ("nan", "inf", "null") and not s.startswith(("-", ".", "+"))
    and not s.startswith("..") and "..." not in s)
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_ ", min_size=1, max_size=10).map(str.strip).filter(
    lambda s: s != "" and "  " not in s)


@st.composite
def frames(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 8))
    names = draw(st.lists(_name, min_size=2, max_size=6, unique=True))
    cols = {}
    for name in names:
        kind = draw(st.sampled_from(["text", "int", "float"]))
        if kind == "text":
            cols[name] = draw(st.lists(_word, min_size=n, max_size=n))
        elif kind == "int":
            cols[name] = draw(st.lists(st.integers(-10**6, 10**6), min_size=n, max_size=n))
        else:
            vals = draw(st.lists(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.just(np.nan)),
                                 min_size=n, max_size=n))
            if all(np.isnan(v) or float(v).is_integer() for v in vals):
                vals[0] = 0.5  # a float column, not integers printed as floats
            cols[name] = vals
    return pd.DataFrame(cols)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(df=frames(), index=st.sampled_from(["range", "none", "named"]), width=st.sampled_from([None, 40]))
def test_to_string_round_trips(df: pd.DataFrame, index: str, width: int | None) -> None:
    first = df.columns[0]
    # pandas prints index names on a line of their own, separated by spaces: an index name with
    # a space in it cannot be told from two names (docs/BENCH_TABLES.md, limits)
    assume(not (index == "named" and " " in first))
    if index == "named" and df[first].dtype.kind not in "if":
        text = df.set_index(first).to_string(line_width=width)
    else:
        text = df.to_string(index=index != "none", line_width=width)
    got = parse_aligned(text)
    assert list(got.columns) == list(df.columns)
    for c in df.columns:
        want = df[c]
        if want.dtype.kind in "if":
            np.testing.assert_allclose(got[c].to_numpy(np.float64), want.to_numpy(np.float64), rtol=1e-5, atol=1e-5)
        else:
            assert got[c].tolist() == want.tolist()
