"""tools/gpu_check.py (`make gpu-check`) where there is no GPU: one line saying why, exit 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = Path(__file__).resolve().parent / "fakes" / "frameworks"


def run_check(tmp_path: Path, pythonpath: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out", str(tmp_path / "runs")],
                          env=env, capture_output=True, text=True, timeout=120)


def test_without_cuda_one_line_and_exit_0(tmp_path: Path) -> None:
    """A PyTorch without CUDA (the stand-in torch has no torch.cuda)."""
    r = run_check(tmp_path, str(FRAMEWORKS))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["gpu-check: no GPU to check here: torch.cuda.is_available() is false "
                                     "(no GPU, or a CPU-only PyTorch); nothing done"]
    assert not (tmp_path / "runs").exists()


def test_without_torch_one_line_and_exit_0(tmp_path: Path) -> None:
    """No PyTorch importable: a `torch` that fails to import shadows any installed one."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    r = run_check(tmp_path, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["gpu-check: no GPU to check here: PyTorch is not importable "
                                     "(ImportError: no torch here); nothing done"]


def test_without_nvml_one_line_and_exit_0(tmp_path: Path) -> None:
    """CUDA available but NVML missing: a stand-in torch that says CUDA is there, and a pynvml
    that cannot initialise."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("class cuda:\n    is_available = staticmethod(lambda: True)\n")
    (tmp_path / "pynvml.py").write_text("def nvmlInit():\n    raise OSError('libnvidia-ml.so.1 not found')\n")
    r = run_check(tmp_path, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["gpu-check: no GPU to check here: NVML is not usable "
                                     "(OSError: libnvidia-ml.so.1 not found); nothing done"]
