"""Rows in any order: from Nsight Systems 2025.6 on an export's rows are not guaranteed to be
in time order.  Every real nsys export in ../shared/data/real, with every table's rows shuffled
(tests/nsys_shuffle.py), gives the report its rows in their own order give, byte for byte
(Markdown and JSON; the JSON's manifests' `created_ns`, the time of the import, aside)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL
from nsys_shuffle import shuffle_export

from perfdiff.api import compare
from perfdiff.importers.nsys.db import time_order

EXPORTS = sorted(REAL.rglob("*.sqlite"))
RODINIA = REAL / "kmcho2019" / "Rodinia_3.1_Gaussian"


def _report(folder: Path) -> tuple[str, str]:
    """The comparison of folder/normal.sqlite with folder/abnormal.sqlite, named relatively
    (the report quotes the paths): (Markdown, JSON without the imports' times)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        comp = compare("normal.sqlite", "abnormal.sqlite", force=True)
        doc = comp.to_json()
    finally:
        os.chdir(here)
    for m in doc.get("manifests", []):
        m.pop("created_ns", None)
    return comp.to_markdown(), json.dumps(doc, indent=1, allow_nan=False)


def _both(tmp: Path, normal: Path, abnormal: Path) -> None:
    """The pair as exported (the abnormal side's rows rewritten in their own order, so that
    one export compared with itself is two files) and the pair with every table shuffled
    (another seed on each side): the same report."""
    (tmp / "ordered").mkdir()
    (tmp / "shuffled").mkdir()
    shutil.copyfile(normal, tmp / "ordered" / "normal.sqlite")
    shuffle_export(abnormal, tmp / "ordered" / "abnormal.sqlite", None)
    shuffle_export(normal, tmp / "shuffled" / "normal.sqlite", 1)
    shuffle_export(abnormal, tmp / "shuffled" / "abnormal.sqlite", 2)
    md_o, js_o = _report(tmp / "ordered")
    md_s, js_s = _report(tmp / "shuffled")
    assert md_s == md_o
    assert js_s == js_o


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: str(p.relative_to(REAL)))
def test_shuffled_rows_give_the_same_report(tmp_path: Path, export: Path) -> None:
    _both(tmp_path, export, export)


def test_shuffled_real_pair_gives_the_same_report(tmp_path: Path) -> None:
    _both(tmp_path, RODINIA / "report3.sqlite", RODINIA / "report2.sqlite")


def test_every_real_export_is_covered(real: Path) -> None:
    assert len(EXPORTS) >= 4  # Fuser, CloverLeaf, Rodinia ×2


def test_time_order_breaks_ties_by_every_column() -> None:
    """Rows that tie on start are ordered by end, then the columns in the order given; rows
    whose starts rise strictly are left as they are (the same arrays)."""
    cols = {"start": np.array([5, 1, 5, 5, 3]), "end": np.array([9, 2, 7, 9, 4]),
            "deviceId": np.array([1, 0, 0, 0, 0])}
    got = time_order(cols, ["start", "end", "deviceId"])
    assert got["start"].tolist() == [1, 3, 5, 5, 5]
    assert got["end"].tolist() == [2, 4, 7, 9, 9]
    assert got["deviceId"].tolist() == [0, 0, 0, 0, 1]
    rising = {"start": np.array([1, 2, 3]), "end": np.array([3, 2, 1])}
    assert time_order(rising, ["start", "end"]) is rising


def test_shuffled_job_export_gives_the_same_ranks_report(tmp_path: Path) -> None:
    """One export holding a job's two ranks (tests/nsys_job.py), every table shuffled: the
    same ranks, cycles, stragglers and report (the phases' wall times aside)."""
    import dataclasses

    from nsys_job import write_job

    from perfdiff.ranks import compare_ranks
    from perfdiff.render.ranks import rank_json, rank_markdown

    reports = []
    for name, seeds in (("ordered", None), ("shuffled", (5, 6))):
        (tmp_path / name).mkdir()
        for side, attention, seed in (("normal", 1_600_000, 1), ("abnormal", 1_120_000, 2)):
            path = tmp_path / name / f"{side}.sqlite"
            write_job(path, (1_000_000, attention), seed=seed)
            if seeds is not None:
                shuffle_export(path, path.with_suffix(".tmp"), seeds[seed - 1])
                path.with_suffix(".tmp").replace(path)
        here = os.getcwd()
        os.chdir(tmp_path / name)
        try:
            res = dataclasses.replace(compare_ranks("normal.sqlite", "abnormal.sqlite", workers=1, processes=False),
                                      phases=())
        finally:
            os.chdir(here)
        reports.append((rank_markdown(res, ("normal.sqlite", "abnormal.sqlite"), None, None),
                        json.dumps(rank_json(res), indent=1, allow_nan=False)))
    assert reports[1] == reports[0]
