#!/usr/bin/env python3
"""Collector CPU of two code versions, alternated back to back (this VM's speed drifts by
±30 % within minutes, so only alternated runs compare versions).

    git worktree add /tmp/old <commit>
    ln -s /tmp/old/collectors /tmp/old/src/perfdiff/collectors   # the installed layout
    .venv/bin/python bench/ab_collect.py /tmp/old/src src

Runs `perfdiff collect --pid` for 10 s at 10 Hz and 100 Hz against bench_collect.py's 64-thread
pool target, each version in turn (PYTHONPATH), twice, and prints the loop's CPU share.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_collect import TARGET  # noqa: E402

PY = sys.executable


def once(src: str, interval: str) -> float:
    """Collector loop CPU, % of one core, with the perfdiff found first on PYTHONPATH=src."""
    t = subprocess.Popen([PY, "-c", TARGET, "pool"], stdout=subprocess.PIPE, text=True)
    assert t.stdout is not None and t.stdout.readline().strip() == "ready"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            subprocess.run([PY, "-m", "perfdiff", "collect", "--pid", str(t.pid), "--duration", "10s",
                            "--interval", interval, "-o", str(out)], env=dict(os.environ, PYTHONPATH=src),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c = json.loads((out / "manifest.json").read_text())["collection"]
            return 100.0 * c["cpu_ns"] / c["wall_ns"]
    finally:
        t.kill()
        t.wait()


def main(argv: list[str]) -> int:
    old, new = (str(Path(a).resolve()) for a in argv[:2])
    print("| rate | version | collector CPU (% of a core) |\n|---|---|---|")
    for interval, hz in (("100ms", 10), ("10ms", 100)):
        for _ in range(2):
            for name, src in (("old", old), ("new", new)):
                print(f"| {hz} Hz | {name} | {once(src, interval):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
