"""User data in names cannot break the Markdown report."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfdiff.bundle import RunData, base_manifest, empty_table, normalize_table, write_bundle
from perfdiff.cli import main
from perfdiff.render.text import fmt_beta, fmt_p, fmt_score, fmt_z, md_escape, shorten

NASTY = [
    "kernel|with|pipes",
    "void k<`tick`>(int) <script>alert(1)</script>",
    "line\nbreak\r\nname",
    "void big<" + ", ".join(f"cutlass::Tile<{i}, {i + 1}, float>" for i in range(60)) + ">(Params)",
    "*bold* _it_ [link](http://x) # not a heading",
]


def _run(path: Path, seed: int, slow: float) -> Path:
    rng = np.random.default_rng(seed)
    K = 40
    t0 = 1_700_000_000_000_000_000
    starts = t0 + np.arange(K, dtype=np.int64) * 10_000_000
    rows = []
    for j, name in enumerate(NASTY):
        d = rng.normal(1_000_000 * (slow if j == 3 else 1.0), 30_000, K).astype(np.int64)
        s = starts + 100_000 + j * 1_500_000
        rows.append(pd.DataFrame({"function": name, "kind": "kernel", "device": "GPU 0", "start_ns": s,
                                  "end_ns": s + d, "busy_ns": d}))
    act = normalize_table("activity", pd.concat(rows, ignore_index=True))
    markers = normalize_table("markers", pd.DataFrame({"name": "step", "start_ns": starts,
                                                       "end_ns": starts + 10_000_000, "source": "perfdiff"}))
    run = RunData(base_manifest(run_name=f"run|{seed}`"), act, empty_table("samples"), markers)
    return write_bundle(path, run)


def test_names_cannot_break_tables(tmp_path: Path) -> None:
    a, b = _run(tmp_path / "a", 1, 1.0), _run(tmp_path / "b", 2, 1.4)
    out = tmp_path / "r.md"
    assert main(["compare", str(a), str(b), "-o", str(out)]) == 0
    md = out.read_text()
    assert "<script>" not in md and "alert(1)</script>" not in md
    section = md.split("### Detailed comparison table")[1]
    table = next(b for b in section.split("\n\n") if b.startswith("| # |"))
    top = next(b for b in md.split("## 1.")[1].split("\n\n") if b.startswith("| # |"))  # the first screen's
    for t in (table, top):
        lines = t.strip().splitlines()
        header_cells = len(re.findall(r"(?<!\\)\|", lines[0]))
        assert len(lines) == 2 + len(NASTY)  # every name stayed on one line
        for line in lines:
            assert len(re.findall(r"(?<!\\)\|", line)) == header_cells, line
    # the long C++ name is shortened in the table and whole (escaped) in the full-names block
    assert "…" in table
    full = md.split("Function names in full")[1].split("</details>")[0]
    assert "cutlass::Tile&lt;59, 60, float&gt;" in full
    assert NASTY[3].count("cutlass::Tile") == full.count("cutlass::Tile")
    # the regressed long-name kernel leads the findings
    assert "big&lt;cutlass::Tile" in md.split("### Key Findings:")[1].split("\n- ")[2]


def test_md_escape_and_numbers() -> None:
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("x`y") == "x\\`y"
    assert md_escape("<b>") == "&lt;b&gt;"
    assert md_escape("a\nb") == "a b"
    assert shorten("x" * 200, 50).count("…") == 1 and len(shorten("x" * 200, 50)) == 50
    assert fmt_p(0.0004) == "<0.001" and fmt_p(0.01234) == "0.012" and fmt_p(float("nan")) == "n/a"
    assert fmt_z(-0.001) == "0.00"  # never -0
    assert fmt_z(float("inf")) == "n/a"
    assert fmt_score(1234.567) == "1,235" and fmt_score(0.012345) == "0.01235"
    assert fmt_beta(0.004567) == "0.0046" and fmt_beta(1.234) == "1.23"


def test_times_read_in_the_unit_their_three_digits_show() -> None:
    """At a unit's edge the rounding decides the unit: 999.5 µs is "1 ms", not "1e+03 µs"."""
    from perfdiff.render.text import fmt_time_us

    cases = [(999.5, "1 ms"), (999.49, "999 µs"), (0.9995, "1 µs"), (999_950.0, "1 s"), (99_950.0, "100 ms"),
             (99_949.0, "99.9 ms"), (-999.5, "-1 ms"), (0.0, "0 µs"), (-0.0, "0 µs"), (0.0005, "0.5 ns"),
             (1234.5, "1.23 ms"), (float("nan"), "n/a")]
    assert [(v, fmt_time_us(v)) for v, _ in cases] == cases


def test_a_difference_of_times_has_one_way_to_read() -> None:
    """Every table and tree writes a signed time alike: a sign on gains and losses, none on
    zero (float residue below 10 ns is zero), and n/a for unknown (once "+n/a")."""
    from perfdiff.render.text import fmt_signed_time

    cases = [(35_100.0, "+35.1 ms"), (-0.04, "-40 ns"), (0.0, "0 µs"), (-0.0, "0 µs"), (4e-4, "0 µs"),
             (-4e-4, "0 µs"), (0.006, "+10 ns"), (float("nan"), "n/a"), (float("-inf"), "n/a"), (None, "n/a")]
    assert [(v, fmt_signed_time(v)) for v, _ in cases] == cases


def test_calls_per_cycle_read_as_counts() -> None:
    """A call spanning many cycles is "<0.1" a cycle, not "0.0" beside its time per call (a
    helper thread's poll on Rodinia's pair); large counts need no decimal."""
    from perfdiff.render.text import fmt_calls

    cases = [(0.0, "0.0"), (0.0004, "<0.1"), (0.06, "0.1"), (2.0, "2.0"), (774.2, "774"), (1478.0, "1,478"),
             (float("nan"), "n/a")]
    assert [(v, fmt_calls(v)) for v, _ in cases] == cases


def test_names_in_full_keep_markdown_out() -> None:
    """Markdown is parsed inside an inline <code> element: the list of names in full read
    "DataLoaderIter.__next__" as "DataLoaderIter.<strong>next</strong>".  Every character
    Markdown reads is a character reference there, and the name comes back whole."""
    import html

    from perfdiff.render.text import html_code

    for name in ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                 "a*em* **b** [l](u) a`b`c x\\y $x^2$ ~s~ <t> a|b &amp; #h", *NASTY]:
        code = html_code(name)
        inner = code[len("<code>"):-len("</code>")]
        bare = re.sub(r"&#?\w+;", "", inner)
        assert not re.search(r"[\\`*\[\]<>|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", bare), inner
        assert html.unescape(inner) == " ".join(name.split())
