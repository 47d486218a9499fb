"""`collect` shows it is working: on a terminal one status line rewritten about once a second,
replaced by the summary at the end; nothing of it when stderr is not a terminal."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live


def _collect(tmp_path: Path, name: str, stderr: int) -> subprocess.Popen:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    proc = subprocess.Popen([sys.executable, "-m", "perfdiff", "collect", "--pid", str(target.pid), "--duration",
                             "2.5s", "--no-kernel-trace", "-o", str(tmp_path / name)],
                            stdout=subprocess.DEVNULL, stderr=stderr)
    proc.target = target  # type: ignore[attr-defined]
    return proc


def test_status_line_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = _collect(tmp_path, "tty", slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    proc.target.kill()
    os.close(master)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "\rperfdiff collect: " in text and " ticks" in text and " samples" in text
    assert "perfdiff: wrote " in text.split("\rperfdiff collect: ")[-1]  # the summary replaces it


def test_no_status_line_when_not_a_terminal(tmp_path: Path) -> None:
    proc = _collect(tmp_path, "pipe", subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    proc.target.kill()
    assert proc.returncode == 0, err
    assert b"perfdiff collect: " not in err and b"\r" not in err and b"perfdiff: wrote " in err
