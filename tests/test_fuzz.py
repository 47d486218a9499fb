"""Seeded fuzzing in `make test` (docs/TESTING.md): generated Kineto traces and nsys exports
agree with the plain reference readers on everything the importers accept, and damaged real
traces give the reference's result or one clear line, never a traceback or a hang.

The hypothesis profile "perfdiff-fuzz" runs a fixed, derandomized set of examples (a few
hundred cases in all); `make fuzz` (tools/fuzz.py) runs ten thousand.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import REAL
from fuzz.harness import FAILURES, Cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile("perfdiff-fuzz", max_examples=80, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FUZZ = settings.get_profile("perfdiff-fuzz")
LIMIT_S = 60  # per case, by SIGALRM in the harness: a hang fails, a slow machine does not


def verdict(cases: Cases, kind: str, seed: int) -> str:
    out = cases.run(kind, seed, LIMIT_S)
    assert out is not None
    assert out.result not in FAILURES, f"{kind} seed {seed}: {out.result}: {out.detail}"
    return out.result


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Cases:
    return Cases(tmp_path_factory.mktemp("fuzz"), REAL)


@FUZZ
@given(seed=st.integers(min_value=0, max_value=2 ** 32))
def test_generated_kineto_traces_agree_with_the_reference(cases: Cases, seed: int) -> None:
    verdict(cases, "kineto-gen", seed)


@FUZZ
@given(seed=st.integers(min_value=0, max_value=2 ** 32))
def test_generated_nsys_exports_agree_with_the_reference(cases: Cases, seed: int) -> None:
    verdict(cases, "nsys-gen", seed)


@pytest.mark.real
@pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not available: {REAL} is absent")
@FUZZ
@given(seed=st.integers(min_value=0, max_value=2 ** 32))
def test_damaged_real_kineto_traces_never_crash(cases: Cases, seed: int) -> None:
    verdict(cases, "kineto-mut", seed)


@pytest.mark.real
@pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not available: {REAL} is absent")
@FUZZ
@given(seed=st.integers(min_value=0, max_value=2 ** 32))
def test_damaged_real_nsys_exports_never_crash(cases: Cases, seed: int) -> None:
    verdict(cases, "nsys-mut", seed)


def test_the_generators_reach_what_they_are_for(tmp_path: Path) -> None:
    """Enough cases are accepted and compared (not all refused), and some are refused."""
    from fuzz.kineto_gen import kineto_trace

    results = [verdict(Cases(tmp_path, None), "kineto-gen", seed) for seed in range(40)]
    assert results.count("same") >= 25 and results.count("refused") >= 1
    forms = b"".join(kineto_trace(random.Random(f"kineto-gen:{s}"))[0] for s in range(40) if s % 4)
    for needle in (b'": 1.', b"e+", b"\\u", "核".encode(), b'" :', b"\n    ", b"ncclDevKernel_",
                   b'"Process Group Ranks": "['):
        assert needle in forms, needle


def test_a_planted_crash_is_caught_as_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness itself: a bug in the importer is a traceback, not a refusal."""
    def planted(*args: object, **kwargs: object) -> None:
        raise OverflowError("planted")

    monkeypatch.setattr("perfdiff.importers.kineto.import_kineto", planted)
    out = Cases(tmp_path, None).run("kineto-gen", 1, LIMIT_S)
    assert out is not None and out.result == "traceback" and "OverflowError: planted" in out.detail


def test_a_crash_of_the_multi_rank_readers_is_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An nsys case is read by the multi-rank readers too: their bug is a traceback."""
    def planted(*args: object, **kwargs: object) -> None:
        raise UnicodeDecodeError("utf-8", b"\xa0", 0, 1, "planted")

    monkeypatch.setattr("perfdiff.ranks.groups.nsys_groups", planted)
    out = Cases(tmp_path, None).run("nsys-gen", 1, LIMIT_S)
    assert out is not None and out.result == "traceback" and "planted" in out.detail


def test_a_hang_is_caught_by_the_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    def endless(*args: object, **kwargs: object) -> None:
        while True:
            time.sleep(0.05)

    monkeypatch.setattr("perfdiff.importers.kineto.import_kineto", endless)
    out = Cases(tmp_path, None).run("kineto-gen", 1, limit_s=1)
    assert out is not None and out.result == "hang"


def test_a_case_is_the_same_file_every_time(tmp_path: Path) -> None:
    """A seed names one damaged file: the SQL edits pick their rows with the seeded generator
    (SQLite's own random() made `make fuzz` count one case differently from run to run)."""
    import hashlib

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, again = Cases(tmp_path / "a", REAL), Cases(tmp_path / "b", REAL)
    for seed in range(12):
        made = [c.write("nsys-mut", seed) for c in (first, again)]
        if made[0] is None:
            continue
        digests = {hashlib.sha256(path.read_bytes()).hexdigest() for path, _ in made}
        assert len(digests) == 1, seed
