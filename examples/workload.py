"""A small loop with cycle markers to collect from: CPU work plus short sleeps standing in for GPU waits.

    python examples/workload.py --seconds 10
    perfdiff collect -o run -- python examples/workload.py --seconds 10

Each cycle (marked with ``perfdiff.cycle("step")``, the same object as
``perfdiff.marker.cycle``) does a fixed amount of CPU work (--work loop iterations, so
contention or a slower clock makes it take longer, as it would a real step), an optional
small write made durable with fsync (--io-kb, standing in for a log or checkpoint), then
sleeps --wait-ms (the GPU wait).  --cpu pins the process to one CPU; --children spawns
copies of itself (after --child-delay seconds, --depth levels deep) to exercise child
discovery.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from perfdiff.marker import cycle


def cpu_work(iterations: int) -> int:
    """A fixed amount of pure-Python arithmetic (about 0.1-0.2 µs an iteration)."""
    x = 0
    for i in range(iterations):
        x += i * i % 7
    return x


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="run this long (5)")
    p.add_argument("--work", type=int, default=50_000, help="CPU loop iterations per cycle (50000)")
    p.add_argument("--wait-ms", type=float, default=10.0, help="sleep per cycle, the 'GPU wait' (10)")
    p.add_argument("--io-kb", type=int, default=0, help="KiB written and fsync'd per cycle (0: none)")
    p.add_argument("--io-dir", default=None, help="where the --io-kb file goes (default: a temp dir)")
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    p.add_argument("--children", type=int, default=0, help="copies of itself to start")
    p.add_argument("--child-delay", type=float, default=0.5, help="seconds before starting children")
    p.add_argument("--depth", type=int, default=1, help="levels of children (2: children start their own)")
    p.add_argument("--name", default="step", help="cycle marker name")
    return p.parse_args(argv)


def child_argv(args: argparse.Namespace, remaining_s: float) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--seconds", f"{remaining_s:.3f}",
            "--work", str(args.work), "--wait-ms", str(args.wait_ms), "--name", args.name]
    if args.depth > 1:
        argv += ["--children", str(args.children), "--child-delay", str(args.child_delay),
                 "--depth", str(args.depth - 1)]
    return argv


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    fd = -1
    if args.io_kb > 0:
        io_dir = args.io_dir or tempfile.gettempdir()
        path = os.path.join(io_dir, f"perfdiff-workload-{os.getpid()}.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.unlink(path)  # the data only needs to reach the disk, not to stay
        block = os.urandom(args.io_kb * 1024)
    start = time.monotonic()
    end = start + args.seconds
    children: list[subprocess.Popen[bytes]] = []
    spawned = args.children == 0
    cycles = 0
    while time.monotonic() < end:
        if not spawned and time.monotonic() - start >= args.child_delay:
            spawned = True
            children = [subprocess.Popen(child_argv(args, end - time.monotonic()))
                        for _ in range(args.children)]
        with cycle(args.name):
            cpu_work(args.work)
            if fd >= 0:
                os.pwrite(fd, block, 0)
                os.fsync(fd)
            time.sleep(args.wait_ms / 1000.0)
        cycles += 1
    for c in children:
        c.wait()
    if fd >= 0:
        os.close(fd)
    print(f"workload {os.getpid()}: {cycles} cycles in {time.monotonic() - start:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
