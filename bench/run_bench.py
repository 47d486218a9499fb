#!/usr/bin/env python3
"""`make bench`: time and peak memory of perfdiff on large generated inputs.

Each measurement runs in a fresh process; wall time is measured around it and peak RSS comes
from the kernel (wait4's ru_maxrss of that process).  Prints Markdown tables to stdout and to
bench/out/results.md; docs/PERFORMANCE.md records them with the machine they ran on.

    python bench/run_bench.py [--quick] [--only compare,import,collect,gpu,agent,ranks] [--shared ../shared]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
PY = sys.executable


def byte_compile() -> None:
    """Write perfdiff's bytecode before anything is timed.  An installed package has it (pip
    writes it at install); a source tree run where PYTHONDONTWRITEBYTECODE is set (as on
    this project's machines) would otherwise compile every changed module in every command,
    up to 0.1 s of each command's start that no user pays."""
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "src" / "perfdiff")], check=True,
                   stdout=subprocess.DEVNULL)


def _tree_pss(pid: int) -> int:
    """Summed PSS (bytes) of `pid` and every descendant: compare forks loading workers and a
    test pool; PSS shares each page among the processes that map it, so pages shared after a
    fork are counted once, not once per process as a sum of RSS would."""
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            pass
    return total


def measure(cmd: list[str], cwd: Path = ROOT, pss: bool = True) -> tuple[float, float, str, float]:
    """(wall s, peak RSS MiB of the largest process, stderr tail, peak memory MiB of the whole
    process tree) of one command in a fresh process.

    The largest process's peak is the kernel's (wait4's ru_maxrss: the process or its largest
    reaped child); the tree's is its summed PSS polled every 50 ms from /proc (so a peak
    shorter than that can be missed; the larger of the two is reported).  `pss=False` leaves
    the polling out (it takes CPU and each process's memory-map lock while the command runs:
    the tree's figure is then the largest process's)."""
    return measure_watched(cmd, cwd, pss)[:4]


def measure_watched(cmd: list[str], cwd: Path = ROOT, pss: bool = True,
                    own: bool = False) -> tuple[float, float, str, float, float]:
    """As `measure`, and fifth the command's own process's peak RSS in MiB where `own` (its
    VmHWM, which only grows, read every 50 ms: its peak to 50 ms), else NaN."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, hwm = [0], [0]
    done = threading.Event()

    def poll() -> None:
        while (pss or own) and not done.wait(0.05):
            if own:
                try:
                    with open(f"/proc/{proc.pid}/status") as fh:
                        hwm[0] = max(hwm[0], next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:")))
                except (OSError, StopIteration, ValueError):
                    pass
            if pss:
                peak[0] = max(peak[0], _tree_pss(proc.pid))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    watcher.join()
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    rss = usage.ru_maxrss / 1024.0
    return wall, rss, err[-500:], max(peak[0] / 2**20, rss), hwm[0] / 1024.0 if own else float("nan")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def bench_compare(sizes: list[int]) -> list[str]:
    rows = ["| kernel activities per run | cycles | samples per run | compare wall (s) | peak RSS (MiB) "
            "| peak memory, all processes (PSS, MiB) | µs per activity |",
            "|---|---|---|---|---|---|---|"]
    for n in sizes:
        a, b = OUT / f"bundle_{n}_a", OUT / f"bundle_{n}_b"
        cycles = max(200, int(2000 * n / 5_000_000))
        for path, extra in ((a, ["--seed", "1"]), (b, ["--seed", "2", "--slow", "kernel_01[0-9]<=1.3"])):
            if not (path / "manifest.json").exists():
                subprocess.run([PY, str(HERE / "gen_bundle.py"), str(path), "--kernels", str(n),
                                "--cycles", str(cycles), "--samples", str(int(100_000 * n / 5_000_000)), *extra],
                               check=True)
        best = None
        for _ in range(3):
            wall, rss, _, tree = measure([PY, "-m", "perfdiff", "compare", str(a), str(b), "--no-plots", "-o",
                                          str(OUT / f"report_{n}.md"), "--json", str(OUT / f"report_{n}.json")])
            best = (wall, rss, tree) if best is None or wall < best[0] else best
        rows.append(f"| {n:,} | {cycles:,} | {int(100_000 * n / 5_000_000):,} | {best[0]:.2f} | {best[1]:,.0f} | "
                    f"{best[2]:,.0f} | {best[0] / (2 * n) * 1e6:.2f} |")
    return rows


def bench_extra(name: str, script: Path, args: list[str]) -> list[str]:
    if not script.exists():
        return [f"({name}: {script.relative_to(ROOT)} not present)"]
    proc = subprocess.run([PY, str(script), *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.rstrip().splitlines()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    ap.add_argument("--only", default="compare,import,collect,gpu,agent,adapters,ranks")
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--keep", action="store_true", help="keep generated inputs in bench/out")
    args = ap.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    byte_compile()
    only = set(args.only.split(","))
    lines = [f"Machine: {machine()}", ""]
    if "compare" in only:
        sizes = [200_000, 1_000_000] if args.quick else [1_000_000, 2_500_000, 5_000_000]
        lines += ["### compare (bundles, bench/gen_bundle.py; best of 3)", ""] + bench_compare(sizes) + [""]
    if "import" in only:
        lines += ["### import and compare of traces (../shared/bench generators)", ""]
        lines += bench_extra("import", HERE / "bench_import.py", ["--shared", args.shared] + (["--quick"] if args.quick else [])) + [""]
        # The largest pairs bench_import.py made, against what they cannot go below; fixed costs.
        k, n = (100_000, 1_000_000) if args.quick else (1_000_000, 2_000_000)
        floors = ["--kineto", str(OUT / f"kineto_{k}_a" / "rank0.json.gz"), str(OUT / f"kineto_{k}_b" / "rank0.json.gz"),
                  "--nsys", str(OUT / f"nsys_{n}_a.sqlite"), str(OUT / f"nsys_{n}_b.sqlite")]
        lines += ["### floors and fixed costs (bench/bench_floors.py)", ""]
        lines += bench_extra("floors", HERE / "bench_floors.py", floors) + [""]
    if "collect" in only:
        lines += ["### collection overhead", ""] + bench_extra("collect", HERE / "bench_collect.py",
                                                              ["--quick"] if args.quick else []) + [""]
    if "gpu" in only:
        lines += ["### NVML sampler (fake GPUs)", ""] + bench_extra("gpu", HERE / "bench_gpu.py", []) + [""]
    if "agent" in only:
        lines += ["### CUPTI agent (fake cupti-python)", ""] + bench_extra("agent", HERE / "bench_agent.py", []) + [""]
    if "adapters" in only:
        lines += ["### framework adapters (vLLM / SGLang stand-ins)", ""]
        lines += bench_extra("adapters", HERE / "bench_adapters.py", ["--calls", "100000" if args.quick else "200000"])
        lines += [""]
    if "ranks" in only:
        lines += ["### multi-rank compare (bench/gen_ranks.py, planted straggler)", ""]
        lines += bench_extra("ranks", HERE / "bench_ranks.py", ["--quick"] if args.quick else []) + [""]
    text = "\n".join(lines) + "\n"
    (OUT / "results.md").write_text(text)
    print(text)
    if not args.keep:
        for p in [*OUT.glob("bundle_*"), *OUT.glob("ranks_*x*")]:
            shutil.rmtree(p, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
