#!/usr/bin/env python3
"""Multi-rank compare at scale: N-rank pairs from gen_ranks.py (a planted straggler), compared
by `perfdiff compare` on 1, then 2, … local worker processes, each run in a fresh
process (wall time; peak RSS of the largest process; peak memory of the whole process tree,
PSS).  The worker counts alternate for `--repeat` timed rounds, so a drift of the machine's
speed hits them alike; each figure is the median over the rounds, and the speed-up the median
of the rounds' own ratios.  The timed rounds do not poll the process tree's memory (reading
every process's memory map each 50 ms takes CPU and map locks from the workers, more so when
every core runs one); one more run per worker count measures it.  The fan-out's share comes from the report's phase times ("ranks":
every rank's task); the rest of the wall time (interpreter, imports, starting the workers, planning, the
analysis and the report) is fixed, which a second worker cannot shorten.  The phase also
gives the tasks' own times: what a task costs on average with that many workers, and how busy
the workers were.  Prints Markdown: one row per (format, workers), and whether the straggler
was named.

The machine's own scaling on the same work is measured without perfdiff's fan-out (`--plain`): the same
rank tasks (perfdiff.ranks.part.load_part) in a pool of 1, then 2, … plain processes forked
after the imports, timing only the pool's map.  The command's speed-up can come near it, not above it.

The driver's analysis at scale (`--analysis RANKSxFUNCTIONS`, default 1024x100): the parts of
the generated nsys pair, loaded in this process, copied to RANKS ranks of each run and widened
to FUNCTIONS functions each (seeded noise kernels beside the planted ones), then analysed as
`compare` analyses what its workers return (perfdiff.ranks.pipeline.analyze_parts); wall time
of each of --repeat runs.  `--analysis none` leaves it out.

The whole command at scale (`--scale RANKS`, default 1024): a generated nsys pair of RANKS
ranks of --kernels kernels each (gen_ranks.py, the same straggler), compared once by `perfdiff
compare` on the local workers as a user runs it (one worker a core), beside the --ranks pair
compared the same way: wall time, seconds per rank pair (linear growth keeps it), peak RSS of
the largest process, the driver's own peak (VmHWM of the command's process, read every 50 ms)
and the peak of all processes (PSS).  `--scale 0` leaves it out.

    python bench/bench_ranks.py [--ranks 64] [--kernels 100000] [--formats kineto,nsys] [--workers 1,2]
                                [--repeat 3] [--quick] [--no-plain] [--analysis 1024x100] [--scale 1024]
    python bench/bench_ranks.py --formats none --repeat 5   # the driver's analysis alone
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from statistics import median
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_bench import OUT, PY, byte_compile, measure, measure_watched  # noqa: E402

STRAGGLER = 5


def _command(n: Path, a: Path, workers: int, fmt: str, extra: list[str]) -> list[str]:
    return [PY, "-m", "perfdiff", "compare", str(n), str(a), "--workers", str(workers), "--no-plots",
            "-o", str(OUT / f"ranks_{fmt}_{workers}.md"), "--json", str(OUT / f"ranks_{fmt}_{workers}.json"), *extra]


def _tasks_and_plan(normal: str, abnormal: str, own_workers: bool):
    """(the normal run's rank tasks, the abnormal run's, the one plan), as compare makes them."""
    from perfdiff.cycles import PairChoice, plan_cycles
    from perfdiff.ranks.discover import pair_ranks, rank_inputs
    from perfdiff.ranks.part import RankTask, load_summary

    pairs, _ = pair_ranks(rank_inputs(normal), rank_inputs(abnormal), None, (normal, abnormal))
    tasks_n = [RankTask(0, p.normal, own_workers=own_workers) for p in pairs]
    tasks_a = [RankTask(1, p.abnormal, own_workers=own_workers) for p in pairs]
    plan = plan_cycles((load_summary(tasks_n[0]), load_summary(tasks_a[0])), PairChoice(match_devices=False))
    return tasks_n, tasks_a, plan


def plain_run(normal: str, abnormal: str, workers: int) -> None:
    """Print {"wall_s", "work_s", "tasks"}: every rank task of the pair in a pool of `workers`
    plain processes (the plan chosen first, as compare does; only the pool's map is timed)."""
    import multiprocessing as mp
    import time

    tasks_n, tasks_a, plan = _tasks_and_plan(normal, abnormal, own_workers=True)  # as in the local workers
    tasks = tasks_n + tasks_a
    with mp.get_context("fork").Pool(workers) as pool:
        pool.map(time.sleep, [0.0] * workers)  # the workers exist before the clock starts
        t = time.perf_counter()
        work = pool.starmap(_timed_part, [(x, plan) for x in tasks], chunksize=1)
        wall = time.perf_counter() - t
    print(json.dumps({"wall_s": wall, "work_s": sum(work), "tasks": len(tasks)}))


def _timed_part(task, plan) -> float:
    import time

    from perfdiff.ranks.part import load_part

    t = time.perf_counter()
    load_part(task, plan)
    return time.perf_counter() - t


def analysis_at_scale(normal: Path, abnormal: Path, ranks: int, functions: int, repeat: int) -> str:
    """A Markdown table row: the driver's analysis of `ranks` rank pairs of `functions`
    functions each, built from the generated pair's parts (see the module docstring)."""
    import dataclasses
    import time

    import numpy as np

    from perfdiff.ranks.part import load_part
    from perfdiff.analyze.thresholds import Thresholds
    from perfdiff.ranks.pipeline import analyze_parts
    from perfdiff.ranks.records import RankPair

    tasks_n, tasks_a, plan = _tasks_and_plan(str(normal), str(abnormal), own_workers=False)
    loaded = [[load_part(t, plan) for t in side] for side in (tasks_n, tasks_a)]
    rng = np.random.default_rng(0)

    def widen(p, rank: int):
        extra = max(0, functions - len(p.names))
        own = np.vstack([p.own_ns, rng.gamma(4.0, 25_000.0, size=(extra, len(p.dur_ns)))])  # ~100 µs a cycle
        return dataclasses.replace(p, input=dataclasses.replace(p.input, rank=rank), own_ns=own,
                                   names=p.names + [f"noise_kernel_{i}" for i in range(extra)],
                                   kinds=p.kinds + ["kernel"] * extra)

    parts = [[widen(side[r % len(side)], r) for r in range(ranks)] for side in loaded]
    rank_pairs = [RankPair(r, parts[0][r].input, parts[1][r].input) for r in range(ranks)]
    walls = []
    for _ in range(repeat):
        t = time.perf_counter()
        res = analyze_parts(parts[0], parts[1], plan, thresholds=Thresholds(), notices=[], worlds=(ranks, ranks),
                            workers=1, pairs=rank_pairs)
        walls.append(time.perf_counter() - t)
    s = res.stragglers[1]
    named = f"rank {s.culprit}" if s.culprit is not None else s.code.value
    return (f"| {ranks} × 2 | {len(parts[0][0].names)} | {len(parts[0][0].dur_ns)} | {median(walls):.2f} | "
            f"{' / '.join(f'{w:.2f}' for w in walls)} | {named} |")


def gen(fmt: str, ranks: int, kernels: int, steps: int) -> tuple[Path, Path]:
    folder = OUT / f"ranks_{fmt}_{ranks}x{kernels}"
    n, a = folder / "normal", folder / "abnormal"
    if not (n.is_dir() and a.is_dir() and len(list(a.iterdir())) == (1 if fmt == "nsys-one" else ranks)):
        subprocess.run([PY, str(HERE / "gen_ranks.py"), str(folder), "--ranks", str(ranks), "--kernels", str(kernels),
                        "--steps", str(steps), "--format", fmt, "--straggler", str(STRAGGLER % ranks)], check=True)
    return n, a


def at_scale(scale: int, base: int, kernels: int, steps: int) -> list[str]:
    """Rows of the whole command on a `base`-rank and a `scale`-rank nsys pair, as a user runs it."""
    rows = []
    per_base: tuple[float, float] | None = None
    for ranks in (base, scale):
        n, a = gen("nsys", ranks, kernels, steps)
        stem = OUT / f"ranks_scale_{ranks}"
        wall, rss, _, tree, driver = measure_watched([PY, "-m", "perfdiff", "compare", str(n), str(a), "--no-plots",
                                                      "-o", f"{stem}.md", "--json", f"{stem}.json"], own=True)
        doc = json.loads(Path(f"{stem}.json").read_text())
        s = doc["stragglers"][1]
        named = f"rank {s['culprit']} ({s['excess']})" if s["culprit"] is not None else s["code"]
        tasks = sum(p["wall_s"] for p in doc["phases"] if p["name"] in ("ranks", "ranks again"))
        per = (wall / ranks, tasks / ranks)
        per_base = per_base or per
        rows.append(f"| {ranks:,} × 2 | {kernels:,} | {doc['workers']} | {wall:.1f} | {per[0] * 1e3:.0f} | "
                    f"{per[0] / per_base[0]:.2f} | {per[1] * 1e3:.0f} | {per[1] / per_base[1]:.2f} | {rss:,.0f} | "
                    f"{driver:,.0f} | {tree:,.0f} | {named} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=100_000, help="kernels per rank and run")
    ap.add_argument("--formats", default="kineto,nsys", help="kineto, nsys, nsys-one; none: only --analysis")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeat", type=int, default=3, help="alternating rounds (medians are reported)")
    ap.add_argument("--quick", action="store_true", help="8 ranks of 10,000 kernels, one round")
    ap.add_argument("--no-plain", dest="plain", action="store_false",
                    help="leave out the plain-process reference (no fan-out of perfdiff's)")
    ap.add_argument("--analysis", default="1024x100", metavar="RANKSxFUNCTIONS",
                    help="the driver's analysis at scale from the nsys pair's parts; 'none': leave it out")
    ap.add_argument("--scale", type=int, default=1024, metavar="RANKS",
                    help="the whole command on a RANKS-rank nsys pair, beside --ranks; 0: leave it out")
    ap.add_argument("--plain-run", nargs=3, metavar=("NORMAL", "ABNORMAL", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_run:
        plain_run(args.plain_run[0], args.plain_run[1], int(args.plain_run[2]))
        return 0
    byte_compile()
    ranks, kernels = (8, 10_000) if args.quick else (args.ranks, args.kernels)
    repeat = 1 if args.quick else max(1, args.repeat)
    steps = max(20, min(100, kernels // 1000))
    counts = [int(x) for x in args.workers.split(",")]
    OUT.mkdir(exist_ok=True)
    formats = [f for f in args.formats.split(",") if f and f != "none"]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", end="\n\n")
    if formats:
        print(f"Median of {repeat} alternating round(s). Fixed: the wall time outside the fan-out of the rank "
              "tasks.", end="\n\n")
        print("| format | ranks × runs | kernels per rank | workers | wall (s) | rank tasks (s) | fixed (s) "
              "| task, mean (ms) | workers busy | peak RSS, largest process (MiB) "
              "| peak memory, all processes (PSS, MiB) | speed-up vs 1 worker | each round | rank tasks' speed-up "
              "| straggler named |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    plain_rows = []
    for fmt in formats:
        n, a = gen(fmt, ranks, kernels, steps)
        extra = []
        if fmt == "nsys-one":  # one export holding every rank: its processes are the ranks
            n, a, extra = n / "report.sqlite", a / "report.sqlite", ["--ranks", "all"]
        runs: dict[int, list[tuple[float, float, float, float, float]]] = {w: [] for w in counts}
        plain: dict[int, list[dict]] = {w: [] for w in counts}
        named = ""
        for _ in range(repeat):
            for w in counts:
                if args.plain and fmt != "nsys-one":
                    out = subprocess.run([PY, __file__, "--plain-run", str(n), str(a), str(w)], check=True,
                                         capture_output=True, text=True).stdout
                    plain[w].append(json.loads(out.strip().splitlines()[-1]))
                js = OUT / f"ranks_{fmt}_{w}.json"
                cmd = _command(n, a, w, fmt, extra)
                wall, rss, _, tree = measure(cmd, pss=False)
                doc = json.loads(js.read_text())
                # The fan-outs of rank tasks: "ranks", and "ranks again" where the ranks were re-cut.
                fanned = [p for p in doc["phases"] if p["name"] in ("ranks", "ranks again")]
                task_wall, task_work = sum(p["wall_s"] for p in fanned), sum(p["work_s"] for p in fanned)
                runs[w].append((wall, task_wall, rss, tree, task_work / sum(p["tasks"] for p in fanned)))
                s = doc["stragglers"][1]
                named = f"rank {s['culprit']} ({s['excess']})" if s["culprit"] is not None else s["code"]
        memory = {w: measure(_command(n, a, w, fmt, extra))[3] for w in counts}  # the whole tree, polled
        base = runs[counts[0]]
        for w in counts:
            r = runs[w]
            wall, tasks = median([x[0] for x in r]), median([x[1] for x in r])
            speed = median([b[0] / x[0] for b, x in zip(base, r, strict=True)])
            speed_tasks = median([b[1] / x[1] for b, x in zip(base, r, strict=True)])
            task_ms = median([x[4] for x in r]) * 1e3
            busy = median([x[4] * 2 * ranks / (x[1] * w) for x in r])
            print(f"| {fmt} | {ranks} × 2 | {kernels:,} | {w} | {wall:.1f} | {tasks:.1f} | {wall - tasks:.1f} | "
                  f"{task_ms:.0f} | {busy:.0%} | {max(x[2] for x in r):,.0f} | {memory[w]:,.0f} | "
                  f"{speed:.2f}× | {' / '.join(f'{b[0] / x[0]:.2f}' for b, x in zip(base, r, strict=True))} | "
                  f"{speed_tasks:.2f}× | {named} |")
        if plain[counts[0]]:
            for w in counts:
                pr = plain[w]
                speed = median([b["wall_s"] / x["wall_s"] for b, x in zip(plain[counts[0]], pr, strict=True)])
                plain_rows.append(f"| {fmt} | {w} | {median([x['wall_s'] for x in pr]):.1f} | "
                                  f"{median([x['work_s'] / x['tasks'] for x in pr]) * 1e3:.0f} | {speed:.2f}× |")
    if plain_rows:
        print("\nThe same rank tasks in plain processes (no fan-out of perfdiff's): the machine's own scaling on this work.\n")
        print("| format | processes | rank tasks (s) | task, mean (ms) | speed-up vs 1 process |")
        print("|---|---|---|---|---|")
        print("\n".join(plain_rows))
    # Before the driver's analysis below, which this process runs: a command started after it
    # would report this process's size as its own peak (a fork holds its parent's pages until exec).
    if args.scale and not args.quick:
        print(f"\nThe whole command at {args.scale:,} ranks, once, on the local workers as a user runs it (one "
              f"worker a core), beside {ranks} ranks: seconds per rank pair against the {ranks}-rank run's "
              "(≤ 1: time grows at most linearly); the driver is the command's own process.\n")
        print("| ranks × runs | kernels per rank | workers | wall (s) | per rank pair (ms) | per rank pair vs the first "
              "| rank tasks per rank pair (ms) | … vs the first | peak RSS, largest process (MiB) "
              "| driver's peak RSS (MiB) | all processes (PSS, MiB) | straggler named |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(at_scale(args.scale, ranks, kernels, steps)))
    if args.analysis != "none" and not args.quick:
        at_ranks, at_functions = (int(x) for x in args.analysis.lower().split("x"))
        n, a = gen("nsys", ranks, kernels, steps)
        print(f"\nThe driver's analysis of what the workers return, at {at_ranks:,} ranks ({ranks} generated nsys "
              "ranks' parts copied, widened with noise kernels), in this process.\n")
        print("| ranks × runs | functions per rank | cycles | analysis (s) | each run | straggler named |")
        print("|---|---|---|---|---|---|")
        print(analysis_at_scale(n, a, at_ranks, at_functions, repeat))
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
