"""A seeded simulator of serving engine steps whose truth is known (docs/STATISTICS.md,
"Dependent cycles"): the cycles of one run are *not* independent, as in a real server.

- Step kinds: a two-state Markov chain of decode and prefill steps; prefill steps make
  `prefill_share` of the steps in the long run and come in bursts of `mean_burst` steps on
  average (the chain leaves prefill with probability 1/mean_burst).  A prefill step runs a
  kernel of its own and its GEMM and attention take `prefill_factor` times longer.
- Batch size: log batch follows an AR(1) with coefficient `batch_phi` (drift), around 32.
- Host signals on 10 ms ticks (`iowait`): each tick's iowait time is drawn from an AR(1)
  level, and a tick spans many steps, so the per-step share of it is smooth in time.
- `slow`: function name → factor on its time (a planted regression).

Each step is one perfdiff marker range; the step_* samples record its load, as the
framework adapters do.  `serving_run` builds a RunData in memory; `analyse_pair` runs the
pipeline on two of them (plan, cycles, attribution, compare, findings, verdict) and
`names_cause` reads whether the verdict named a cause.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfdiff.analyze.compare import compare_runs
from perfdiff.analyze.findings import build_findings
from perfdiff.analyze.load import cycle_load
from perfdiff.analyze.verdict import VerdictCode, build_verdict
from perfdiff.attribute import attribute_activity
from perfdiff.bundle import RunData, base_manifest
from perfdiff.cycles import cut_cycles, plan_pair, summarize_cycles
from perfdiff.model.tables import normalize_table

T0_NS = 1_000_000_000
TICK_NS = 10_000_000
GAP_NS = 2_000
GEMM = "sm90_xmma_gemm_bf16_128x128"
# (name, kind, device, µs fixed, µs per request, × on prefill steps; 0: decode only, None: prefill only)
WORK = (("scheduler::get_next_batch_to_run", "cpu", "Host", 60.0, 0.8, 1.5),
        (GEMM, "kernel", "GPU 0", 300.0, 6.0, 3.0),
        ("flash_attn_decode", "kernel", "GPU 0", 80.0, 2.0, 0.0),
        ("flash_attn_prefill", "kernel", "GPU 0", 250.0, 4.0, None),
        ("sampler", "kernel", "GPU 0", 40.0, 0.3, 1.0))


def step_kinds(rng: np.random.Generator, steps: int, share: float, mean_burst: float) -> np.ndarray:
    """Whether each step is a prefill step: the two-state Markov chain, started stationary."""
    if share <= 0:
        return np.zeros(steps, bool)
    leave = 1.0 / mean_burst  # prefill → decode
    enter = share * leave / (1.0 - share)  # decode → prefill: the stationary share is `share`
    u = rng.random(steps)
    out = np.empty(steps, bool)
    s = u[0] < share
    for i in range(steps):
        if i:
            s = (u[i] >= leave) if s else (u[i] < enter)
        out[i] = s
    return out


def ar1(rng: np.random.Generator, steps: int, phi: float, sd: float) -> np.ndarray:
    """A stationary AR(1) series of marginal standard deviation `sd`."""
    e = rng.standard_normal(steps) * sd * np.sqrt(1.0 - phi * phi)
    x = np.empty(steps)
    x[0] = rng.standard_normal() * sd
    for i in range(1, steps):
        x[i] = phi * x[i - 1] + e[i]
    return x


def serving_run(seed: int, *, steps: int = 300, prefill_share: float = 0.10, mean_burst: float = 10.0,
                prefill_factor: float = 3.0, batch_phi: float = 0.0, batch_sd: float = 0.15,
                iowait: bool = False, iowait_phi: float = 0.5, noise: float = 0.05, load_samples: bool = False,
                slow: dict[str, float] | None = None) -> RunData:
    """One run of `steps` engine steps (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    prefill = step_kinds(rng, steps, prefill_share, mean_burst)
    batch = 32.0 * np.exp(ar1(rng, steps, batch_phi, batch_sd) if batch_phi > 0
                          else batch_sd * rng.standard_normal(steps))
    requests = np.round(batch)
    prefill_tokens = np.where(prefill, np.round(rng.uniform(256, 1024, steps)), 0.0)
    scale = slow or {}
    durs = []
    for name, _, _, fixed, per, factor in WORK:
        kind_factor = (np.where(prefill, 1.0, 0.0) if factor is None
                       else np.where(prefill, factor, 1.0) if factor else np.where(prefill, 0.0, 1.0))
        us = (fixed + per * requests) * kind_factor * scale.get(name, 1.0) * rng.lognormal(0.0, noise, steps)
        durs.append((us * 1e3).astype(np.int64))
    step_len = sum(durs) + GAP_NS * (len(WORK) + 1)
    start = T0_NS + np.concatenate([[0], np.cumsum(step_len)[:-1]])
    end = start + step_len
    acts, t = [], start + GAP_NS
    for (name, kind, device, *_), d in zip(WORK, durs, strict=True):
        ran = d > 0
        acts.append(pd.DataFrame({"function": name, "kind": kind, "device": device, "start_ns": t[ran],
                                  "end_ns": (t + d)[ran], "busy_ns": d[ran],
                                  "launch_ns": (t - 500)[ran] if kind == "kernel" else -1}))
        t = t + d + GAP_NS
    if iowait:
        tick0 = np.arange(T0_NS, int(end[-1]), TICK_NS, dtype=np.int64)
        tick1 = np.minimum(tick0 + TICK_NS, int(end[-1]))
        level = 0.02 * np.exp(ar1(rng, len(tick0), iowait_phi, 0.5))  # share of the tick in iowait
        acts.append(pd.DataFrame({"function": "iowait", "kind": "host", "device": "Host", "start_ns": tick0,
                                  "end_ns": tick1, "busy_ns": ((tick1 - tick0) * np.minimum(level, 0.5)).astype(np.int64),
                                  "launch_ns": -1}))
    markers = pd.DataFrame({"name": "EngineCore.step", "start_ns": start, "end_ns": end, "tid": 1,
                            "source": "perfdiff"})
    samples = pd.concat([pd.DataFrame({"metric": m, "device": "Host", "t_start_ns": start, "t_end_ns": end, "value": v})
                         for m, v in (("step_requests", requests), ("step_tokens", requests + prefill_tokens),
                                      ("step_prefill_tokens", prefill_tokens), ("step_decode_tokens", requests))],
                        ignore_index=True)
    if not load_samples:  # a run without the framework adapters: no step load recorded
        samples = samples.iloc[:0]
    manifest = base_manifest(run_name=f"serve{seed}", created_ns=T0_NS,
                             source={"kind": "synthetic", "generator": "tests/serving_sim.py", "seed": seed})
    return RunData(manifest, normalize_table("activity", pd.concat(acts, ignore_index=True)),
                   normalize_table("samples", samples), normalize_table("markers", markers), path=f"serve{seed}")


def analyse_pair(normal: RunData, abnormal: RunData):
    """(Analysis, findings, verdict) of a pair, as perfdiff.compare makes them from bundles."""
    plan = plan_pair(summarize_cycles(normal), summarize_cycles(abnormal))
    cn, ca = cut_cycles(normal, plan), cut_cycles(abnormal, plan)
    c = compare_runs(normal, abnormal, cn, ca, plan=plan,
                     matrices=(attribute_activity(normal, cn), attribute_activity(abnormal, ca)),
                     loads=(cycle_load(normal, cn), cycle_load(abnormal, ca)))
    findings = build_findings(c)
    return c, findings, build_verdict(c, findings)


QUIET = (VerdictCode.NO_MATERIAL, VerdictCode.LOAD, VerdictCode.MIX)


def names_cause(verdict) -> bool:
    """Whether a verdict names a cause: any class but "no material change", "load change" and
    "mix change"."""
    return any(v.code not in QUIET for v in verdict)


def mix_reported(findings) -> bool:
    """Whether the findings report a change of the mix of steps."""
    from perfdiff.analyze import FindingCode

    return any(f.code == FindingCode.MIX_CHANGE for f in findings)


def first_cause(findings) -> str | None:
    """The function the first CAUSE finding names (None: none)."""
    from perfdiff.analyze import FindingCode

    return next((f.function for f in findings if f.code == FindingCode.CAUSE), None)
