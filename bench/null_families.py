#!/usr/bin/env python3
"""Null families and power of the per-function tests under dependent cycles (docs/STATISTICS.md,
"Dependent cycles"): pairs of seeded serving runs (tests/serving_sim.py) with nothing changed,
and with a slower GEMM, each analysed as `perfdiff compare` does.

Prints one Markdown row per family: the pairs whose verdict named a cause (null families),
whose first cause is the planted GEMM (power), or that report the planted change of the mix of
steps as a `mix-change` finding (mix), with the exact (Clopper–Pearson) 95 % interval; how many
of them the verdict marks † (too few cycles to check their dependence); and how many pairs
named a cause (mix families: a cause named there is a false one).

    .venv/bin/python bench/null_families.py --pairs 100
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serving_sim import GEMM, analyse_pair, first_cause, mix_reported, names_cause, serving_run  # noqa: E402

# name → (what it is, serving_run's keywords, planted slowdown or None[, the abnormal run's keywords
# where its mix of steps differs])
FAMILIES: dict[str, tuple] = {
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
    "mix-10-20%": ("prefill 10 % → 20 %, mean burst 10, 300 steps", dict(prefill_share=0.10, mean_burst=10.0),
                   None, dict(prefill_share=0.20)),
    "mix-10-20%-1000": ("prefill 10 % → 20 %, mean burst 10, 1,000 steps",
                        dict(prefill_share=0.10, mean_burst=10.0, steps=1000), None, dict(prefill_share=0.20)),
    "mix-10-20%-3000": ("prefill 10 % → 20 %, mean burst 10, 3,000 steps",
                        dict(prefill_share=0.10, mean_burst=10.0, steps=3000), None, dict(prefill_share=0.20)),
    "mix-10-20%-10000": ("prefill 10 % → 20 %, mean burst 10, 10,000 steps",
                         dict(prefill_share=0.10, mean_burst=10.0, steps=10_000), None, dict(prefill_share=0.20)),
    "mix-10-20%-indep": ("prefill 10 % → 20 %, steps independent, 300 steps",
                         dict(prefill_share=0.10, mean_burst=1.0 / 0.9), None,
                         dict(prefill_share=0.20, mean_burst=1.0 / 0.8)),
}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion k/n."""
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, a))
    hi = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1.0 - a))
    return lo, hi


def is_mix(name: str) -> bool:
    """A family whose abnormal run carries another mix of steps (its hits: a mix-change finding)."""
    return len(FAMILIES[name]) > 3


class FamilyResult(NamedTuple):
    """A family's pairs: `hits` (null family: pairs naming a cause; power: pairs whose first
    cause is the GEMM; mix: pairs with a mix-change finding), what the named causes were (null
    and mix families), the hits whose verdict is marked † (too few cycles to check their
    dependence), the pairs that named a cause and those that reported a change of mix."""

    hits: int
    pairs: int
    named: list[str]
    flagged: int
    loud: int
    mixed: int


def run_family(name: str, pairs: int, seed0: int = 0) -> FamilyResult:
    """The family's `pairs` seeded pairs, analysed as `perfdiff compare` does."""
    _, kw, slow, *mix = FAMILIES[name]
    kw_a = {**kw, **mix[0]} if mix else kw
    hits, named, flagged, loud_pairs, mixed = 0, [], 0, 0, 0
    for k in range(pairs):
        base = 100_000 * (1 + list(FAMILIES).index(name)) + 2 * (seed0 + k)
        _, findings, verdict = analyse_pair(serving_run(base, **kw), serving_run(base + 1, **kw_a, slow=slow))
        loud, reported = names_cause(verdict), mix_reported(findings)
        loud_pairs, mixed = loud_pairs + loud, mixed + reported
        if loud and slow is None:
            named.append(first_cause(findings) or str(verdict[0].code))
        hit = first_cause(findings) == GEMM if slow is not None else reported if mix else loud
        hits += hit
        flagged += hit and any(v.dependence_unchecked for v in verdict)
    return FamilyResult(hits, pairs, named, flagged, loud_pairs, mixed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated names")
    args = ap.parse_args(argv)
    print("| family | what | pairs | named a cause (null) / GEMM found first (power) / mix-change reported (mix) "
          "| 95 % CI | of them † | pairs naming a cause | pairs reporting a mix change | s |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|")
    for name in args.families.split(","):
        t0 = time.perf_counter()
        r = run_family(name, args.pairs)
        lo, hi = clopper_pearson(r.hits, r.pairs)
        print(f"| {name} | {FAMILIES[name][0]} | {r.pairs} | {r.hits} ({100 * r.hits / r.pairs:.1f} %) | "
              f"{100 * lo:.1f}–{100 * hi:.1f} % | {r.flagged} | {r.loud} | {r.mixed} | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)
        if r.named:
            print(f"<!-- {name}: {sorted(set(r.named))} -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
