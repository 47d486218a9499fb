#!/usr/bin/env python3
"""What a command cannot go below, measured in the same run as the command, and the fixed costs.

- The Kineto pair's floor: inflating its two gzip files in parallel (two threads) with the
  fastest inflater installed (ISA-L's where perfdiff[fast] is), and with zlib for reference;
  the ratio is `perfdiff compare`'s best wall time over that floor (target ≤ 2.5); the row says
  whether the Kineto reader decoded with its compiled decoder or with numpy (and why).  Beside
  it, the reader's scan alone (inflate and decode both files at once, one process each, no
  tables built): what the pair cannot go below with this decoder.
- The nsys pair's floor: a bare SELECT of the kernel table's columns the importer reads, both
  files in parallel processes (target ≤ 1.2); the row says whether the page reader decoded the
  rows' records with its compiled decoder or with numpy.
- The shipped example (`make demo`'s compare, pictures included; target < 0.8 s) and
  `perfdiff --help` / `--version` (target < 0.15 s), best of 5 fresh processes each.

Usage: bench_floors.py --kineto A.json.gz B.json.gz --nsys A.sqlite B.sqlite (made by
bench_import.py).  Prints Markdown.
"""
from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_bench import PY, ROOT, byte_compile, measure  # noqa: E402

KERNEL_COLUMNS = "start, end, deviceId, streamId, correlationId, shortName, demangledName"


def _inflate(path: Path, z) -> None:
    d = z.decompressobj(wbits=47)
    with open(path, "rb") as fh:
        while raw := fh.read(1 << 20):
            while raw:
                d.decompress(raw, 8 << 20)
                raw = d.unconsumed_tail


def inflate_pair(a: Path, b: Path, z) -> float:
    """Seconds to inflate both files at once, one thread each (the inflaters release the GIL)."""
    t = time.perf_counter()
    threads = [threading.Thread(target=_inflate, args=(p, z)) for p in (a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


def _import_scan() -> None:
    import perfdiff.importers.kineto.scan  # noqa: F401


def _scan(path: str) -> int:
    from perfdiff.importers.kineto.scan import FastScan

    return len(FastScan(Path(path), cores=1).run().column("role"))


def scan_pair(a: Path, b: Path) -> float:
    """Seconds of the Kineto reader's scan of both files at once (inflate and decode, no
    tables), one process each (started, the reader imported, before the clock), on a core's
    budget each as in a pair."""
    with ProcessPoolExecutor(2, initializer=_import_scan) as pool:
        list(pool.map(int, [0, 0]))  # the workers are up
        t = time.perf_counter()
        list(pool.map(_scan, [str(a), str(b)]))
        return time.perf_counter() - t


def _select(path: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return len(con.execute(f"SELECT {KERNEL_COLUMNS} FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall())
    finally:
        con.close()


def select_pair(a: Path, b: Path) -> float:
    """Seconds of the bare kernel SELECT of both files at once, one process each (started before the clock)."""
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(int, [0, 0]))  # the workers are up
        t = time.perf_counter()
        list(pool.map(_select, [str(a), str(b)]))
        return time.perf_counter() - t


def best_compare(a: Path, b: Path, out: Path, runs: int = 3) -> float:
    return min(measure([PY, "-m", "perfdiff", "compare", str(a), str(b), "--no-plots", "-o", str(out)],
                       pss=False)[0] for _ in range(runs))


def best_of(cmd: list[str], runs: int = 5) -> float:
    return min(measure(cmd, pss=False)[0] for _ in range(runs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kineto", nargs=2, type=Path)
    ap.add_argument("--nsys", nargs=2, type=Path)
    args = ap.parse_args(argv)
    byte_compile()
    print("| what | perfdiff (s) | floor (s) | floor measured as | ratio | target |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        if args.kineto:
            from perfdiff.importers.kineto.blocks import inflater

            name, z = inflater()
            floor = min(inflate_pair(*args.kineto, z) for _ in range(3))
            plain = min(inflate_pair(*args.kineto, zlib) for _ in range(3))
            scan = min(scan_pair(*args.kineto) for _ in range(3))
            cmp_s = best_compare(*args.kineto, Path(tmp) / "k.md")
            from perfdiff.importers.kineto.compiled import why_not

            decoder = "compiled decoder" if not why_not() else f"numpy decoder: {why_not()}"
            print(f"| Kineto pair compare (best of 3; {decoder}) | {cmp_s:.2f} | {floor:.2f} | both files inflated at once by "
                  f"{name} (zlib: {plain:.2f} s) | {cmp_s / floor:.2f} | ≤ 2.5 |")
            print(f"| Kineto pair: the reader's scan alone, both files at once (best of 3) | {scan:.2f} | {floor:.2f} | "
                  f"as above | {scan / floor:.2f} | — |")
        if args.nsys:
            floor = min(select_pair(*args.nsys) for _ in range(3))
            cmp_s = best_compare(*args.nsys, Path(tmp) / "n.md")
            from perfdiff.importers.nsys.pages import compiled

            decoder = "compiled record decoder" if compiled() is not None else "numpy record decoder"
            print(f"| nsys pair compare (best of 3; {decoder}) | {cmp_s:.2f} | {floor:.2f} | bare kernel SELECT of both files "
                  f"at once | {cmp_s / floor:.2f} | ≤ 1.2 |")
        ex = ROOT / "examples" / "cpufreq"
        demo = best_of([PY, "-m", "perfdiff", "compare", str(ex / "normal"), str(ex / "abnormal"), "-o",
                        str(Path(tmp) / "demo.md"), "--json", str(Path(tmp) / "demo.json")])
        print(f"| the shipped example (`make demo`'s compare, pictures included; best of 5) | {demo:.2f} | — | — | — "
              "| < 0.8 s |")
        for flag in ("--help", "--version"):
            t = best_of([PY, "-m", "perfdiff", flag])
            print(f"| `perfdiff {flag}` (best of 5) | {t:.3f} | — | — | — | < 0.15 s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
