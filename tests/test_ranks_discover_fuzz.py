"""Finding and pairing the ranks of directories whose members are damaged in any way a header,
a name or a manifest can be (perfdiff.ranks.discover): the answer is a list of ranks, each
number once and the world within bounds, or one InputError; never another exception, and
never a world too large to list."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from perfdiff.errors import InputError
from perfdiff.ranks.discover import MAX_RANK, pair_ranks, rank_inputs, world_size

# What a header or a manifest may hold where a rank or a world size belongs.
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
                    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(0, 3),
                                                                             max_size=1))
_INFO = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"rank": _VALUES, "world_size": _VALUES}))
_NAMES = st.one_of(st.integers(0, 9).map(lambda i: f"rank-{i}"), st.integers(0, 10**25).map(lambda i: f"rank_{i}"),
                   st.text("abc", min_size=1, max_size=3), st.integers(0, 9).map(lambda i: f"report.{i}"))


@st.composite
def _member(draw) -> tuple[str, str, object]:
    """(kind, name, content): a Kineto trace with a header, a bundle with a manifest, a damaged
    file of a trace's name."""
    kind = draw(st.sampled_from(["kineto", "bundle", "garbage"]))
    name = draw(_NAMES)
    if kind == "kineto":
        info = draw(_INFO)
        head = {} if info is None else {"distributedInfo": info}
        return kind, name + ".json", json.dumps({**head, "traceEvents": []})
    if kind == "bundle":
        target = draw(st.one_of(_VALUES, st.fixed_dictionaries({}, optional={"distributed": st.one_of(_VALUES, _INFO)})))
        text = draw(st.one_of(st.just("{bad"), st.just(json.dumps({"format_version": 1, "target": target})),
                              st.just(json.dumps([1, 2])), st.just(json.dumps({"format_version": 9}))))
        return kind, name, text
    return kind, name + draw(st.sampled_from([".json", ".sqlite", ".json.gz"])), draw(st.binary(max_size=20))


def _write(folder: Path, members: list[tuple[str, str, object]]) -> None:
    folder.mkdir()
    for kind, name, content in members:
        path = folder / name
        if path.exists():
            continue
        if kind == "bundle":
            path.mkdir()
            (path / "manifest.json").write_text(str(content))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(str(content))


@settings(max_examples=150, deadline=None)
@given(normal=st.lists(_member(), min_size=0, max_size=4), abnormal=st.lists(_member(), min_size=2, max_size=4),
       spec=st.sampled_from([None, "all", "0-1", "0:1,1:0", "2"]))
def test_damaged_rank_directories_give_ranks_or_one_input_error(normal, abnormal, spec) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="perfdiff-ranks-fuzz-"))
    try:
        _write(tmp / "n", normal)
        _write(tmp / "a", abnormal)
        try:
            ins_n, ins_a = rank_inputs(tmp / "n"), rank_inputs(tmp / "a")
            for ins in (ins_n, ins_a):
                assert len({r.rank for r in ins}) == len(ins) and 1 <= world_size(ins) <= max(MAX_RANK, len(ins))
            pairs, _ = pair_ranks(ins_n, ins_a, spec, ("n", "a"))
            assert pairs and len({p.rank for p in pairs}) == len(pairs)
        except InputError as exc:
            assert "\n" not in str(exc)
    finally:
        shutil.rmtree(tmp)
