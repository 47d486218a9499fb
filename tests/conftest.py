"""Shared test helpers: paths to the repository, examples and the real third-party traces."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests in `make test` are seeded: the same examples on every run, so a failure is
# reproducible and CI cannot go red by chance (`make fuzz` is where wide random search runs).
settings.register_profile("perfdiff", derandomize=True, deadline=None, database=None)
settings.load_profile("perfdiff")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
REAL = ROOT.parent / "shared" / "data" / "real"

if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def real() -> Path:
    """The folder of real traces; skips when ../shared/data/real is absent."""
    if not REAL.is_dir():
        pytest.skip(f"real traces not available: {REAL} is absent")
    return REAL


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run perfdiff's main in-process; returns (exit code, stdout, stderr)."""
    from perfdiff.cli import main

    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def activity_kinds(run) -> dict[str, int]:
    """Rows per activity kind."""
    return {str(k): int(v) for k, v in run.activity["kind"].value_counts().items()}


def assert_contract(run) -> None:
    """The tables have exactly the bundle's columns and in-memory dtypes; intervals are sane."""
    import numpy as np
    import pandas as pd

    from perfdiff.bundle import SCHEMAS

    for table in ("activity", "samples", "markers"):
        df = getattr(run, table)
        assert list(df.columns) == list(SCHEMAS[table]), table
        for col, kind in SCHEMAS[table].items():
            if kind == "str":
                assert isinstance(df[col].dtype, pd.CategoricalDtype), (table, col)
            else:
                assert df[col].dtype == (np.float64 if kind == "f8" else np.int64), (table, col)
    a = run.activity
    assert (a["end_ns"] >= a["start_ns"]).all()
    assert (a["busy_ns"] >= 0).all()
    if run.process_groups is not None:  # one row per NCCL kernel of the activity
        from perfdiff.model.schema import COLLECTIVE_KERNEL, PROCESS_GROUP_COLUMNS

        pg = run.process_groups
        assert list(pg.columns) == list(PROCESS_GROUP_COLUMNS) and pg["row"].dtype == np.int64
        assert pg["row"].is_unique and ((pg["row"] >= 0) & (pg["row"] < len(a))).all()
        kernels = a.iloc[pg["row"].to_numpy()]
        assert (kernels["kind"] == "kernel").all() and kernels["function"].astype(str).str.match(COLLECTIVE_KERNEL).all()
