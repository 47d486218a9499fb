"""`make fuzz`: many seeded fuzz cases of the trace importers, in worker processes.

    python tools/fuzz.py [--cases 10000] [--seed 0] [--workers 2] [--limit 30] [--shared ../shared]

Each case (tests/fuzz/harness.py) is a generated Kineto trace or nsys export, or a damaged
excerpt of a real trace, imported and checked against the plain reference reader.  A case
has `--limit` seconds (SIGALRM in the worker; a worker silent for longer is killed and the case
counted as a hang).  Prints a summary; exits 1 when any case gave a traceback, a hang, a
mismatch or a message of more than one line.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def plan(cases: int, seed: int) -> list[tuple[str, int]]:
    """(kind, case seed) of every case, the kinds mixed by harness.MIX."""
    from fuzz.harness import MIX

    out: list[tuple[str, int]] = []
    for kind, share in MIX.items():
        out += [(kind, seed * 1_000_000 + i) for i in range(round(cases * share))]
    while len(out) < cases:
        out.append(("kineto-gen", seed * 1_000_000 + len(out) + 500_000))
    return out


def worker(shared: Path, limit: int) -> None:
    """Answer "kind seed" lines on stdin with one JSON outcome line each."""
    from fuzz.harness import Cases

    with tempfile.TemporaryDirectory(prefix="perfdiff-fuzz-") as tmp:
        cases = Cases(Path(tmp), shared / "data" / "real")
        for line in sys.stdin:
            kind, seed = line.split()
            out = cases.run(kind, int(seed), limit)
            answer = {"kind": kind, "seed": int(seed), "result": "skipped" if out is None else out.result,
                      "detail": "" if out is None else out.detail}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


class _Worker:
    def __init__(self, args: argparse.Namespace):
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", "--shared", str(args.shared),
                                      "--limit", str(args.limit)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.case: tuple[str, int] | None = None
        self.since = 0.0

    def give(self, case: tuple[str, int]) -> None:
        self.case, self.since = case, time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{case[0]} {case[1]}\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--limit", type=int, default=30, help="seconds a case may take")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.shared, args.limit)
        return 0
    todo = plan(args.cases, args.seed)[::-1]
    counts: Counter[tuple[str, str]] = Counter()
    failures: list[dict] = []
    started = time.monotonic()
    workers = [_Worker(args) for _ in range(args.workers)]
    try:
        for w in workers:
            if todo:
                w.give(todo.pop())
        while any(w.case for w in workers):
            busy = {w.proc.stdout: w for w in workers if w.case}
            ready, _, _ = select.select(list(busy), [], [], 1.0)
            for stream in ready:
                w = busy[stream]
                line = stream.readline()
                if not line:  # the worker died: count its case as a traceback and start another
                    answer = {"kind": w.case[0], "seed": w.case[1], "result": "traceback",
                              "detail": f"worker exited with {w.proc.wait()}"}
                    workers[workers.index(w)] = w = _Worker(args)
                else:
                    answer = json.loads(line)
                counts[(answer["kind"], answer["result"])] += 1
                if answer["result"] not in ("same", "refused", "tolerated", "skipped"):
                    failures.append(answer)
                w.case = None
                if todo:
                    w.give(todo.pop())
            for i, w in enumerate(workers):
                if w.case and time.monotonic() - w.since > args.limit + 30:
                    counts[(w.case[0], "hang")] += 1
                    failures.append({"kind": w.case[0], "seed": w.case[1], "result": "hang", "detail": "killed"})
                    w.stop()
                    workers[i] = _Worker(args)
                    if todo:
                        workers[i].give(todo.pop())
    finally:
        for w in workers:
            w.stop()
    elapsed = time.monotonic() - started
    _summary(counts, failures, elapsed, args)
    return 1 if failures else 0


def _summary(counts: Counter, failures: list[dict], elapsed: float, args: argparse.Namespace) -> None:
    from fuzz.harness import FAILURES, KINDS

    results = ("same", "refused", "tolerated", *FAILURES, "skipped")
    total = sum(v for (_, r), v in counts.items() if r != "skipped")
    print(f"perfdiff fuzz: seed {args.seed}, {total} cases in {elapsed:.0f} s ({args.workers} workers, "
          f"{args.limit} s limit a case)")
    print("kind".ljust(12) + "".join(r.rjust(12) for r in results))
    for kind in KINDS:
        print(kind.ljust(12) + "".join(str(counts[(kind, r)]).rjust(12) for r in results))
    print("total".ljust(12) + "".join(str(sum(counts[(k, r)] for k in KINDS)).rjust(12) for r in results))
    for f in failures[:20]:
        detail = " | ".join(line.strip() for line in f["detail"].strip().splitlines()[-3:])
        print(f"FAIL {f['kind']} seed {f['seed']}: {f['result']}: {detail[-500:]}")


if __name__ == "__main__":
    sys.exit(main())
