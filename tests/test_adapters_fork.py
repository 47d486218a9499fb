"""vLLM used as a library forks its engine core (``LLM(...)``: $VLLM_WORKER_MULTIPROC_METHOD
defaults to fork): under `collect -- CMD` the forked engine core hands over its own kernel
trace and its engine steps, with the fake cupti-python."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes import fake_cupti
from perfdiff.collectors.base import RowBuffer
from perfdiff.collectors.cupti import reader as rd
from perfdiff.collectors.markers import parse_marks
from test_adapters import FRAMEWORKS, VLLM_ENV, expected_vllm_steps


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_forked_vllm_engine_core_yields_kernels_and_steps(tmp_path: Path, method: str) -> None:
    src = rd.AgentTraceSource.announce(lambda m: None)
    marks = tmp_path / "marks"
    marks.mkdir()
    pkg = fake_cupti.write_package(tmp_path / "pkg", "kernels_and_markers")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "NVTX_", "FAKE_", "VLLM_"))}
    env.update(src.env(env), PERFDIFF_MARKER_DIR=str(marks), FAKE_CUPTI_KERNELS="fake_forward",
               VLLM_WORKER_MULTIPROC_METHOD=method, **VLLM_ENV)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(FRAMEWORKS), str(pkg)])
    try:
        proc = subprocess.run([sys.executable, str(FRAMEWORKS / "llm_vllm.py"), "6"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        rows = src.stop()
        agents = src.manifest()["collector"]["agents"]
    finally:
        src.close()
    n = len(expected_vllm_steps())
    assert f"engine steps {n}" in proc.stderr and "perfdiff agent:" not in proc.stderr, proc.stderr
    k = rows["activity"][rows["activity"]["kind"] == "kernel"]
    assert len(k) == 2 * n and set(k["function"].astype(str)) == {"fake_forward"}  # execute_model, sample_tokens
    (engine,) = set(k["tid"])  # the engine core's thread, in the child
    assert len(agents) >= 2 and engine in {a["pid"] for a in agents}  # the script's, the engine core's (spawn: its helper)
    assert all(a["state"] == "stopped" for a in agents), agents
    out = RowBuffer()
    for f in marks.glob("*.marks"):
        parse_marks(f.read_bytes(), out)
    m = out.take()["markers"]
    assert m["name"] == ["EngineCore.step"] * n and set(m["tid"]) == {engine}


def test_no_rearm_where_pytorch_had_initialised_cuda(tmp_path: Path) -> None:
    """A child forked after PyTorch initialised CUDA (a DataLoader worker) cannot use CUDA:
    its agent stays inert (no files, no warning)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "class cuda:\n    _in_bad_fork = False\n    is_initialized = staticmethod(lambda: True)\n")
    script = tmp_path / "loader.py"
    script.write_text("import os, torch\nchild = os.fork()\nif child == 0:\n    os._exit(0)\n"
                      "os.waitpid(child, 0)\nprint(child)\n")
    src = rd.AgentTraceSource.announce(lambda m: None)
    pkg = fake_cupti.write_package(tmp_path / "pkg", "kernels_and_markers")  # the parent records
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "NVTX_", "FAKE_"))}
    env.update(src.env(env))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(tmp_path), str(pkg)])
    try:
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        child = int(proc.stdout.split()[-1])
        assert any(p.name.endswith(".rec") for p in Path(src.directory).iterdir())  # the parent recorded
        assert not [p for p in Path(src.directory).iterdir() if p.name.startswith(f"{child}.")]
    finally:
        src.close()
