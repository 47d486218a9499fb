#!/usr/bin/env python3
"""Null families and power of the per-function tests under dependent cycles (docs/STATISTICS.md,
"Dependent cycles"): pairs of seeded serving runs (tests/serving_sim.py) with nothing changed,
and with a slower GEMM, each analysed as `perfdiff compare` does.

Prints one Markdown row per family: the pairs whose verdict named a cause (null families), or
whose first cause is the planted GEMM (power), with the exact (Clopper–Pearson) 95 % interval,
and how many of them the verdict marks † (too few cycles to check their dependence).

    .venv/bin/python bench/null_families.py --pairs 100
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serving_sim import GEMM, analyse_pair, first_cause, names_cause, serving_run  # noqa: E402

# name → (what it is, serving_run's keywords, planted slowdown or None)
FAMILIES: dict[str, tuple[str, dict, dict | None]] = {
    "burst-15%-8": ("prefill 15 %, mean burst 8, 300 steps", dict(prefill_share=0.15, mean_burst=8.0), None),
    "burst-10%-10": ("prefill 10 %, mean burst 10, 300 steps", dict(prefill_share=0.10, mean_burst=10.0), None),
    "burst-5%-3": ("prefill 5 %, mean burst 3, 300 steps", dict(prefill_share=0.05, mean_burst=3.0), None),
    "burst-20%-15": ("prefill 20 %, mean burst 15, 300 steps", dict(prefill_share=0.20, mean_burst=15.0), None),
    "few-cycles": ("prefill 10 %, mean burst 5, 60 steps", dict(prefill_share=0.10, mean_burst=5.0, steps=60), None),
    "16-cycles": ("prefill 10 %, mean burst 5, 16 steps (too few to check)", dict(prefill_share=0.10, mean_burst=5.0,
                                                                               steps=16), None),
    "batch-ar1": ("batch AR(1) φ = 0.8, prefill 5 %, burst 3", dict(prefill_share=0.05, mean_burst=3.0,
                                                                   batch_phi=0.8, batch_sd=0.3), None),
    "batch-ar1-0.95": ("batch AR(1) φ = 0.95 (~40 steps), prefill 5 %, burst 3",
                       dict(prefill_share=0.05, mean_burst=3.0, batch_phi=0.95, batch_sd=0.3), None),
    "iowait-ticks": ("iowait on 10 ms ticks, prefill 10 %, burst 10", dict(prefill_share=0.10, mean_burst=10.0,
                                                                          iowait=True), None),
    "iowait-persistent": ("iowait on 10 ms ticks, its level AR(1) φ = 0.9 per tick (~100 ms)",
                          dict(prefill_share=0.10, mean_burst=10.0, iowait=True, iowait_phi=0.9), None),
    "burst+load": ("prefill 10 %, burst 10, the step load recorded", dict(prefill_share=0.10, mean_burst=10.0,
                                                                           load_samples=True), None),
    "independent": ("prefill 10 %, steps independent (control)", dict(prefill_share=0.10, mean_burst=1.0 / 0.9),
                    None),
    "gemm+20%": ("GEMM 20 % slower, prefill 10 %, burst 10", dict(prefill_share=0.10, mean_burst=10.0),
                 {GEMM: 1.2}),
    "gemm+10%": ("GEMM 10 % slower, prefill 10 %, burst 10", dict(prefill_share=0.10, mean_burst=10.0),
                 {GEMM: 1.1}),
    "gemm+20%+load": ("as gemm+20%, the step load recorded", dict(prefill_share=0.10, mean_burst=10.0,
                                                                 load_samples=True), {GEMM: 1.2}),
    "gemm+10%+load": ("as gemm+10%, the step load recorded", dict(prefill_share=0.10, mean_burst=10.0,
                                                                 load_samples=True), {GEMM: 1.1}),
}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion k/n."""
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, a))
    hi = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1.0 - a))
    return lo, hi


def run_family(name: str, pairs: int, seed0: int = 0) -> tuple[int, int, list[str], int]:
    """(hits, pairs, what the hits named, hits whose verdict is marked † for too few cycles):
    null family → pairs naming a cause; power → pairs whose first cause is the GEMM."""
    _, kw, slow = FAMILIES[name]
    hits, named, flagged = 0, [], 0
    for k in range(pairs):
        base = 100_000 * (1 + list(FAMILIES).index(name)) + 2 * (seed0 + k)
        c, findings, verdict = analyse_pair(serving_run(base, **kw), serving_run(base + 1, **kw, slow=slow))
        if slow is None:
            loud = names_cause(verdict)
            if loud:
                named.append(first_cause(findings) or str(verdict[0].code))
        else:
            loud = first_cause(findings) == GEMM
        hits += loud
        flagged += loud and any(v.dependence_unchecked for v in verdict)
    return hits, pairs, named, flagged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated names")
    args = ap.parse_args(argv)
    print("| family | what | pairs | named a cause (null) / GEMM found first (power) | 95 % CI | of them † | s |")
    print("|---|---|---:|---:|---|---:|---:|")
    for name in args.families.split(","):
        t0 = time.perf_counter()
        hits, n, named, flagged = run_family(name, args.pairs)
        lo, hi = clopper_pearson(hits, n)
        print(f"| {name} | {FAMILIES[name][0]} | {n} | {hits} ({100 * hits / n:.1f} %) | "
              f"{100 * lo:.1f}–{100 * hi:.1f} % | {flagged} | {time.perf_counter() - t0:.0f} |", flush=True)
        if named:
            print(f"<!-- {name}: {sorted(set(named))} -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
