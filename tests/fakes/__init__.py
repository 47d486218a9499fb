"""Fakes for tests without hardware: a fake NVML (fake_nvml) and run-bundle pairs built on it.

`make_scenario_bundle("power_cap" | "competing_process", out_dir, seed)` writes a normal and an
abnormal bundle through perfdiff.bundle.write_bundle.  The GPU samples come from the real
NVML sampler (collectors/gpu/) reading the fake driver tick by tick; the kernels and cycle
markers are synthesised so that their durations follow what the fake GPU does (clocks capped,
or the GPU shared with another process), as a real workload's would.
"""
from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd

from .fake_nvml import (GIB, OTHER_PID, TARGET_PID, T0_NS, Change, FakeProc, make_scenario)

BUNDLE_SCENARIOS = ("power_cap", "power_cap_idle", "competing_process")
INTERVAL_NS = 100_000_000  # the sampler's tick
JITTER_EVERY_NS = 500_000_000  # how often the fake GPU's readings wander a little

# The kernels of one cycle of a decode-like loop: (name, kind, base µs, how it slows down).
# "compute" kernels scale with the SM clock; "memory" ones barely do.
KERNELS = (
    ("ampere_bf16_s16816gemm_relu_256x128_32x3_nn", "kernel", 22_000.0, "compute"),
    ("flash_fwd_kernel", "kernel", 9_000.0, "compute"),
    ("rms_norm_kernel", "kernel", 1_200.0, "memory"),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy", 400.0, "memory"),
)
GAP_US = 750.0  # host time between two launches


def _phase(scenario: str, abnormal: bool, after: bool) -> dict[str, Any]:
    """The fake GPU's nominal readings in each phase (before/after half-way)."""
    hit = abnormal and after
    if scenario in ("power_cap", "power_cap_idle"):
        return {"sm_clock_mhz": 1350 if hit else 1980, "power_w": 348.0 if hit else 640.0,
                "temperature_c": 55 if hit else 68, "target_sm": 92, "other_sm": None}
    return {"sm_clock_mhz": 1410, "power_w": 330.0 if hit else 310.0, "temperature_c": 64 if hit else 62,
            "target_sm": 50 if hit else 90, "other_sm": 45 if hit else None}


