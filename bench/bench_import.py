#!/usr/bin/env python3
"""Import and compare of large traces made by the trace generators in SHARED/bench (--shared).

For each size: generate a pair with the generators (the arguments the reference figures of
docs/PERFORMANCE.md used, scaled), time `perfdiff import` of one side (rows/s, MB/s) and
`perfdiff compare` of the pair, each in a fresh process (wall time, peak RSS from wait4).
Prints Markdown.
"""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_bench import OUT, PY, byte_compile, measure  # noqa: E402

FIGURES = {  # other tools on the same pairs, 2-core reference machine (docs/PERFORMANCE.md)
    "kineto": "HTA 0.5.0 TraceDiff: 215 s, 6.2 GiB (1 M kernels)",
    "nsys": "nsys-ai 0.3.0 diff: 88 s, 4.1 GiB (2 M kernels, cache warm)",
}


def gen(shared: Path, kind: str, n: int, side: str) -> Path:
    if kind == "kineto":
        out = OUT / f"kineto_{n}_{side}" / "rank0.json.gz"
        args = ["--kernels", str(n), "--steps", str(max(20, n // 5000)), "--seed", "1" if side == "a" else "2"]
        if side == "b":
            args += ["--scale-kernel", "sgemm=1.2", "--dataloader-us", "10000"]
        script = shared / "bench" / "gen_kineto.py"
    else:
        out = OUT / f"nsys_{n}_{side}.sqlite"
        args = ["--kernels", str(n), "--seed", "1" if side == "a" else "2"]
        if side == "b":
            args += ["--scale-kernel", "Fan2=1.1"]
        script = shared / "bench" / "gen_nsys.py"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        import subprocess

        subprocess.run([PY, str(script), *args, "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def importer_alone(kind: str, path: Path) -> float:
    """Seconds of the importer call itself (fresh process; interpreter start and imports excluded)."""
    import subprocess

    fn = "perfdiff.importers.nsys import import_nsys as f" if kind == "nsys" else \
        "perfdiff.importers.kineto import import_kineto as f"
    code = (f"import time; from {fn}; t = time.perf_counter(); f({str(path)!r}); "
            "print(time.perf_counter() - t)")
    out = subprocess.run([PY, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def json_bytes(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        n = 0
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, type=Path)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    byte_compile()
    if not (args.shared / "bench" / "gen_nsys.py").exists():
        print(f"(skipped: {args.shared / 'bench'} not found)")
        return 0
    sizes = {"nsys": [200_000, 1_000_000] if args.quick else [200_000, 1_000_000, 2_000_000],
             "kineto": [100_000] if args.quick else [100_000, 300_000, 1_000_000]}
    print("| trace | kernels per side | importer alone (s) | importer rate | `perfdiff import` to a bundle (s) "
          "| import peak RSS (MiB) | compare pair, best of 3 (s) | the 3 runs (s) | compare peak RSS, largest process "
          "(MiB) | compare peak memory, all processes (PSS, MiB) | figure to beat |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in ("nsys", "kineto"):
        for n in sizes[kind]:
            a, b = gen(args.shared, kind, n, "a"), gen(args.shared, kind, n, "b")
            bundle = OUT / f"imported_{kind}_{n}"
            import shutil

            shutil.rmtree(bundle, ignore_errors=True)
            t_imp, rss_imp, _, _ = measure([PY, "-m", "perfdiff", "import", str(a), "-o", str(bundle)])
            shutil.rmtree(bundle, ignore_errors=True)
            t_alone = importer_alone(kind, a)
            rate = (f"{n / t_alone / 1e6:.2f} M kernel rows/s" if kind == "nsys"
                    else f"{json_bytes(a) / t_alone / 1e6:.0f} MB/s of JSON")
            runs = [measure([PY, "-m", "perfdiff", "compare", str(a), str(b), "--no-plots", "-o", str(OUT / f"report_{kind}_{n}.md")])
                    for _ in range(3)]
            t_cmp = min(r[0] for r in runs)
            rss_cmp, tree_cmp = max(r[1] for r in runs), max(r[3] for r in runs)
            all_runs = " / ".join(f"{r[0]:.2f}" for r in runs)
            figure = FIGURES[kind] if n in (1_000_000, 2_000_000) and (kind == "kineto") == (n == 1_000_000) else ""
            print(f"| {kind} | {n:,} | {t_alone:.2f} | {rate} | {t_imp:.2f} | {rss_imp:,.0f} | {t_cmp:.2f} | "
                  f"{all_runs} | {rss_cmp:,.0f} | {tree_cmp:,.0f} | {figure} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
