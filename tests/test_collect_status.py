"""`collect` shows it is working: on a terminal one status line on the screen's bottom row,
rewritten about once a second out of the way of the target's output, cleared before the
summary at the end; nothing of it when stderr is not a terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.live


def _collect(tmp_path: Path, name: str, stderr: int) -> subprocess.Popen:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    proc = subprocess.Popen([sys.executable, "-m", "perfdiff", "collect", "--pid", str(target.pid), "--duration",
                             "2.5s", "--no-kernel-trace", "-o", str(tmp_path / name)],
                            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "TERM": "xterm"})
    proc.target = target  # type: ignore[attr-defined]
    return proc


def test_status_line_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 rows, 100 columns
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
    # the rows above the last scroll; the status is drawn on row 24, the cursor saved around it
    assert "\x1b7\x1b[1;23r\x1b8" in text
    assert "\x1b7\x1b[24;1H\x1b[2Kperfdiff collect: " in text and " ticks" in text and " samples" in text
    last = text.split("\x1b[2Kperfdiff collect: ")[-1]
    # the whole screen given back and the status row cleared before the summary
    assert "\x1b7\x1b[r\x1b[24;1H\x1b[2K\x1b8" in last.split("perfdiff: wrote ")[0]


def test_no_status_line_when_not_a_terminal(tmp_path: Path) -> None:
    proc = _collect(tmp_path, "pipe", subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    proc.target.kill()
    assert proc.returncode == 0, err
    assert b"perfdiff collect: " not in err and b"\r" not in err and b"perfdiff: wrote " in err


TARGET = """
import sys, time
for i in range(30):
    print(f"workload line {i}: 390 cycles in 5.00 s", flush=True)
    time.sleep(0.1)
"""


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def test_status_line_and_target_output_on_separate_lines_in_tmux(tmp_path: Path) -> None:
    """The target prints lines to the terminal it shares with `collect`: in a real terminal
    (tmux), the pane shows every target line whole, the status line on a line of its own
    while collecting, and the summary without it at the end."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    (tmp_path / "target.py").write_text(TARGET)
    session = f"perfdiff-status-{os.getpid()}"
    cmd = (f"TERM=xterm {sys.executable} -m perfdiff collect --duration 2.5s --no-kernel-trace "
           f"-o {tmp_path / 'b'} -- {sys.executable} {tmp_path / 'target.py'}; echo collect-exited; sleep 60")
    try:
        _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "20", cmd)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"tmux cannot run here: {exc}")
    try:
        during = ""  # the last pane captured while the status line was up
        while "collect-exited" not in (after := _tmux("capture-pane", "-p", "-t", session)):
            if "perfdiff collect: " in after:
                during = after
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert during, f"no status line while collecting: {after}"
    for pane in (during, after):
        lines = [ln.rstrip() for ln in pane.splitlines()]
        target_lines = [ln for ln in lines if "workload line" in ln]
        assert target_lines, pane
        for ln in target_lines:  # each whole, alone on its line
            assert ln.startswith("workload line ") and ln.endswith(": 390 cycles in 5.00 s"), pane
            assert "perfdiff" not in ln, pane
    status = [ln for ln in during.splitlines() if "perfdiff collect: " in ln]
    assert len(status) == 1 and status[0].startswith("perfdiff collect: ") and "workload" not in status[0], during
    assert during.splitlines()[-1].startswith("perfdiff collect: "), during  # on the bottom row
    assert "perfdiff collect: " not in after, after  # cleared at exit
    assert any(ln.startswith("perfdiff: wrote ") for ln in after.splitlines()), after