def _jitter(scenario: str, abnormal: bool, duration_ns: int, rng: np.random.Generator) -> list[Change]:
    """Small phase-aware wander of clocks, power, temperature and process shares."""
    changes = []
    half = duration_ns // 2
    for at in range(JITTER_EVERY_NS // 2, duration_ns, JITTER_EVERY_NS):
        p = _phase(scenario, abnormal, at >= half)
        load: dict[str, Any] = {
            "sm_clock_mhz": int(p["sm_clock_mhz"] + rng.integers(-15, 16)),
            "power_w": float(p["power_w"] + rng.normal(0, 4.0)),
            "temperature_c": int(p["temperature_c"] + rng.integers(-1, 2)),
        }
        if scenario == "competing_process":
            procs = [FakeProc(TARGET_PID, 60 * GIB, int(np.clip(p["target_sm"] + rng.integers(-3, 4), 1, 100)), 35)]
            if p["other_sm"] is not None:
                procs.append(FakeProc(OTHER_PID, 10 * GIB, int(p["other_sm"] + rng.integers(-3, 4)), 25))
            load["procs"] = tuple(procs)
        changes.append(Change(at, 0, load=load))
    return changes


def _slowdown(scenario: str, abnormal: bool, after: bool, how: str) -> float:
    """How much longer a kernel takes than in the normal run, in this phase."""
    if not (abnormal and after):
        return 1.0
    if scenario == "power_cap_idle":
        return 1.0  # the loop waits on the host: the capped clock costs it nothing
    if scenario == "power_cap":
        return 1980.0 / 1350.0 if how == "compute" else 1.05  # SM clock ratio
    return 90.0 / 50.0  # time-sliced with the other process


def _activity(scenario: str, abnormal: bool, t0: int, duration_ns: int,
              rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kernels of back-to-back cycles, and one "step" marker per cycle."""
    half = t0 + duration_ns // 2
    end = t0 + duration_ns - 50_000_000
    rows: dict[str, list[Any]] = {k: [] for k in ("function", "kind", "start_ns", "end_ns", "launch_ns", "correlation")}
    marks: dict[str, list[Any]] = {"start_ns": [], "end_ns": []}
    t = t0 + 50_000_000
    corr = 0
    # One iteration per cycle (a few hundred): the cycle start depends on the previous one.
    while t < end:
        c_start = t
        noise = rng.lognormal(0.0, 0.03, len(KERNELS))
        for (name, kind, base_us, how), z in zip(KERNELS, noise, strict=True):
            dur = int(base_us * 1000 * z * _slowdown(scenario, abnormal, t >= half, how))
            launch = t
            t += int(GAP_US * 1000)
            corr += 1
            for key, val in (("function", name), ("kind", kind), ("start_ns", t), ("end_ns", t + dur),
                             ("launch_ns", launch), ("correlation", corr)):
                rows[key].append(val)
            t += dur
        marks["start_ns"].append(c_start)
        marks["end_ns"].append(t)
    act = pd.DataFrame(rows)
    act["device"] = "GPU 0"
    act["busy_ns"] = act["end_ns"] - act["start_ns"]
    act["stream"] = 7
    act["tid"] = TARGET_PID
    mk = pd.DataFrame(marks)
    mk["name"] = "step"
    mk["tid"] = TARGET_PID
    mk["source"] = "perfdiff"
    return act, mk


def _samples(scenario: str, abnormal: bool, t0: int, duration_ns: int,
             rng: np.random.Generator) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Run the NVML sampler over the fake GPU for the whole run; (samples, manifest fragment).

    Simulated time only: the fake's clock stands still within a tick and the sampler's
    monotonic clock is frozen, so every call is stamped at the tick and the bundle does not
    depend on this machine's speed (call latencies read 0).
    """
    from perfdiff.collectors import gpu
    from perfdiff.collectors.gpu import context, nvml_query

    sc = make_scenario("power_cap" if scenario == "power_cap_idle" else scenario, abnormal=abnormal, duration_ns=duration_ns, t0_ns=t0,
                       changes=_jitter(scenario, abnormal, duration_ns, rng))
    sc.fake.follow_real_time = False
    frozen = types.SimpleNamespace(perf_counter_ns=lambda: 0, time_ns=lambda: t0)
    with tempfile.TemporaryDirectory(prefix="perfdiff-proc-") as tmp, \
            mock.patch.object(context, "time", frozen), mock.patch.object(nvml_query, "time", frozen):
        root = sc.write_proc(tmp)
        sampler = gpu.open_gpu_sampler(lambda: sc.target_pids, gpus=None, interval_ns=INTERVAL_NS,
                                       nvml=sc.nvml, proc_root=root)
        assert sampler is not None
        sampler.start(t0)
        frames = []
        for t in range(t0 + INTERVAL_NS, t0 + duration_ns + 1, INTERVAL_NS):
            sc.fake.set_time(t)
            frames.append(sampler.sample(t)["samples"])
        frag = sampler.manifest()
        sampler.close()
    return pd.concat(frames, ignore_index=True), frag


def make_scenario_bundle(scenario: str, out_dir: str | os.PathLike[str], seed: int = 0, *,
                         duration_s: float = 30.0) -> tuple[Path, Path]:
    """Write `out_dir`/normal and `out_dir`/abnormal bundles for a fake-GPU scenario.

    power_cap: the abnormal run's power limit drops 700 → 350 W half-way (SW power cap, SM
    clock 1980 → 1350 MHz), so compute-bound kernels take 1980/1350 × longer from then on.
    power_cap_idle: the same cap, on a loop whose kernels it does not slow (the time goes to
    the host between launches).
    competing_process: half-way through the abnormal run pid 5555 ("gpu_burn") starts on the
    same GPU; the target's share of the GPU falls 90 → 50 % and its kernels take 1.8 × longer.
    Same `seed` → same bundles.  Returns (normal, abnormal) paths.
    """
    if scenario not in BUNDLE_SCENARIOS:
        raise KeyError(f"no bundle pair for {scenario!r}; known: {', '.join(BUNDLE_SCENARIOS)}")
    from perfdiff.bundle import RunData, base_manifest, write_bundle

    out = Path(out_dir)
    duration_ns = int(duration_s * 1e9)
    paths = []
    for k, abnormal in enumerate((False, True)):
        label = "abnormal" if abnormal else "normal"
        t0 = T0_NS + k * 3_600_000_000_000  # the abnormal run an hour later
        rng = np.random.default_rng([seed, k])
        samples, frag = _samples(scenario, abnormal, t0, duration_ns, rng)
        activity, markers = _activity(scenario, abnormal, t0, duration_ns, rng)
        manifest = base_manifest(
            run_name=label,
            created_ns=t0 + duration_ns,
            source={"kind": "collect", "fake_nvml_scenario": scenario, "seed": seed},
            target={"pid": TARGET_PID, "cmdline": ["python3", "serve.py"], "mode": "pid"},
            host={"cpu_model": "fake CPU", "cores": 32, "kernel": "6.8.0"},
            gpus=[g for g in frag["gpus"] if g.get("sampled")],
            collectors=[{"name": "collect", "interval_ns": INTERVAL_NS}, frag["collector"]],
            unsupported=frag["unsupported"],
            events=frag["events"],
        )
        run = RunData(manifest=manifest, activity=activity, samples=samples, markers=markers)
        paths.append(write_bundle(out / label, run))
    return paths[0], paths[1]
