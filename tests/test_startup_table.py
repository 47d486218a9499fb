"""`perfdiff startup`, the table: Markdown escaping and number formats, column names, and
groups of runs with their statistics."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from startup_helpers import lines

from perfdiff.errors import InputError
from perfdiff.startup import build_startup_table, column_names, parse_startup_log, render_markdown
from perfdiff.startup.render import format_seconds
from perfdiff.render.text import fmt_p, md_escape


# ---------------------------------------------------------------------------------------------
# Rendering


def test_markdown_escapes_pipes_and_backticks_in_file_names():
    c = parse_startup_log("INFO 05-01 10:00:00 [x.py:1] Loading weights took 1.00 seconds\n",
                          "a|b`c*_d_", "a|b`c*_d_.log")
    md = render_markdown(build_startup_table([c]))
    header = md.splitlines()[2]
    assert header == r"| phase | a\|b\`c\*\_d\_ |"
    assert len(re.findall(r"(?<!\\)\|", header)) == 3  # only the table's own pipes
    assert md_escape("x\ny") == "x y" and md_escape("<b>&") == "&lt;b&gt;&amp;"


def test_markdown_escapes_html_and_markup_in_log_derived_names():
    name = "run<b>&#1~[x]\n"
    c = parse_startup_log("INFO 05-01 10:00:00 [x.py:1] Loading weights took 1.00 seconds\n",
                          name, name + ".log")
    md = render_markdown(build_startup_table([c]))
    cell = r"run&lt;b&gt;&amp;\#1\~\[x\] "
    assert md.splitlines()[2] == f"| phase | {cell} |"
    assert f"- **{cell.strip()}** ({cell}.log): vLLM" in md
    assert "<b>" not in md and "\n.log" not in md


def test_number_and_p_formats():
    assert format_seconds(-0.001, 2) == "0.00" and format_seconds(math.nan, 2) == "--"
    assert format_seconds(389.427126, 2) == "389.43" and format_seconds(37.0, 0) == "37"
    assert fmt_p(0.0004) == "<0.001" and fmt_p(0.02857) == "0.029"
    assert fmt_p(math.nan) == "n/a" and fmt_p(np.float64(0.5)) == "0.500"  # the U-test's type


def test_column_names_are_stems_made_unique_by_their_folders(tmp_path):
    a, b = tmp_path / "cfgA" / "server.log", tmp_path / "cfgB" / "server.log"
    assert column_names([a, b]) == ["cfgA/server", "cfgB/server"]
    assert column_names([tmp_path / "x.log", tmp_path / "y.txt"]) == ["x", "y"]
    assert column_names(["r.log", "r.log"])[1].endswith("r (2)")


# ---------------------------------------------------------------------------------------------
# Groups and the U-test


def _run(name: str, lw: float, ready: bool = True) -> object:
    text = lines(f"INFO 05-01 10:00:00 [default_loader.py:1] Loading weights took {lw:.2f} seconds",
                 "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup "
                 "model) took 20.00 seconds" if ready else "INFO 05-01 10:00:30 [x.py:1] hello")
    return parse_startup_log(text, name, name + ".log")


def test_groups_mean_sd_and_two_group_test():
    cols = [_run(f"bs{g}_run{i}", lw) for g, lws in (("8", [4.0, 4.2, 4.4, 4.1]),
                                                     ("16", [5.0, 5.5, 5.2, 5.3]))
            for i, lw in enumerate(lws)] + [_run("bs16_run9", 9.0, ready=False)]
    t = build_startup_table(cols, group_regex=r"bs(\d+)")
    g = t.groups
    assert g.keys == ("8", "16") and g.left_out == ("bs16_run9",)
    cell = g.cells["8"]["load_weights"]
    assert cell.n == 4 and cell.mean_s == pytest.approx(4.175)
    assert cell.sd_s == pytest.approx(np.std([4.0, 4.2, 4.4, 4.1], ddof=1))
    cmp_ = g.comparison["load_weights"]
    assert cmp_.delta_s == pytest.approx(5.25 - 4.175) and cmp_.p == pytest.approx(2 / 70)
    assert g.comparison["init_engine"].p == 1.0
    assert g.comparison["init_engine"].p_note == "all values tied"
    md = render_markdown(t)
    assert "## By configuration" in md and "| load_weights | 4.17 ± 0.17 | 5.25 ± 0.21 |" in md
    assert "| 1.08 | +25.7 % | 0.029 |" in md and "Left out (never ready): bs16\\_run9." in md
    assert "| model_init | -- | -- | -- | -- | -- |" in md  # no runs show it: nothing to test


def test_groups_with_tied_integer_seconds_use_the_exact_tied_distribution():
    # graph_capturing is printed in whole seconds: ties are the rule, not the exception
    def run(name, secs):
        return parse_startup_log(lines(
            f"INFO 05-01 10:00:00 [gpu_model_runner.py:1] Graph capturing finished in {secs} secs",
            "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup model) "
            "took 40.00 seconds"), name, name + ".log")
    cols = [run(f"a{i}", s) for i, s in enumerate((3, 3, 4, 4))] + \
           [run(f"b{i}", s) for i, s in enumerate((5, 5, 6, 6))]
    t = build_startup_table(cols, group_regex=r"^[ab]")
    # only one of the C(8, 4) = 70 assignments of the mid-ranks is as extreme on each side
    assert t.groups.comparison["graph_capturing"].p == pytest.approx(2 / 70)
    assert t.groups.left_out == () and t.groups.cells["a"]["graph_capturing"].mean_s == 3.5


def test_groups_too_small_for_alpha_say_so():
    cols = [_run(f"a_{i}", 4 + i) for i in range(3)] + [_run(f"b_{i}", 9 + i) for i in range(3)]
    g = build_startup_table(cols, group_regex=r"^[ab]").groups
    cmp_ = g.comparison["load_weights"]
    assert math.isnan(cmp_.p) and "cannot reach" in cmp_.p_note and g.runs_needed == 4
    assert "n/a [" in render_markdown(build_startup_table(cols, group_regex=r"^[ab]"))


def test_group_regex_that_misses_a_file_is_an_input_error():
    with pytest.raises(InputError, match="does not match"):
        build_startup_table([_run("a_1", 4), _run("zzz", 5)], group_regex=r"a_")
    with pytest.raises(InputError, match="invalid regular expression"):
        build_startup_table([_run("a_1", 4)], group_regex=r"(")


# ---------------------------------------------------------------------------------------------
