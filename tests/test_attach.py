"""`collect --pid` loading the agent into a running Python process (PEP 768 sys.remote_exec).

The real call needs Python ≥ 3.14 on both sides; here it is replaced by a fake that checks its
arguments and hands the script to a stand-in target that runs it at its next loop iteration,
as an interpreter does at a safe point.  The lines that say why attaching cannot work are
checked on a fake /proc."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from perfdiff.collectors import attach as at
from perfdiff.collectors.cupti import reader as rd
from perfdiff.collectors.procfs import ProcFS

FRAMEWORKS = Path(__file__).resolve().parent / "fakes" / "frameworks"
PID = 4242


@pytest.fixture
def short_dir() -> Path:
    """A directory with a short path (Unix socket paths are limited to 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fake_proc(tmp_path: Path, *, exe: str = "/usr/bin/python3.14", uid: int = 1000, scope: str | None = "0",
              maps: str = "", ns: str = "mnt:[1]") -> ProcFS:
    proc = tmp_path / "proc"
    d = proc / str(PID)
    (d / "ns").mkdir(parents=True)
    (proc / "self" / "ns").mkdir(parents=True)
    os.symlink(exe, d / "exe")
    (d / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "maps").write_text(maps)
    for name in ("mnt", "pid"):
        os.symlink(ns if name == "mnt" else "pid:[1]", d / "ns" / name)
        os.symlink(f"{name}:[1]", proc / "self" / "ns" / name)
    if scope is not None:
        (proc / "sys" / "kernel" / "yama").mkdir(parents=True)
        (proc / "sys" / "kernel" / "yama" / "ptrace_scope").write_text(scope + "\n")
    return ProcFS(proc=str(proc))


def test_older_python_says_how_to_start_the_server_instead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        loader = at.RemoteLoader(version=(3, 11))
        why = loader.why_not(proc.pid)
        assert why is not None and "Python 3.11" in why and "needs sys.remote_exec (Python ≥ 3.14)" in why
        assert "perfdiff collect -o DIR -- CMD" in why and "PERFDIFF_AGENT=1" in why and "\n" not in why
        warnings: list[str] = []
        src = rd.AgentTraceSource.attach(proc.pid, warnings.append, loader=loader)
        assert len(warnings) == 1 and why in warnings[0] and src.remote is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("kw", "euid", "words"), [
    ({"exe": "/usr/bin/node", "maps": "7f00 r-xp /usr/lib/libc.so.6\n"}, 1000, "is not a Python process"),
    ({"exe": "/usr/bin/python3.12"}, 1000, "runs Python 3.12; sys.remote_exec needs Python ≥ 3.14 in the target"),
    ({"exe": "/usr/bin/python3.15"}, 1000, "runs Python 3.15 and this perfdiff Python 3.14"),
    ({"exe": "/opt/bin/server", "maps": "7f00 r-xp /opt/lib/libpython3.13.so.1.0\n"}, 1000, "runs Python 3.13"),
    ({"uid": 0}, 1000, "belongs to uid 0 and this collector runs as uid 1000"),
    ({"scope": "1"}, 1000, "ptrace_scope is 1: a process may attach only to its own children"),
    ({"scope": "2"}, 1000, "ptrace_scope is 2: only root (CAP_SYS_PTRACE) may attach"),
    ({"scope": "3"}, 0, "ptrace_scope is 3: no process may attach"),
    ({"ns": "mnt:[2]"}, 1000, "runs in another mount namespace (a container)"),
])
def test_each_permission_problem_is_one_line(tmp_path: Path, kw: dict, euid: int, words: str) -> None:
    fs = fake_proc(tmp_path, **kw)
    why = at.RemoteLoader(remote_exec=lambda pid, path: None, version=(3, 14), procfs=fs, euid=euid).why_not(PID)
    assert why is not None and words in why and "\n" not in why


def test_allowed_cases_have_no_reason(tmp_path: Path) -> None:
    for scope, euid in (("0", 1000), ("1", 0), ("2", 0), (None, 1000)):
        fs = fake_proc(tmp_path / f"{scope}{euid}", scope=scope)
        assert at.RemoteLoader(remote_exec=lambda pid, path: None, version=(3, 14), procfs=fs,
                               euid=euid).why_not(PID) is None


# A stand-in target: the fake vLLM engine core stepping forever, running any script path it
# finds in its mailbox at the top of each loop iteration (where CPython would run a
# sys.remote_exec script: at a safe point of the interpreter).
TARGET = textwrap.dedent("""
    import os, sys, time
    mailbox = sys.argv[1]
    from vllm.v1.engine.core import EngineCore
    import vllm.v1.executor.abstract as ex
    engine = EngineCore()
    print("ready", flush=True)
    while True:
        if os.path.exists(mailbox):
            path = open(mailbox).read()
            os.unlink(mailbox)
            exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__"})
        if not engine.scheduler.has_requests():
            for i in range(4):
                engine.add_request(f"r{time.monotonic_ns()}-{i}")
        engine.step_fn()
""")


