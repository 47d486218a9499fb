"""Loading the perfdiff agent into a running Python process for `collect --pid` (PEP 768).

On Python 3.14 and later ``sys.remote_exec(pid, script)`` asks a running interpreter to run a
script file at its next safe point.  ``RemoteLoader.load`` writes a short script (standard
library only) that loads the collector's agent package by path, as the ``sitecustomize``
bootstrap does, and starts it idle with the framework adapters installed; the collector then
finds the agent's socket as for any agent.  ``unload`` runs a second script that removes the
adapters' wrappers and stops the agent.  The call itself is a parameter (``remote_exec``), so
tests pass a fake.

Before anything is written, ``why_not`` names in one line the reason it cannot work: this
collector's Python lacks ``sys.remote_exec``, the target is not Python or its Python is older
than 3.14 or another version than the collector's, another user owns it, the Yama ptrace
scope forbids it, or it runs in another mount or PID namespace (a container: the agent's
files are not visible there).  See docs/PROFILING_LLM_SERVERS.md.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from typing import Callable

from perfdiff import marker
from perfdiff.collectors.procfs import ProcFS, as_procfs, field

AGENT_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupti")
MIN_VERSION = (3, 14)
PYTHON = (sys.version_info[0], sys.version_info[1])  # this collector's Python
WAIT_S = 5.0  # how long the agent's socket may take to appear (the target runs the script at a safe point)
HINT = ("start the server under `perfdiff collect -o DIR -- CMD ...` instead, or with PERFDIFF_AGENT=1 and "
        "`import perfdiff.agent` at its start so that `collect --pid` finds its agent")

# Runs in the target: standard library only, never raises into it.
SCRIPT = '''\
def _perfdiff_remote(action, package, marker_file, script):
    import importlib, importlib.util, os, sys
    try:
        agent = sys.modules.get("_perfdiff_cupti_agent.agent") or sys.modules.get("perfdiff.collectors.cupti.agent")
        if agent is None:
            spec = importlib.util.spec_from_file_location(
                "_perfdiff_cupti_agent", os.path.join(package, "__init__.py"), submodule_search_locations=[package])
            sys.modules[spec.name] = pkg = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(pkg)
            agent = importlib.import_module("_perfdiff_cupti_agent.agent")
        adapters = importlib.import_module(agent.__package__ + ".adapters")
        if action.startswith("start"):
            adapters.install(marker_file=marker_file)
            agent.start()
        else:
            adapters.uninstall()
            running = agent.current()
            if running is not None:
                running.stop_recording("detached")
                running.close_socket()
    except Exception as exc:
        try:
            sys.stderr.write("perfdiff agent: %s by remote_exec failed (%s: %s)\\n" % (action, type(exc).__name__, exc))
        except Exception:
            pass
    try:
        os.unlink(script)  # the collector waits for this: the script has run
    except OSError:
        pass


_perfdiff_remote({action!r}, {package!r}, {marker_file!r}, {script!r})
del _perfdiff_remote
'''


def python_version_of(pid: int, fs: ProcFS) -> tuple[int, int] | None | str:
    """The target's Python (major, minor) from its executable's or libpython's name; None
    when it is Python of an unknown version; "not python" when nothing says Python."""
    try:
        exe = os.path.basename(fs.readlink(pid, "exe"))
    except OSError:
        exe = ""
    names = [exe]
    try:
        names += [line.rsplit(b"/", 1)[-1].decode("utf-8", "replace")
                  for line in fs.read(pid, "maps").splitlines() if b"libpython" in line]
    except OSError:
        pass
    for name in names:
        m = re.search(r"python(\d)\.(\d+)", name)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None if any("python" in n for n in names) else "not python"


class RemoteLoader:
    """The agent loaded into running targets with `remote_exec` (default ``sys.remote_exec``)."""

    def __init__(self, *, remote_exec: Callable[[int, str], None] | None = None,
                 version: tuple[int, int] | None = None, procfs: str | ProcFS = "/proc",
                 euid: int | None = None, wait_s: float = WAIT_S):
        self.remote_exec = remote_exec if remote_exec is not None else getattr(sys, "remote_exec", None)
        self.version = version or PYTHON
        self.fs = as_procfs(procfs)
        self.euid = os.geteuid() if euid is None else euid
        self.wait_s = wait_s
        self.loaded: list[int] = []
        self.directory = ""

    def why_not(self, pid: int) -> str | None:
        """One line saying why the agent cannot be loaded into `pid` (None: it can be tried)."""
        v = "%d.%d" % self.version
        if self.version < MIN_VERSION or self.remote_exec is None:
            return (f"this perfdiff runs on Python {v}, and loading the agent into a running process needs "
                    f"sys.remote_exec (Python ≥ 3.14): {HINT}")
        target = python_version_of(pid, self.fs)
        if target == "not python":
            return f"pid {pid} is not a Python process: there is no interpreter to load the agent into"
        if isinstance(target, tuple) and target < MIN_VERSION:
            return f"pid {pid} runs Python {target[0]}.{target[1]}; sys.remote_exec needs Python ≥ 3.14 in the target: {HINT}"
        if isinstance(target, tuple) and target != self.version:
            return (f"pid {pid} runs Python {target[0]}.{target[1]} and this perfdiff Python {v}: run perfdiff "
                    f"with the target's Python version to attach")
        uid = _uid(pid, self.fs)
        if uid is not None and self.euid not in (0, uid):
            return (f"pid {pid} belongs to uid {uid} and this collector runs as uid {self.euid}: attaching needs "
                    "the same user or root")
        scope = _ptrace_scope(self.fs)
        if scope == 3:
            return ("kernel.yama.ptrace_scope is 3: no process may attach to another on this host (until "
                    f"reboot); {HINT}")
        if scope == 2 and self.euid != 0:
            return ("kernel.yama.ptrace_scope is 2: only root (CAP_SYS_PTRACE) may attach; run perfdiff collect "
                    f"as root, or {HINT}")
        if scope == 1 and self.euid != 0:
            return ("kernel.yama.ptrace_scope is 1: a process may attach only to its own children; run perfdiff "
                    f"collect as root, set `sysctl kernel.yama.ptrace_scope=0`, or {HINT}")
        for ns in ("mnt", "pid"):
            try:
                if self.fs.readlink("self", "ns", ns) != self.fs.readlink(pid, "ns", ns):
                    return (f"pid {pid} runs in another {'mount' if ns == 'mnt' else 'PID'} namespace (a "
                            "container), where the agent's files are not visible: run perfdiff collect inside "
                            "the container")
            except OSError:
                pass
        return None

    def _script(self, action: str) -> str:
        if not self.directory:
            self.directory = tempfile.mkdtemp(prefix="perfdiff-attach-")
            os.chmod(self.directory, 0o755)  # a root collector's script is read by the target's user
        path = os.path.join(self.directory, f"{action}.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(SCRIPT.format(action=action.split("-")[0], package=AGENT_PACKAGE, marker_file=marker.__file__, script=path))
        os.chmod(path, 0o644)
        return path

    def load(self, pid: int, answers: Callable[[], bool]) -> str | None:
        """Load the agent into `pid` and wait until `answers()` (its socket) says it runs; None
        on success, else one line saying why not."""
        why = self.why_not(pid)
        if why is not None:
            return why
        assert self.remote_exec is not None
        try:
            self.remote_exec(pid, self._script(f"start-{pid}"))
        except (OSError, RuntimeError, ValueError) as exc:
            return f"sys.remote_exec into pid {pid} failed: {exc}"
        self.loaded.append(pid)
        end = time.monotonic() + self.wait_s
        while time.monotonic() < end:
            if answers():
                return None
            time.sleep(0.05)
        return (f"pid {pid} did not start the agent within {self.wait_s:g} s (a process blocked outside Python "
                "code runs the script only when it returns to it)")

    def unload(self) -> list[str]:
        """Remove the adapters' wrappers and stop the agent in every target loaded; problems as lines."""
        problems = []
        for pid in self.loaded:
            path = self._script(f"stop-{pid}")
            try:
                assert self.remote_exec is not None
                self.remote_exec(pid, path)
            except (OSError, RuntimeError, ValueError) as exc:
                problems.append(f"pid {pid}: removing the agent's wrappers failed: {exc}")
                continue
            end = time.monotonic() + self.wait_s
            while os.path.exists(path) and time.monotonic() < end:
                time.sleep(0.05)
            if os.path.exists(path):
                problems.append(f"pid {pid} did not run the script that removes the agent's wrappers within "
                                f"{self.wait_s:g} s: they stay until it exits (idle: no records, no cost but a check)")
        self.loaded = []
        return problems

    def close(self) -> None:
        """Remove the script files (the targets read them when they ran them)."""
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""


def _uid(pid: int, fs: ProcFS) -> int | None:
    try:
        line = field(fs.read(pid, "status"), b"Uid")
        return int(line.split()[1]) if line else None  # effective uid
    except (OSError, ValueError, IndexError):
        return None


def _ptrace_scope(fs: ProcFS) -> int | None:
    try:
        return int(fs.read("sys", "kernel", "yama", "ptrace_scope").strip())
    except (OSError, ValueError):
        return None  # no Yama: ordinary ptrace rules (same user or root)
