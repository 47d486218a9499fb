"""Open an input: a run bundle, a directory holding one trace, or a trace file (nsys, Kineto)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from perfdiff.bundle import RunData, is_bundle
from perfdiff.errors import InputError, reading

TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz", ".nsys-rep")


def trace_kind(path: Path) -> str | None:
    """'nsys', 'nsys-rep', 'kineto' or None, from the file name."""
    name = path.name.lower()
    if name.endswith(".sqlite"):
        return "nsys"
    if name.endswith(".nsys-rep"):
        return "nsys-rep"
    if name.endswith(".json") or name.endswith(".json.gz"):
        return "kineto"
    return None


def _find_trace_in_dir(path: Path) -> Path:
    traces = sorted(p for p in path.iterdir() if p.is_file() and trace_kind(p))
    if not traces:
        if not any(path.iterdir()):
            raise InputError("empty directory: not a run bundle and no trace in it", path=path)
        raise InputError(
            "not a perfdiff run bundle (no manifest.json) and no trace file "
            "(.sqlite, .json, .json.gz, .nsys-rep) in it", path=path)
    if len(traces) > 1:
        names = ", ".join(p.name for p in traces[:4])
        raise InputError(f"holds several traces ({names}); name one file", path=path)
    return traces[0]


def export_nsys_rep(path: Path, workdir: Path) -> Path:
    """Export an .nsys-rep to SQLite with `nsys export` (needs nsys on PATH); returns the file."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(
            "reading .nsys-rep needs `nsys` on PATH; export it where nsys is installed with "
            "`nsys export --type sqlite --output trace.sqlite FILE.nsys-rep` and pass the .sqlite",
            path=path)
    out = workdir / (path.stem + ".sqlite")
    proc = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                           "--output", str(out), str(path)], capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"`nsys export` failed: {last[0]}", path=path)
    return out


def check_pid(paths: list[str | os.PathLike[str]], pid: int | None) -> None:
    """InputError when `pid` is given and no input is an nsys export (the only input that
    holds several processes to pick from): it would be ignored without a word."""
    if pid is None:
        return
    for path in paths:
        p = Path(path)
        if p.is_dir() and not is_bundle(p):
            try:
                p = _find_trace_in_dir(p)
            except InputError:
                return  # the load names what is wrong with it
        if not p.exists() or trace_kind(p) in ("nsys", "nsys-rep"):
            return
    raise InputError(f"--pid {pid} picks one process of an nsys export; these inputs are not nsys exports "
                     "(a bundle, a PyTorch-profiler trace: one process each)")


def open_run(path: str | os.PathLike[str], *, pid: int | None = None, group: str = "full",
             for_compare: bool = False, cores: int | None = None, several_processes: str = "most") -> RunData:
    """Load `path`: a bundle directory, a directory holding one trace, or a trace file.

    `for_compare`: a trace's activity columns that no comparison reads (COMPARE_UNUSED) are
    left unknown instead of copied; a trace to write out as a bundle needs them.  `cores`: CPU
    cores a trace's import may keep busy (None: all of them).  `several_processes`: "raise"
    raises SeveralProcesses for an nsys SQLite export in which several processes launched
    kernels when `pid` is None (import_nsys); "most" reads the most active one."""
    p = Path(path)
    with reading(p):
        return _open_run(p, pid=pid, group=group, for_compare=for_compare, cores=cores, several=several_processes)


def _open_run(p: Path, *, pid: int | None, group: str, for_compare: bool, cores: int | None,
              several: str = "most") -> RunData:
    if not p.exists():
        raise InputError("no such file or directory", path=p)
    if p.is_dir():
        if is_bundle(p):
            from perfdiff.bundle import load_bundle  # pandas: not needed to tell inputs apart

            return load_bundle(p)
        p = _find_trace_in_dir(p)
    kind = trace_kind(p)
    if kind is None:
        raise InputError("unknown input: expected a run bundle directory or a trace "
                         "(.sqlite, .json, .json.gz, .nsys-rep)", path=p)
    from perfdiff.importers.common import COMPARE_UNUSED

    skip = COMPARE_UNUSED if for_compare else frozenset()
    if kind == "kineto":
        from perfdiff.importers.kineto import import_kineto

        return import_kineto(p, group=group, skip=skip, cores=cores)
    from perfdiff.importers.nsys import import_nsys

    if kind == "nsys-rep":
        with tempfile.TemporaryDirectory(prefix="perfdiff-") as tmp:
            return import_nsys(export_nsys_rep(p, Path(tmp)), pid=pid, group=group, skip=skip, cores=cores)
    return import_nsys(p, pid=pid, group=group, skip=skip, cores=cores, several_processes=several)


_CHUNK = 1 << 20


def same_content(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two inputs hold the same bytes: one path, two equal files, or two folders with
    the same files (names, sizes, bytes).  Reads stop at the first difference."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.resolve() == pb.resolve():
            return True
        if pa.is_file() and pb.is_file():
            return _same_file(pa, pb)
        if pa.is_dir() and pb.is_dir():
            fa = sorted(f.relative_to(pa) for f in pa.rglob("*") if f.is_file())
            fb = sorted(f.relative_to(pb) for f in pb.rglob("*") if f.is_file())
            return fa == fb and all(_same_file(pa / f, pb / f) for f in fa)
    except OSError:
        return False
    return False


def _same_file(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(_CHUNK), fb.read(_CHUNK)
            if x != y:
                return False
            if not x:
                return True
