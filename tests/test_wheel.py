"""The built wheel carries templates and collectors: install it in a fresh venv and compare there."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_wheel_in_fresh_venv(tmp_path: Path) -> None:
    # Build from a copy of the tracked files: building in place would write into the checkout.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)], check=True, capture_output=True)
    wheel = next(dist.glob("perfdiff-*.whl"))

    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # Dependencies come from the test environment's site-packages (a path, not a site dir, so the
    # editable perfdiff there stays invisible); perfdiff itself only from the wheel.
    (site / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)

    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples" / "cpufreq", work / "cpufreq")
    check = subprocess.run(
        [str(py), "-c", "import perfdiff, perfdiff.collectors.base, perfdiff.templates as t, importlib.resources as r;"
         "print(perfdiff.__file__); print(r.files(t).joinpath('report.md.j2').is_file())"],
        cwd=work, capture_output=True, text=True, check=True)
    where, has_template = check.stdout.split()
    assert where.startswith(str(site)), where
    assert has_template == "True"
    # The CUPTI agent's bootstrap is a file `collect -- CMD` copies out of the installed package.
    boot = subprocess.run(
        [str(py), "-c", "from perfdiff.collectors.cupti import reader as r; "
         "compile(open(r.BOOTSTRAP_FILE).read(), r.BOOTSTRAP_FILE, 'exec'); print(r.BOOTSTRAP_FILE)"],
        cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    assert boot == str(site / "perfdiff" / "collectors" / "cupti" / "sitecustomize.py"), boot
    proc = subprocess.run([str(py), "-m", "perfdiff", "compare", "cpufreq/normal", "cpufreq/abnormal",
                           "-o", "report.md"], cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "## 3. In-depth Core Metric Comparison" in (work / "report.md").read_text()
    from perfdiff.importers.kineto.compiled import why_not
    from perfdiff.importers.nsys import pages

    if pages.native._load("perfdiff.importers.nsys._pages") is not None and not why_not():
        # Built here, so a compiler is: the wheel carries every extension.
        subprocess.run([str(py), "-c", "import perfdiff.importers.kineto._scan, perfdiff.importers.nsys._pages, "
                        "perfdiff.model._nesting"], cwd=work, capture_output=True, check=True)
    proc = subprocess.run([str(env_dir / "bin" / "perfdiff"), "--version"], cwd=work, capture_output=True, text=True)
    assert proc.stdout.startswith("perfdiff "), proc.stderr


def test_every_package_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists the packages by hand (collectors/ and templates/ are mapped in):
    a new subpackage left out of the list would be missing from the installed perfdiff."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src" / "perfdiff").rglob("__init__.py")}
    found |= {".".join(("perfdiff", *p.parent.relative_to(ROOT).parts)) for p in (ROOT / "collectors").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
