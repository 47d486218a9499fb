"""Names holding text that UTF-8 cannot encode or a report must not show — a lone surrogate
escape (`"\\ud800"`), a control character, a noncharacter — in real traces: each is made valid
text where it is read (U+FFFD), counted in the run's notes, and the comparison ends with exit 0
and a report and JSON that are valid UTF-8."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli

from perfdiff.importers.common import canonical, valid_text
from perfdiff.importers.kineto import import_kineto
from perfdiff.importers.kineto.general import general_events
from perfdiff.importers.kineto.reference import reference_tables as kineto_reference
from perfdiff.importers.kineto.tables import build
from perfdiff.importers.nsys import import_nsys
from perfdiff.importers.nsys.reference import reference_tables as nsys_reference
from perfdiff.model.text import TextRepairs

pytestmark = pytest.mark.real

NW0 = "pytorch/kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RODINIA = "kmcho2019/Rodinia_3.1_Gaussian/report2.sqlite"

# (mutation, JSON escape written at the start of a name, what the note says)
KINDS = [
    ("lone-high-surrogate", "\\ud800", "lone surrogates"),
    ("lone-low-surrogate", "\\udc00", "lone surrogates"),
    ("reversed-pair", "\\udc00\\ud800", "lone surrogates"),
    ("control-char", "\\u001b[31m\\u0001", "control characters"),
    ("noncharacter", "\\ufffe\\ufdd0", "noncharacters"),
]


def _mutated_kineto(real: Path, tmp_path: Path, escape: str) -> Path:
    """A copy of the real trace with `escape` at the start of the names of its first kernel
    and its first CPU op (2021 schema: "Kernel", "Operator")."""
    text = gzip.decompress((real / NW0).read_bytes()).decode("utf-8")
    for cat in ("Kernel", "Operator"):
        obj = text.rfind("{", 0, re.search(f'"cat":\\s*"{cat}"', text).start())
        at = re.compile(r'"name":\s*"').search(text, obj).end()
        text = text[:at] + escape + text[at:]
    out = tmp_path / "mutated.pt.trace.json"
    out.write_text(text, encoding="utf-8")
    return out


def _check_outputs(tmp_path: Path, kind: str, what: str = "names") -> str:
    """The report and JSON are valid UTF-8 holding no surrogate; the report's note, returned."""
    md = (tmp_path / "r.md").read_bytes().decode("utf-8")  # strict: raises on invalid UTF-8
    doc_text = (tmp_path / "r.json").read_bytes().decode("utf-8")
    json.loads(doc_text)
    assert not re.search(r"\\ud[89a-f][0-9a-f]{2}", doc_text, re.I)  # no surrogate escaped into it
    note = re.search(rf"\d+ {what} held invalid text \([^)]*\), replaced by U\+FFFD", md)
    assert note is not None, "the note of the repaired names is not in the report"
    assert kind in note.group(0)
    return note.group(0)