def test_remote_exec_loads_the_agent_and_removes_its_wrappers(tmp_path: Path, short_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake sys.remote_exec gets (pid, an existing script path); run there, the start script
    loads the agent by path with the adapters, the collector finds its socket, steps of the
    engine created before the attach are wrapped (its step_fn, bound at construction, rebound), and the stop
    script removes every wrapper and itself."""
    monkeypatch.setattr(rd, "default_agent_dir", lambda uid=None, root="": root + str(short_dir))
    mailbox = tmp_path / "mailbox"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFDIFF", "FAKE_"))}
    env.update(PYTHONPATH=str(FRAMEWORKS), FAKE_EXEC_MS="1", PERFDIFF_MARKER_DIR=str(tmp_path / "marks"))
    # the target's agent must wait in the test's directory, as the collector looks there
    env["PERFDIFF_AGENT_DIR_FOR_TEST"] = str(short_dir)
    proc = subprocess.Popen([sys.executable, "-c", TARGET, str(mailbox)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    calls: list[tuple[int, str]] = []

    def fake_remote_exec(pid: int, path: str) -> None:
        assert isinstance(pid, int) and isinstance(path, str) and os.path.isabs(path) and path.endswith(".py")
        text = Path(path).read_text()
        compile(text, path, "exec")  # a script the target can run: standard library only
        assert at.AGENT_PACKAGE in text and "remote_exec" in text
        calls.append((pid, path))
        # Whole or not at all: the target polls the mailbox, and a file it finds still empty
        # would be read as the path "" (as sys.remote_exec hands over a complete path).
        part = mailbox.with_suffix(".part")
        part.write_text(path)
        os.replace(part, mailbox)

    try:
        assert proc.stdout.readline().strip() == "ready"
        (tmp_path / "marks").mkdir()
        monkeypatch.setattr(at, "SCRIPT", at.SCRIPT.replace(
            "agent.start()", "agent.start(os.environ['PERFDIFF_AGENT_DIR_FOR_TEST'])"))
        loader = at.RemoteLoader(remote_exec=fake_remote_exec, version=(3, 14), euid=0)
        monkeypatch.setattr(loader, "why_not", lambda pid: None)  # this Python is not 3.14 (the checks: above)
        warnings: list[str] = []
        src = rd.AgentTraceSource.attach(proc.pid, warnings.append, loader=loader)
        assert warnings == [] and src.remote is loader and calls[0][0] == proc.pid
        # The target runs the script at its next bytecode boundary and then steps on: wait for its
        # first step mark (a loaded machine may take a while), not a fixed time.
        deadline = time.monotonic() + 30
        marks: list[Path] = []
        while time.monotonic() < deadline:
            marks = list((tmp_path / "marks").glob("*.marks"))
            if marks and b"EngineCore.step" in marks[0].read_bytes():
                break
            time.sleep(0.05)
        assert marks and b"EngineCore.step" in marks[0].read_bytes()  # steps are cycles now
        assert src.stop() is not None and len(calls) == 2 and not Path(calls[1][1]).exists()
        size = marks[0].stat().st_size
        time.sleep(0.3)
        assert marks[0].stat().st_size == size  # no wrapper left: nothing more is written
        src.close()
        assert not Path(loader.directory or calls[0][1]).exists()
        assert proc.poll() is None  # the target runs on
    finally:
        proc.kill()
        out = proc.communicate()
    assert "Traceback" not in out[1], out[1]


def _pythons() -> dict[tuple[int, int], str]:
    """Interpreters on this machine by version (pyenv's and those on PATH)."""
    import glob

    found: dict[tuple[int, int], str] = {}
    for path in [*glob.glob("/root/.pyenv/versions/3.*/bin/python3.*"), *[shutil.which(f"python3.{m}") or ""
                                                                         for m in range(10, 20)]]:
        name = os.path.basename(path)
        if path and name.count(".") == 1 and name[len("python3."):].isdigit() and os.access(path, os.X_OK):
            found.setdefault((3, int(name[len("python3."):])), path)
    return found


def test_a_real_older_python_target_is_named_with_its_version() -> None:
    old = {v: p for v, p in _pythons().items() if (3, 10) <= v < (3, 14)}
    if not old:
        pytest.skip("no Python 3.10–3.13 interpreter on this machine to start as a target")
    version, py = max(old.items())
    proc = subprocess.Popen([py, "-c", "import time; time.sleep(30)"], env={"PATH": os.environ["PATH"]})
    try:
        time.sleep(0.2)
        why = at.RemoteLoader(remote_exec=lambda pid, path: None, version=(3, 14)).why_not(proc.pid)
        assert why is not None and f"runs Python {version[0]}.{version[1]}; sys.remote_exec needs Python ≥ 3.14" in why
    finally:
        proc.kill()
        proc.wait()


def test_real_remote_exec_on_python_3_14(tmp_path: Path, short_dir: Path) -> None:
    """The real sys.remote_exec: a 3.14 target, the start script sent by a 3.14 helper."""
    new = {v: p for v, p in _pythons().items() if v >= (3, 14)}
    if not new:
        pytest.skip("no Python ≥ 3.14 on this machine: sys.remote_exec (PEP 768) cannot run here")
    py = new[max(new)]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(FRAMEWORKS), "PERFDIFF_MARKER_DIR": str(tmp_path / "marks")}
    (tmp_path / "marks").mkdir()
    target = subprocess.Popen([py, "-c", "import time\nfrom vllm.v1.engine.core import EngineCore\nprint('ready', "
                               "flush=True)\nwhile True:\n    time.sleep(0.01)"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        loader = at.RemoteLoader(version=(3, 14), remote_exec=lambda pid, path: subprocess.run(
            [py, "-c", f"import sys; sys.remote_exec({pid}, {path!r})"], check=True))
        script = loader._script(f"start-{target.pid}")  # noqa: SLF001
        Path(script).write_text(Path(script).read_text().replace(
            "agent.start()", f"agent.start({str(short_dir)!r})"))
        loader.remote_exec(target.pid, script)
        deadline = time.monotonic() + 10
        while not list(short_dir.glob("*.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(short_dir.glob(f"{target.pid}.sock")), "the agent did not start in the target"
    finally:
        target.kill()
        target.wait()
