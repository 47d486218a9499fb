"""`perfdiff startup`, the command: user errors and documented behaviour."""
from __future__ import annotations

import pytest
from startup_helpers import startup_main

from perfdiff.errors import InputError


# ---------------------------------------------------------------------------------------------
# The command: user errors and documented behaviour


def test_missing_file_is_an_input_error_naming_it(tmp_path):
    missing = tmp_path / "nope.log"
    with pytest.raises(InputError, match="nope.log: no such file") as e:
        startup_main(["startup", str(missing)])
    assert e.value.code == 2


def test_empty_file_is_an_input_error(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("\n  \n")
    with pytest.raises(InputError, match="empty.log: empty file"):
        startup_main(["startup", str(empty)])


def test_not_a_server_log_is_one_clear_line(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\nApplication startup complete.\nLoading weights took 3 seconds\n")
    with pytest.raises(InputError) as e:
        startup_main(["startup", str(f)])
    assert str(e.value) == f"{f}: not a vLLM or SGLang server log: no log record header found"
    assert "\n" not in str(e.value) and e.value.code == 2
    with pytest.raises(InputError, match="is a folder, expected a server log file"):
        startup_main(["startup", str(tmp_path)])


def test_server_log_without_startup_phases_gives_an_incomplete_dash_column(tmp_path, capsys):
    f = tmp_path / "quiet.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] nothing to see\n"
                 "INFO 06-02 11:03:12 [x.py:1] still nothing\n")
    assert startup_main(["startup", str(f), "-o", "-"]) == 0
    md = capsys.readouterr().out
    assert "| load_weights | -- |" in md and "| status | incomplete |" in md
    assert "no startup phase found" in md and "never ready (incomplete)" in md


def test_output_never_overwrites_an_input(tmp_path):
    f = tmp_path / "run.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] Loading weights took 1.0 seconds\n")
    with pytest.raises(InputError, match="refusing to overwrite"):
        startup_main(["startup", str(f), "-o", str(f)])
    assert f.read_text().startswith("INFO")


def test_unwritable_output_is_an_input_error(tmp_path):
    f = tmp_path / "run.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] Loading weights took 1.0 seconds\n")
    with pytest.raises(InputError, match="output folder does not exist") as e:
        startup_main(["startup", str(f), "--csv", str(tmp_path / "no" / "such" / "dir.csv")])
    assert e.value.code == 2
    with pytest.raises(InputError, match="cannot write"):
        startup_main(["startup", str(f), "--csv", str(tmp_path)])  # a directory


def test_a_phase_regex_row_is_user_text(tmp_path, capsys):
    """A --phase-regex ROW is escaped like every name ('a|b*c*' once split the row into five
    cells), and a group that captures no number is one line, not Python's float error."""
    f = tmp_path / "run.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] Loading weights took 1.0 seconds\n"
                 "INFO 06-02 11:03:12 [x.py:1] warmup took 2.5 s\n")
    assert startup_main(["startup", str(f), "--phase-regex", r"a|b*c*=warmup took ([\d.]+) s", "-o", "-"]) == 0
    (row,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| a\\|")]
    assert row == r"| a\|b\*c\* | 2.5 |"
    with pytest.raises(InputError, match=r"its group captured 'took', not a number of seconds") as e:
        startup_main(["startup", str(f), "--phase-regex", "x=warmup (took)"])
    assert e.value.code == 2
