"""A PyTorch-profiler trace with its events in another order is the same trace: the real HTA
pair, its events shuffled, gives the report its file order gives (which of two identical CPU
ranges is the parent, and the names' numbering, no longer follow the file)."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from conftest import run_cli

from perfdiff.importers.kineto import import_kineto

HTA = "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff"


def _write(doc: dict, path: Path, seed: int | None) -> Path:
    events = list(doc["traceEvents"])
    if seed is not None:
        random.Random(seed).shuffle(events)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**doc, "traceEvents": events}))
    return path


@pytest.mark.real
def test_the_hta_pair_shuffled_gives_the_same_report(real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [json.loads(gzip.decompress((real / HTA / side / f"{side}.json.gz").read_bytes()))
            for side in ("control", "test")]
    reports = []
    for tag, seeds in (("file", (None, None)), ("shuffled", (1, 2))):
        top = tmp_path / tag
        for d, side, s in zip(docs, ("n", "a"), seeds, strict=True):
            _write(d, top / side / "trace.json", s)
        monkeypatch.chdir(top)  # the same paths in both reports
        code, _, err = run_cli(["compare", "n/trace.json", "a/trace.json", "-o", "r.md", "--no-plots"], capsys)
        assert code == 0, err
        reports.append((top / "r.md").read_text())
    assert reports[0] == reports[1]


def test_identical_ranges_nest_alike_in_either_order(tmp_path: Path) -> None:
    """Two identical CPU ranges: the one the file lists first used to be the parent (its self
    time 0); now the same one is, whichever comes first."""
    events = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": 10, "dur": 50} for n in ("b", "a")]
    events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 5,
                   "args": {"device": 0, "stream": 7}})
    tables = []
    for order in (events, events[::-1]):
        path = _write({"traceEvents": order}, tmp_path / f"{len(tables)}.json", None)
        act = import_kineto(path).activity
        cpu = act[act["kind"] == "cpu"]
        tables.append(sorted(zip(cpu["function"].astype(str), cpu["busy_ns"], strict=True)))
    assert tables[0] == tables[1]
