"""`perfdiff collect -- <a vLLM-like server>` end to end: the agent boots in the API server and
in the engine-core process it spawns, engine steps become the bundle's cycles, the phases its
CPU functions, the step loads its step_* samples; a run whose execute_model is 30 % slower is
compared and that phase ranks first among the CPU functions."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfdiff
from perfdiff.analyze.findings import FindingCode
from perfdiff.analyze.verdict import HOST_WAITS, VerdictCode
from perfdiff.bundle import load_bundle

pytestmark = pytest.mark.live

FRAMEWORKS = Path(__file__).resolve().parent / "fakes" / "frameworks"
PY = sys.executable
STEPS = 120  # 30 requests of 24 outputs in batches of 6: 5 rounds of (1 prefill + 23 decodes)


def collect(out: Path, slow: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "FAKE_", "NVTX_"))}
    env.update(PYTHONPATH=str(FRAMEWORKS), FAKE_EXEC_MS="3", FAKE_OUTPUT="24", FAKE_BATCH="6",
               FAKE_SLOW=str(slow))
    return subprocess.run([PY, "-m", "perfdiff", "collect", "--interval", "50ms", "-o", str(out), "--",
                           PY, str(FRAMEWORKS / "serve_vllm.py"), "30"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_vllm_steps_are_the_cycles_and_a_slower_execute_model_ranks_first(tmp_path: Path) -> None:
    runs = {}
    for name, slow in (("normal", 1.0), ("abnormal", 1.3)):
        r = collect(tmp_path / name, slow)
        assert r.returncode == 0 and f"engine steps {STEPS}" in r.stderr, r.stderr
        assert "perfdiff agent:" not in r.stderr, r.stderr
        runs[name] = b = load_bundle(tmp_path / name)
        m = b.markers
        assert len(m) == STEPS and set(m["name"].astype(str)) == {"EngineCore.step"}
        assert set(m["source"].astype(str)) == {"perfdiff"}
        cpu = b.activity[b.activity["kind"] == "cpu"]
        calls = cpu.groupby("function", observed=True).size().to_dict()
        for phase in ("Scheduler.schedule", "Scheduler.update_from_output", "Executor.execute_model",
                      "Executor.sample_tokens", "OutputProcessor.process_outputs"):
            assert calls[phase] == STEPS, phase
        s = b.samples
        prefill = s[s["metric"] == "step_prefill_tokens"]["value"]
        assert len(prefill) == STEPS and prefill.sum() == 30 * 32 and (prefill > 0).sum() == 5
        decode = s[s["metric"] == "step_decode_tokens"]["value"]
        assert decode.sum() == 30 * 23
    c = perfdiff.compare(tmp_path / "normal", tmp_path / "abnormal")
    f = c.functions
    cpu = f[f["kind"] == "cpu"].sort_values("tau_pp", ascending=False)
    top = cpu.iloc[0]
    assert top["name"] == "Executor.execute_model" and top["q_t"] < 0.01 and top["tau_pp"] > 5
    # The verdict names the slower phase as CPU-side work: the phase itself, or the host-wide
    # slowdown holding it (when every host function scaled alike and the common-mode check
    # took them together).  On a quiet machine it leads; when the machine's other load made
    # the two runs wait differently (run queue, I/O), that is a real difference too and may
    # lead, and the phase is named for what the waiting does not explain.
    waits = [v for v in c.verdict if v.code in HOST_WAITS]
    work = [v for v in c.verdict if v.code == VerdictCode.CPU_WORK]
    assert work or waits, c.verdict
    if not waits:
        assert c.verdict[0].code == VerdictCode.CPU_WORK, c.verdict
    for v in work[:1]:
        evidence = [c.findings[i] for i in v.evidence]
        hw = getattr(v.detail, "host_wide", None)
        held = [c.analysis.functions[i].name for i in (hw.absorbed_funcs if hw else ())]
        assert "Executor.execute_model" in held or any(
            x.function == "Executor.execute_model" or (x.code == FindingCode.DEVICE_WIDE and x.device == "Host")
            for x in evidence), evidence
