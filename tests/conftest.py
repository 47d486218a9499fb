"""Shared test helpers: paths to the repository, examples and the real third-party traces."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
