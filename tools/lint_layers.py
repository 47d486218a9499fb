"""Check the import contracts of .importlinter on the package as it installs.

perfdiff's source is split over src/perfdiff, collectors/ and templates/ (mapped into the
package by pyproject.toml), and import-linter only scans one directory per package, so this
copies the three into one staged `perfdiff` package and runs `lint-imports` on it.

    python tools/lint_layers.py [--root REPO] [--plant FILE:LINE_OF_CODE]

`--plant` appends a line to a file of the staged copy (never the checkout): tests use it to
show that a violation fails the check.  Exit status: lint-imports' (0 kept, 1 broken).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def stage(root: Path, dest: Path) -> Path:
    """Copy the package as it installs into dest/perfdiff; returns that folder."""
    pkg = dest / "perfdiff"
    shutil.copytree(root / "src" / "perfdiff", pkg, ignore=IGNORE)
    shutil.copytree(root / "collectors", pkg / "collectors", ignore=IGNORE)
    shutil.copytree(root / "templates", pkg / "templates", ignore=IGNORE)
    return pkg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--plant", action="append", default=[], metavar="FILE:CODE",
                    help="append CODE to FILE (a path inside the staged package) before checking")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="perfdiff-lint-") as tmp:
        pkg = stage(args.root, Path(tmp))
        for plant in args.plant:
            rel, code = plant.split(":", 1)
            with open(pkg / rel, "a", encoding="utf-8") as fh:
                fh.write("\n" + code + "\n")
        env = {**os.environ, "PYTHONPATH": tmp}
        exe = Path(sys.executable).with_name("lint-imports")
        cmd = [str(exe) if exe.exists() else "lint-imports", "--no-cache", "--no-logo",
               "--config", str(args.root / ".importlinter")]
        return subprocess.run(cmd, cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
