"""The import contracts of .importlinter hold, and each one fails when a violation is planted
(in a staged copy: the checkout is never touched)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "tools" / "lint_layers.py"


def lint(*plants: str) -> tuple[int, str]:
    args = [sys.executable, str(SCRIPT)] + [f"--plant={p}" for p in plants]
    proc = subprocess.run(args, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_tree_keeps_every_contract() -> None:
    code, out = lint()
    assert code == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 6


@pytest.mark.parametrize("plant,contract", [
    ("collectors/base.py:import perfdiff.analyze", "Collectors never import analysis"),
    ("analyze/findings.py:from perfdiff.render.text import md_escape", "Rendering is the only place"),
    ("importers/common.py:import perfdiff.collectors.base", "never import the collectors"),
    ("bundle.py:import scipy", "format and the model know no statistics"),
    ("segment/gaps.py:import perfdiff.analyze", "stages import only the stages before them"),
    ("ranks/part.py:import perfdiff.segment", "Only the cycles stage uses the segmentation algorithms"),
    ("render/wording.py:from perfdiff.analyze.findings import select", "only through its result records"),
    ("render/text.py:from perfdiff.analyze.records import Analysis", None),  # allowed: a result record
    ("model/tables.py:import perfdiff.model.durations", None),  # allowed: same layer, no cycle
    ("model/durations.py:import perfdiff.model.tables\nimport perfdiff.model.intervals", None),
    ("model/schema.py:import perfdiff.model.durations", "in a circle"),
], ids=["collector-imports-analysis", "analysis-escapes-markdown", "importer-imports-collector",
        "format-imports-scipy", "stage-imports-later-stage", "segment-outside-cycles", "render-reads-internals",
        "render-reads-a-record", "allowed", "allowed-2", "cycle"])
def test_a_planted_violation_breaks_its_contract(plant: str, contract: str | None) -> None:
    if contract == "in a circle":  # a cycle needs both directions
        plant_back = "model/durations.py:import perfdiff.model.schema"
        code, out = lint(plant, plant_back)
    else:
        code, out = lint(plant)
    if contract is None:
        assert code == 0, out
        return
    assert code != 0, out
    broken = [line for line in out.splitlines() if " BROKEN" in line]  # "BROKEN (1 ignored import)"
    assert len(broken) >= 1 and any(contract in line for line in broken), out


def test_ranks_ask_the_nsys_importer_and_write_no_sql() -> None:
    """perfdiff.ranks reads an nsys export only through perfdiff.importers.nsys.query: no SQL,
    no SQLite connection of its own and no table or column of the export's schema."""
    schema = re.compile(r"\b(SELECT|PRAGMA|sqlite3|sqlite_master|execute)\b|CUPTI_|NVTX_[A-Z]|META_DATA_|StringIds|"
                        r"TARGET_INFO|global(Pid|Tid)|correlationId|deviceId")
    ranks = ROOT / "src" / "perfdiff" / "ranks"
    found = [f"{p.name}:{i}: {line.strip()}" for p in sorted(ranks.glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if schema.search(line)]
    assert found == []
