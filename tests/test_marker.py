"""The target-side marker API (perfdiff.marker) and the collector's reader (collectors/markers.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfdiff import marker
from perfdiff.collectors.base import RowBuffer
from perfdiff.collectors import markers as markers_mod
from perfdiff.collectors.markers import MarkerReader, parse_marks


@pytest.fixture
def fresh_channel(monkeypatch: pytest.MonkeyPatch):
    """A clean marker channel, no NVTX, no PERFDIFF_MARKER_DIR; restored afterwards."""
    monkeypatch.delenv(marker.ENV_DIR, raising=False)
    marker._channel.reset()
    marker.set_nvtx(None)
    if hasattr(marker._last, "start_ns"):
        del marker._last.start_ns
    yield marker._channel
    marker._channel.reset()
    marker._nvtx = None


def read_rows(reader: MarkerReader) -> dict[str, list]:
    out = RowBuffer()
    reader.read(out)
    return out.take().get("markers", {"name": [], "start_ns": [], "end_ns": [], "tid": [], "source": []})


def test_no_listener_writes_nothing(fresh_channel, tmp_path: Path) -> None:
    with marker.cycle("step"):
        pass
    marker.mark_cycle()
    marker.mark_cycle()
    assert fresh_channel.fd == -1
    assert not marker.listening()
    assert not os.path.exists(marker.marks_path(marker.default_marker_dir(), os.getpid()))


def test_announced_directory_target_creates_its_file(fresh_channel, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    reader = MarkerReader(str(tmp_path), announced=True)
    monkeypatch.setenv(marker.ENV_DIR, str(tmp_path))
    t0 = time.time_ns()
    for _ in range(3):
        with marker.cycle("decode step"):
            time.sleep(0.001)
    marker.mark_cycle("iter")  # begins a cycle only
    marker.mark_cycle("iter")
    t1 = time.time_ns()
    rows = read_rows(reader)
    assert rows["name"] == ["decode step"] * 3 + ["iter"]
    assert set(rows["source"]) == {"perfdiff"}
    assert set(rows["tid"]) == {__import__("threading").get_native_id()}
    assert all(t0 <= s < e <= t1 for s, e in zip(rows["start_ns"], rows["end_ns"], strict=True))
    assert all(e - s >= 1_000_000 for s, e in zip(rows["start_ns"][:3], rows["end_ns"][:3], strict=True))
    assert read_rows(reader)["name"] == []  # only new marks the second time
    reader.close()
    assert not (tmp_path / f"{os.getpid()}.marks").exists()


def test_attached_reader_creates_file_then_target_stops_after_close(fresh_channel, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "markers"
    monkeypatch.setattr(marker, "default_marker_dir", lambda uid=None, root="": str(d))
    reader = MarkerReader(str(d), announced=False, owner_uid=os.getuid())
    with marker.cycle("before"):
        pass  # nobody listens yet: lost, as it should be
    reader.watch(os.getpid())
    assert (d / f"{os.getpid()}.marks").exists() and d.stat().st_mode & 0o777 == 0o700
    assert marker.listening()
    with marker.cycle("during"):
        pass
    assert read_rows(reader)["name"] == ["during"]
    reader.close()
    assert not marker.listening()
    with marker.cycle("after"):
        pass
    assert fresh_channel.fd == -1


def test_stale_foreign_or_symlinked_files_are_never_written(fresh_channel, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(marker, "default_marker_dir", lambda uid=None, root="": str(tmp_path))
    path = tmp_path / f"{os.getpid()}.marks"
    path.write_bytes(b"")
    old = time.time_ns() - 2 * marker.STALE_NS
    os.utime(path, ns=(old, old))  # a collector that died long ago
    assert not marker.listening()
    os.utime(path, None)
    assert marker.listening()
    fresh_channel.reset()
    path.unlink()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path.symlink_to(victim)
    assert not marker.listening()
    with marker.cycle("x"):
        pass
    assert victim.read_bytes() == b"keep"
    if os.geteuid() == 0:
        path.unlink()
        path.write_bytes(b"")
        os.chown(path, 65534, 65534)  # someone else's file in a shared directory
        assert not marker.listening()


def test_forked_child_marks_into_its_own_file(fresh_channel, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(marker.ENV_DIR, str(tmp_path))
    reader = MarkerReader(str(tmp_path), announced=True)
    with marker.cycle("parent"):
        pass
    pid = os.fork()
    if pid == 0:  # child: must not write into the parent's descriptor
        try:
            with marker.cycle("child"):
                pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    rows = read_rows(reader)
    assert sorted(rows["name"]) == ["child", "parent"]
    assert sorted(reader.stats.pids) == sorted([os.getpid(), pid])
    reader.close()


def test_reader_keeps_partial_lines_and_counts_malformed(tmp_path: Path) -> None:
    f = tmp_path / "42.marks"
    f.write_bytes(b"100 200 7 step\n300 40")
    reader = MarkerReader(str(tmp_path), announced=True)
    assert read_rows(reader)["start_ns"] == [100]
    with open(f, "ab") as fh:
        fh.write(b"0 8 step two\nnot a mark\n50 10 1 backwards\n")
    rows = read_rows(reader)
    assert rows["name"] == ["step two"] and rows["end_ns"] == [400]
    assert reader.stats.malformed == 2
    out = RowBuffer()
    assert parse_marks(b"1 2 3\n", out) == (1, 0)  # a name-less mark is a "cycle"
    assert out.take()["markers"]["name"] == ["cycle"]


def test_nvtx_ranges_when_the_package_is_there(fresh_channel) -> None:
    calls: list[tuple] = []

    class FakeNvtx:
        @staticmethod
        def push_range(name):
            calls.append(("push", name))

        @staticmethod
        def pop_range():
            calls.append(("pop",))

        @staticmethod
        def start_range(name):
            calls.append(("start", name))
            return len(calls)

        @staticmethod
        def end_range(rid):
            calls.append(("end", rid))

    marker.set_nvtx(FakeNvtx)
    with marker.cycle("step"):
        pass
    marker.mark_cycle("it")
    marker.mark_cycle("it")
    assert calls == [("push", "step"), ("pop",), ("start", "it"), ("end", 3), ("start", "it")]


def test_import_perfdiff_marker_is_cheap() -> None:
    """Targets import it: no pandas, numpy or pyarrow may come with it."""
    code = ("import sys, perfdiff, perfdiff.marker; "
            "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _mark_batch(n: int = 5000) -> None:
    for _ in range(n):
        with marker.cycle("step"):
            pass


def test_marks_in_a_tight_loop_all_reach_the_reader(fresh_channel, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Marks made back to back, with nobody listening and then with a collector, are all kept
    once one listens.  Their cost (µs per mark, against its budget) is `make bench`'s
    (bench/bench_collect.py): a time limit here would fail on a busy machine, not on a bug."""
    _mark_batch()
    monkeypatch.setenv(marker.ENV_DIR, str(tmp_path))
    fresh_channel.reset()
    reader = MarkerReader(str(tmp_path), announced=True)
    for _ in range(5):
        _mark_batch()
    assert len(read_rows(reader)["name"]) == 5 * 5000
    reader.close()


def test_attached_reader_sweeps_files_a_killed_collector_left(tmp_path: Path) -> None:
    old = tmp_path / "111.marks"
    old.write_bytes(b"1 2 3 x\n")
    t = time.time_ns() - 2 * markers_mod.ABANDONED_NS
    os.utime(old, ns=(t, t))
    fresh = tmp_path / "222.marks"  # another collector's, refreshed just now
    fresh.write_bytes(b"")
    reader = MarkerReader(str(tmp_path), announced=False)
    reader.watch(333)
    assert not old.exists() and fresh.exists() and (tmp_path / "333.marks").exists()
    reader.close()
