"""Check perfdiff's collectors on a real GPU (an H100/H200 with PyTorch, NVML and CUPTI; no
network needed): `make gpu-check`, under 8 minutes.

    python tools/gpu_check.py [--out DIR] [--steps N] [--keep]

1. A small PyTorch CUDA training loop (an MLP, AdamW, bf16 matmuls) runs four times:
   normally and with a real fault — a second process saturating the same GPU with matmuls —
   each under ``perfdiff collect`` (NVML sampling and the CUPTI agent) and under
   ``torch.profiler`` (a Chrome trace).
2. Both pairs are compared (``perfdiff.compare``); what each collector recorded (rows per
   table, kernels, metrics, warnings) and the verdicts are printed.  The perfdiff pair must
   name the other process on the GPU (verdict ``other-process``), the profiler pair must show
   the slower cycle.
3. A forked child (as vLLM used as a library forks its engine core): a parent that never
   touches CUDA forks a child running matmuls, under ``perfdiff collect``; the child's kernels
   must be in the bundle (the agent re-arms after fork) and the child must run (CUPTI in the
   parent must not break CUDA in the child).
4. The agent's overhead on the loop: the loop's own step times, plain and under ``collect``,
   interleaved; the median must grow less than 3 %.

Without a GPU — PyTorch missing, ``torch.cuda.is_available()`` false, or NVML (pynvml) missing
or not initialising — it says so in one line and exits 0.  Exit status 1 when a check failed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

OVERHEAD_LIMIT = 0.03
BUDGET_S = 8 * 60

TRAIN = textwrap.dedent('''
    """A small CUDA training loop; writes its per-step times (s) as JSON to argv[1]."""
    import json, sys, time
    import torch

    out, steps = sys.argv[1], int(sys.argv[2])
    profile = sys.argv[3] if len(sys.argv) > 3 else ""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                                torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
    y = torch.randn(2048, 1024, device=dev, dtype=torch.bfloat16)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    for _ in range(20):  # warm-up: kernels chosen, memory allocated
        step()
    times = []
    prof = None
    if profile:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
    for _ in range(steps):
        t0 = time.perf_counter()
        with torch.profiler.record_function("train_step"):
            step()
        times.append(time.perf_counter() - t0)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(profile)
    json.dump(times, open(out, "w"))
''')

BURN = textwrap.dedent('''
    """Saturate the GPU with matmuls until killed (the fault: another process on the GPU)."""
    import sys
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    open(sys.argv[1], "w").close()  # ready
    while True:
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()
''')


FORKED = textwrap.dedent('''
    """A parent that never touches CUDA forks a child that runs matmuls (vLLM's library mode)."""
    import multiprocessing as mp
    import sys
    import torch

    def child(n):
        x = torch.randn(4096, 4096, device="cuda")
        for _ in range(n):
            x = (x @ x).clamp_(-1, 1)
        torch.cuda.synchronize()

    if __name__ == "__main__":
        p = mp.get_context("fork").Process(target=child, args=(50,))
        p.start()
        p.join()
        sys.exit(p.exitcode)
''')


def why_no_gpu() -> str | None:
    """One line saying why this machine cannot run the check; None when it can."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means no PyTorch to test with
        return f"PyTorch is not importable ({type(exc).__name__}: {exc})"
    cuda = getattr(torch, "cuda", None)
    try:
        available = bool(cuda.is_available()) if cuda is not None else False
    except Exception:  # noqa: BLE001
        available = False
    if not available:
        return "torch.cuda.is_available() is false (no GPU, or a CPU-only PyTorch)"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        return f"NVML is not usable ({type(exc).__name__}: {exc})"
    return None


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Burner:
    """The fault: a second process saturating the GPU, started and stopped around a run."""

    def __init__(self, work: Path):
        self.script = work / "burn.py"
        self.script.write_text(BURN)
        self.ready = work / "burn.ready"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Burner:
        self.ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, str(self.script), str(self.ready)])
        deadline = time.monotonic() + 120
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the GPU burner did not start")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def step_times(path: Path) -> list[float]:
    return json.loads(path.read_text())


def describe_bundle(path: Path) -> list[str]:
    """What each collector recorded in a bundle: rows per table, kernels, metrics, warnings."""
    from perfdiff.bundle import load_bundle

    b = load_bundle(path)
    lines = []
    for table in ("activity", "markers", "samples"):
        frame = getattr(b, table, None)
        lines.append(f"    {table}: {0 if frame is None else len(frame)} rows")
    act = b.activity
    if act is not None and len(act):
        k = act[act["kind"].astype(str) == "kernel"]
        lines.append(f"    kernels: {len(k)} ({k['function'].nunique()} distinct) on "
                     f"{sorted(set(k['device'].astype(str)))}")
    s = b.samples
    if s is not None and len(s):
        lines.append("    metrics: " + ", ".join(sorted(set(s["metric"].astype(str)))))
    m = b.manifest
    for c in m.get("collectors", []):
        lines.append(f"    collector {c.get('name')}: " + ", ".join(f"{k}={v}" for k, v in c.items()
                                                                  if k in ("interval_ns", "method", "mode")))
    for w in m.get("warnings", []):
        lines.append(f"    warning: {w}")
    return lines


def describe_comparison(c: Any) -> list[str]:
    lines = [f"    cycle time change: {c.cycle_time_change_pct:+.1f} %"]
    for v in c.verdict[:5]:
        lines.append(f"    verdict: {v.code.value} (explains {v.share_pp:.1f} pp, q={v.q:.3g})")
    for n in list(c.warnings)[:5]:
        lines.append(f"    warning: {getattr(getattr(n, 'code', None), 'value', n)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--steps", type=int, default=300, help="measured training steps per run")
    args = ap.parse_args(argv)
    why = why_no_gpu()
    if why is not None:
        print(f"gpu-check: no GPU to check here: {why}; nothing done")
        return 0
    t_start = time.monotonic()
    work = args.out or Path(tempfile.mkdtemp(prefix="perfdiff-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    train = work / "train.py"
    train.write_text(TRAIN)
    burner = Burner(work)
    failures: list[str] = []
    perfdiff = [sys.executable, "-m", "perfdiff"]

    def checked(cmd: list[str], fault: bool, what: str) -> None:
        """Run `cmd` (beside the burner when `fault`); a failure is recorded, not raised."""
        if fault:
            with burner:
                r = run(cmd)
        else:
            r = run(cmd)
        if r.returncode != 0:
            failures.append(f"{what} failed: {r.stderr.strip().splitlines()[-1:]}")

    def collect(name: str, fault: bool) -> Path:
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        cmd = [*perfdiff, "collect", "-o", str(out), "--", sys.executable, str(train), str(work / f"{name}.times.json"),
               str(args.steps)]
        checked(cmd, fault, f"collect {name}")
        return out

    def profiled(name: str, fault: bool) -> Path:
        trace = work / f"{name}.trace.json"
        checked([sys.executable, str(train), str(work / f"{name}.times.json"), str(args.steps), str(trace)], fault,
                f"torch.profiler run {name}")
        return trace

    def plain(name: str) -> list[float]:
        r = run([sys.executable, str(train), str(work / f"{name}.times.json"), str(args.steps)])
        if r.returncode != 0:
            failures.append(f"plain run {name} failed: {r.stderr.strip().splitlines()[-1:]}")
            return []
        return step_times(work / f"{name}.times.json")

    print("gpu-check: runs (plain and under collect interleaved for the overhead)")
    base1 = plain("plain1")
    normal = collect("normal", fault=False)
    base2 = plain("plain2")
    abnormal = collect("abnormal", fault=True)
    p_normal = profiled("prof_normal", fault=False)
    p_abnormal = profiled("prof_abnormal", fault=True)

    forked = work / "forked"
    shutil.rmtree(forked, ignore_errors=True)
    (work / "forked.py").write_text(FORKED)
    r = run([*perfdiff, "collect", "-o", str(forked), "--", sys.executable, str(work / "forked.py")])
    print("\nforked child under collect:")
    if r.returncode != 0:
        failures.append(f"the forked child failed under collect ({r.returncode}): {r.stderr.strip().splitlines()[-3:]}")
    elif forked.exists():
        lines = describe_bundle(forked)
        print("\n".join(lines))
        if not any(line.startswith("    kernels: ") and not line.startswith("    kernels: 0 ") for line in lines):
            failures.append("forked child: no kernel trace from the child (the agent did not re-arm after fork)")

    import perfdiff as pd_api

    for label, a, b in (("perfdiff collect", normal, abnormal), ("torch.profiler", p_normal, p_abnormal)):
        print(f"\n{label}: normal {a.name}, abnormal {b.name}")
        if label == "perfdiff collect":
            for run_dir in (a, b):
                if run_dir.exists():
                    print(f"  {run_dir.name}:")
                    lines = describe_bundle(run_dir)
                    print("\n".join(lines))
                    if not any(line.startswith("    kernels: ") and not line.startswith("    kernels: 0 ")
                               for line in lines):
                        failures.append(f"{run_dir.name}: no kernel trace (is cupti-python installed?)")
        try:
            c = pd_api.compare(a, b)
        except Exception as exc:  # noqa: BLE001 - the check reports, it does not stop
            failures.append(f"{label}: compare failed ({type(exc).__name__}: {exc})")
            continue
        print("\n".join(describe_comparison(c)))
        codes = [v.code.value for v in c.verdict]
        if label == "perfdiff collect" and "other-process" not in codes:
            failures.append(f"{label}: the verdict does not name the other process on the GPU ({codes})")
        if c.cycle_time_change_pct <= 5:
            failures.append(f"{label}: the fault's slower cycle was not seen ({c.cycle_time_change_pct:+.1f} %)")

    under = step_times(work / "normal.times.json") if (work / "normal.times.json").exists() else []
    if base1 and base2 and under:
        base = statistics.median(base1 + base2)
        with_agent = statistics.median(under)
        overhead = with_agent / base - 1
        print(f"\noverhead of the agent on the loop: median step {base * 1e3:.3f} ms plain, "
              f"{with_agent * 1e3:.3f} ms under collect: {overhead * 100:+.2f} % (limit {OVERHEAD_LIMIT * 100:.0f} %)")
        if overhead >= OVERHEAD_LIMIT:
            failures.append(f"the agent's overhead {overhead * 100:.2f} % is not under {OVERHEAD_LIMIT * 100:.0f} %")
    else:
        failures.append("the overhead could not be measured (a run failed)")
    took = time.monotonic() - t_start
    if took > BUDGET_S:
        failures.append(f"the check took {took:.0f} s, over its {BUDGET_S} s budget")
    print()
    for f in failures:
        print(f"gpu-check: FAIL: {f}")
    print(f"gpu-check: {'FAILED' if failures else 'passed'} in {took:.0f} s; runs in {work}")
    if args.out is None and not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
