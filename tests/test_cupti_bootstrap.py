"""How targets load the CUPTI agent: the bootstrap is a shipped file, the in-target modules
import only the standard library, and a Python where perfdiff is not importable still runs
the agent from the collector's package directory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import fakes.fake_cupti as fake_cupti
from perfdiff.collectors.cupti import reader as rd

TARGET_MODULES = ["agent", "binding", "control", "sitecustomize", "wire", "adapters", "adapters.record",
                  "adapters.vllm", "adapters.sglang", "adapters.pytorch"]
HEAVY = ["numpy", "pandas", "pyarrow", "cupti", "perfdiff.model.tables", "perfdiff.collectors.cupti.reader"]


def _env_without_agent() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF_AGENT", "NVTX_"))}


def test_bootstrap_is_a_file_of_the_package_that_compiles() -> None:
    boot = Path(rd.BOOTSTRAP_FILE)
    assert boot.is_file() and boot.parent == Path(rd.AGENT_FILE).parent and boot.name == "sitecustomize.py"
    compile(boot.read_text(encoding="utf-8"), str(boot), "exec")
    src = rd.AgentTraceSource.announce(lambda m: None)
    try:
        copied = Path(src.directory) / "boot" / "sitecustomize.py"
        assert copied.read_bytes() == boot.read_bytes()  # what the command runs is the shipped file
        assert src.env()[rd.ENV_FILE] == rd.AGENT_FILE and Path(rd.AGENT_FILE).is_file()
    finally:
        src.close()


def test_in_target_modules_import_only_the_standard_library() -> None:
    # Importing the bootstrap as a module of the package must not start anything either.
    code = textwrap.dedent(f"""
        import importlib, sys
        for name in {TARGET_MODULES!r}:
            importlib.import_module("perfdiff.collectors.cupti." + name)
        import perfdiff.agent
        print([m for m in {HEAVY!r} if m in sys.modules], perfdiff.agent.status())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**_env_without_agent(), "PERFDIFF_AGENT_DIR": ""})
    assert out.stdout.strip() == "[] {}", out.stderr


def test_agent_runs_in_a_python_without_perfdiff(tmp_path: Path) -> None:
    """`python -S`: no site-packages, so neither perfdiff nor numpy can be imported; the
    bootstrap (imported by hand, as site would) loads the agent package from the collector's
    directory by path, and the collector reads the kernels it wrote."""
    pkg = fake_cupti.write_package(tmp_path / "pkg")
    src = rd.AgentTraceSource.announce(lambda m: None)
    code = textwrap.dedent("""
        import importlib.util, json, sys
        perfdiff_here = importlib.util.find_spec("perfdiff") is not None
        import sitecustomize  # the bootstrap: site would import it at start-up
        from cupti import cupti
        cupti._fake.play_steps(3, [("gemm", 100_000), ("norm", 20_000)])
        agent = sys.modules["_perfdiff_cupti_agent.agent"].current()
        print(json.dumps({"perfdiff_here": perfdiff_here, "state": agent.state,
                          "heavy": [m for m in sys.modules if m.split(".")[0] in ("numpy", "pandas", "perfdiff")],
                          "loaded": sorted(m for m in sys.modules if m.startswith("_perfdiff_cupti_agent"))}))
    """)
    env = {**_env_without_agent(), **src.env()}
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(pkg)])
    try:
        out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        info = json.loads(out.stdout)
        assert info["perfdiff_here"] is False and info["heavy"] == [] and info["state"] == "recording"
        assert info["loaded"] == ["_perfdiff_cupti_agent"] + [f"_perfdiff_cupti_agent.{m}" for m in
                                                             ("adapters", "adapters.record", "agent", "binding",
                                                              "control", "wire")]
        rows = src.stop()  # the target's atexit hook wrote everything
        k = rows["activity"][rows["activity"]["kind"] == "kernel"]
        assert sorted(set(k["function"].astype(str))) == ["gemm", "norm"] and len(k) == 6
    finally:
        src.close()
