"""Every inflater perfdiff may pick (ISA-L's, zlib-ng's, zlib) gives the same bytes in the same
blocks, reads concatenated gzip members, and refuses truncated or corrupt data in one line."""
from __future__ import annotations

import gzip
import importlib
from pathlib import Path

import pytest

from perfdiff.errors import InputError
from perfdiff.importers.kineto.blocks import INFLATERS, blocks, inflater

INSTALLED = [name for name, module in INFLATERS if importlib.util.find_spec(module.split(".")[0]) is not None]
HTA = "facebookresearch/HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz"


def test_the_fastest_installed_inflater_is_picked() -> None:
    assert inflater()[0] == INSTALLED[0]
    assert "zlib" in INSTALLED and inflater("zlib")[0] == "zlib"
    # The test extra installs ISA-L's: the fast path is the one the suite reads traces with.
    assert INSTALLED[0] == "isal"


@pytest.mark.parametrize("name", INSTALLED)
def test_a_real_trace_inflates_alike_in_blocks_of_the_size_asked(real: Path, name: str) -> None:
    path = real / HTA
    want = gzip.decompress(path.read_bytes())
    got = [b"".join(pieces) for pieces in blocks(path, 1 << 20, inflater(name)[1])]
    assert b"".join(got) == want
    assert {len(b) for b in got[:-1]} == {1 << 20} and 0 < len(got[-1]) <= 1 << 20


@pytest.mark.parametrize("name", INSTALLED)
def test_concatenated_members_truncated_and_corrupt_data(tmp_path: Path, name: str) -> None:
    z = inflater(name)[1]
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(b'{"traceEvents": [') + gzip.compress(b"]}"))
    assert b"".join(b"".join(p) for p in blocks(two, 4, z)) == b'{"traceEvents": []}'
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b"x" * 100_000)[:-30])
    with pytest.raises(InputError, match="truncated gzip"):
        list(blocks(cut, 1 << 16, z))
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    with pytest.raises(InputError, match="corrupt gzip data"):
        list(blocks(bad, 1 << 16, z))