@pytest.mark.parametrize(("mutation", "escape", "kind"), KINDS, ids=[k[0] for k in KINDS])
def test_a_kineto_trace_with_invalid_names_compares(real: Path, tmp_path: Path, capsys, mutation: str, escape: str,
                                                    kind: str) -> None:
    mutated = _mutated_kineto(real, tmp_path, escape)
    code, _, err = run_cli(["compare", real / NW0, mutated, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json"],
                           capsys)
    assert code == 0, err
    assert _check_outputs(tmp_path, kind).startswith("2 names held")  # a kernel and an op


@pytest.mark.parametrize(("mutation", "escape", "kind"), KINDS, ids=[k[0] for k in KINDS])
def test_kineto_readers_agree_on_invalid_names(real: Path, tmp_path: Path, mutation: str, escape: str,
                                               kind: str) -> None:
    """The fast scanner, the general reader and the reference reader give the same names."""
    mutated = _mutated_kineto(real, tmp_path, escape)
    fast = import_kineto(mutated)
    general = build(mutated, general_events(mutated), "full")
    ref = kineto_reference(mutated)
    names = set(fast.activity["function"].astype(str))
    assert sum(n.startswith("\ufffd") for n in names) == 2 and valid_text("".join(names)) == "".join(names)
    for run in (fast, general):
        assert canonical(run.activity[list(ref["activity"].columns)]).equals(canonical(ref["activity"]))
        assert any(n.code == "invalid-text" and kind in n for n in run.notes)


def test_a_surrogate_written_as_bytes_reads_as_json_reads_it(real: Path, tmp_path: Path) -> None:
    """A lone surrogate written raw (its three UTF-8 bytes, as a writer using surrogatepass puts
    it) reads as json.loads reads it: one lone surrogate, one U+FFFD, in every Kineto reader."""
    mutated = _mutated_kineto(real, tmp_path, "@SURROGATE@")
    mutated.write_bytes(mutated.read_bytes().replace(b"@SURROGATE@", "\udc00".encode("utf-8", "surrogatepass")))
    fast = import_kineto(mutated)
    ref = kineto_reference(mutated)
    names = set(fast.activity["function"].astype(str))
    marked = [n for n in names if n.startswith("\ufffd")]
    assert len(marked) == 2 and not any(n.startswith("\ufffd\ufffd") for n in marked)
    for run in (fast, build(mutated, general_events(mutated), "full")):
        assert canonical(run.activity[list(ref["activity"].columns)]).equals(canonical(ref["activity"]))
        assert any(n.code == "invalid-text" and "lone surrogates" in n for n in run.notes)


def test_an_nsys_export_with_invalid_names_compares(real: Path, tmp_path: Path, capsys) -> None:
    """A kernel name as Python writes a lone surrogate into SQLite (surrogatepass: bytes that
    are not UTF-8), with a control character and a noncharacter."""
    mutated = tmp_path / "report2.sqlite"
    shutil.copyfile(real / RODINIA, mutated)
    con = sqlite3.connect(mutated)
    kid = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
    bad = "\ud800".encode("utf-8", "surrogatepass") + b"Fan\x01\xef\xbf\xbe"
    con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (bad, kid))
    con.commit()
    con.close()
    code, _, err = run_cli(["compare", real / RODINIA, mutated, "-o", tmp_path / "r.md", "--json",
                            tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "1 name held invalid text (control characters, noncharacters)" in _check_outputs(tmp_path, "control",
                                                                                              "names?")
    run, ref = import_nsys(mutated), nsys_reference(mutated)
    assert "\ufffd\ufffd\ufffdFan\ufffd\ufffd" in set(run.activity["function"].astype(str))
    assert canonical(run.activity[list(ref["activity"].columns)]).equals(canonical(ref["activity"]))
    # the export's environment blocks hold NULs on purpose: they are not names, and not counted
    assert not any("names held" in n for n in import_nsys(real / RODINIA).notes)


def test_a_bundle_with_invalid_text_loads(real: Path, tmp_path: Path, capsys) -> None:
    """A bundle's manifest and an unsealed JSON journal with lone surrogate escapes: loaded as
    valid text, counted in the notes; a control character in perfdiff's own format loads back
    as it was written."""
    code, _, err = run_cli(["import", real / NW0, "-o", tmp_path / "b"], capsys)
    assert code == 0, err
    from perfdiff.bundle import load_bundle
    from perfdiff.bundle.journal import frame_to_arrow
    manifest = tmp_path / "b" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["run_name"] = "\ud800run"
    manifest.write_text(json.dumps(doc))  # ensure_ascii: written as the escape "\ud800"
    run = load_bundle(tmp_path / "b")
    assert run.manifest["run_name"] == "\ufffdrun"
    assert any(n.startswith("1 manifest field held invalid text (lone surrogates)") for n in run.notes)
    import pyarrow.parquet as pq
    part = sorted((tmp_path / "b" / "markers").glob("part-*.parquet"))[0]
    df = pq.read_table(part).to_pandas()
    df["name"] = df["name"].astype(str) + "\x07"  # perfdiff's own format: kept as written
    pq.write_table(frame_to_arrow("markers", df), part)
    run = load_bundle(tmp_path / "b")
    assert all(n.endswith("\x07") for n in run.markers["name"].astype(str))
    journal = tmp_path / "b" / "markers" / ".part-000009.jsonl"  # an older collector's journal, killed
    journal.write_text(json.dumps({"name": ["\udc00step"], "start_ns": [1], "end_ns": [2], "tid": [1],
                                   "source": ["annotation"]}) + "\n")
    run = load_bundle(tmp_path / "b")
    assert "\ufffdstep" in set(run.markers["name"].astype(str))
    assert any(n.startswith("1 name held invalid text (lone surrogates)") for n in run.notes)
    assert TextRepairs().fix("ok\ttab\nline") == "ok\ttab\nline"  # tab and newline are text
