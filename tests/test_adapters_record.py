"""The adapters' wrappers in-process: the framework's exceptions and results pass through
unchanged, perfdiff's own failures are swallowed and counted, nested phases give own times,
and undo puts every original back."""
from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from perfdiff import marker
from perfdiff.collectors.base import RowBuffer
from perfdiff.collectors.cupti.adapters import record
from perfdiff.collectors.markers import parse_marks


def fake_marker(listening: bool = True, emit: Any = None) -> tuple[types.SimpleNamespace, list[bytes]]:
    written: list[bytes] = []
    m = types.SimpleNamespace(active=lambda: listening, emit=emit or (lambda data: written.append(data) or True),
                              encode_name=marker.encode_name, cycle_line=marker.cycle_line,
                              range_line=marker.range_line, load_line=marker.load_line)
    return m, written


def rows(written: list[bytes]) -> dict[str, Any]:
    out = RowBuffer()
    assert parse_marks(b"".join(written), out)[1] == 0
    return out.take()


class Boom(Exception):
    pass


def test_framework_exception_and_result_pass_through_unchanged() -> None:
    m, written = fake_marker()
    rec = record.Recorder(m, warn_out=lambda line: None)
    err = Boom("from the framework")

    def fails() -> None:
        raise err

    sentinel = object()
    phase = rec.phase("P", lambda: sentinel, standalone=True)
    assert phase() is sentinel
    with pytest.raises(Boom) as info:
        rec.phase("F", fails, standalone=True)()
    assert info.value is err
    step = rec.cycle("S", lambda obj: (_ for _ in ()).throw(err))
    with pytest.raises(Boom) as info:
        step(object())
    assert info.value is err and rec.errors == 0
    t = rows(written)
    assert t["activity"]["function"] == ["P", "F"] and t["markers"]["name"] == ["S"]  # the failed step is a cycle


def test_own_failures_are_swallowed_and_counted() -> None:
    def broken_emit(data: bytes) -> bool:
        raise OSError("disk gone")

    m, _ = fake_marker(emit=broken_emit)
    rec = record.Recorder(m, warn_out=lambda line: None)

    def bad_load(result: Any) -> None:
        raise KeyError("unexpected SchedulerOutput")

    step = rec.cycle("S", lambda obj: rec.phase("P", lambda: 7, on_result=bad_load)())
    assert step(object()) == 7
    assert rec.errors == 2 and "KeyError" in rec.error_texts[0] and "OSError" in rec.error_texts[1]
    m.active = lambda: 1 / 0  # even the listener check failing
    assert rec.phase("Q", lambda: 8, standalone=True)() == 8 and rec.errors == 3


def test_nested_phases_own_time_and_load_in_one_write() -> None:
    m, written = fake_marker()
    rec = record.Recorder(m, warn_out=lambda line: None)
    inner = rec.phase("inner", lambda: None)
    outer = rec.phase("outer", lambda: inner(), on_result=lambda r: rec.set_load((3, 10, 8, 2)))
    rec.cycle("S", lambda obj: outer())(object())
    assert len(written) == 1  # the step's records in one write
    t = rows(written)
    a = dict(zip(t["activity"]["function"], zip(t["activity"]["start_ns"], t["activity"]["end_ns"],
                                                 t["activity"]["busy_ns"], strict=True), strict=True))
    (si, ei, bi), (so, eo, bo) = a["inner"], a["outer"]
    assert so <= si <= ei <= eo and bi == ei - si and bo == (eo - so) - (ei - si)
    s = dict(zip(t["samples"]["metric"], t["samples"]["value"], strict=True))
    assert s == {"step_requests": 3, "step_tokens": 10, "step_prefill_tokens": 8, "step_decode_tokens": 2}


def test_nothing_recorded_without_a_listener_and_phases_only_inside_cycles() -> None:
    m, written = fake_marker(listening=False)
    rec = record.Recorder(m, warn_out=lambda line: None)
    assert rec.cycle("S", lambda obj: rec.phase("P", lambda: 1)())(object()) == 1 and written == []
    m.active = lambda: True
    assert rec.phase("P", lambda: 2)() == 2 and written == []  # an engine phase outside any step


def test_coroutine_phase() -> None:
    m, written = fake_marker()
    rec = record.Recorder(m, warn_out=lambda line: None)

    async def handle(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    seen: list[int] = []
    wrapped = rec.phase("TokenizerManager._handle_batch_output", handle, before=seen.append, standalone=True)
    assert asyncio.run(wrapped(1)) == 2 and seen == [1]
    assert rows(written)["activity"]["function"] == ["TokenizerManager._handle_batch_output"]
    # A coroutine phase of an engine step is, like any engine phase, recorded only inside a step.
    written.clear()
    assert asyncio.run(rec.phase("P", handle)(2)) == 3 and written == []


def _engine_recorder() -> tuple[record.Recorder, list[str], type, object]:
    """A recorder whose warnings land in a list, and an Engine class whose `step` it wrapped
    as the cycle: (recorder, warnings, Engine, the original step)."""
    m, _ = fake_marker()
    lines: list[str] = []
    rec = record.Recorder(m, warn_out=lines.append)

    class Engine:
        def step(self) -> int:
            return 1

    original = Engine.__dict__["step"]
    rec.patch("fw", Engine, "step", rec.cycle("Engine.step", original))
    return rec, lines, Engine, original


def test_undo_puts_the_originals_back_and_gives_up_with_one_warning() -> None:
    rec, lines, Engine, original = _engine_recorder()

    class Sched:
        pass

    sched = Sched()
    sched.schedule = lambda: 0  # type: ignore[attr-defined]
    own = sched.schedule  # type: ignore[attr-defined]
    rec.patch("fw", sched, "schedule", rec.phase("Sched.schedule", own))
    assert Engine.__dict__["step"] is not original and record.unwrapped(Engine.__dict__["step"]) is original
    rec.give_up("fw", "Framework 1.0 (fw.core)", ["Engine.missing"])
    rec.give_up("fw", "Framework 1.0 (fw.core)", ["Engine.missing"])
    assert Engine.__dict__["step"] is original and sched.schedule is own  # type: ignore[attr-defined]
    assert lines == ["perfdiff agent: Framework 1.0 (fw.core): not found: Engine.missing; left unwrapped "
                     "(an unsupported version? docs/PROFILING_LLM_SERVERS.md lists the supported ones)"]
    assert rec.status()["frameworks"]["fw"]["state"] == "unsupported"


def test_give_up_on_an_optional_part_keeps_the_other_wrappers() -> None:
    rec, lines, Engine, original = _engine_recorder()
    rec.give_up("fw", "Framework tokenizer (fw.tok)", ["Tokenizer.handle"], undo=False)
    assert Engine.__dict__["step"] is not original and len(lines) == 1 and "Tokenizer.handle" in lines[0]
    state = rec.status()["frameworks"]["fw"]
    assert state["state"] == "wrapped" and state["missing"] == ["Tokenizer.handle"]
