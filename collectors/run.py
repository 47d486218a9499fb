"""The Python API of `perfdiff collect`: `collect(CollectOptions) -> CollectResult`.

It checks the target, opens the samplers (host, GPU, kernel traces, marks) and the bundle,
starts the command when one is given, runs the collect loop (collectors/loop.py) and seals
the bundle.  Ends: a signal or the duration → status complete; the --pid target exits →
status target-exited; the started command exits → status complete (its exit code is
recorded; a command still running at the end gets SIGTERM).  No such pid, no permission, a
full disk → CollectionError (one line); a bad option → InputError.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from perfdiff.version import __version__
from perfdiff.collectors.base import Sampler
from perfdiff.collectors.host.cgroup import CgroupCpuSampler
from perfdiff.collectors.host.pressure import PressureSampler
from perfdiff.collectors.host import HostSampler, ProcFS, host_info
from perfdiff.collectors.loop import MIN_INTERVAL_NS, Collection
from perfdiff.collectors.markers import MarkerReader
from perfdiff.collectors.nsys_session import DEFAULT_TRACE
from perfdiff.collectors.nsys_session import check_collect_options as check_kernel_trace_options
from perfdiff.collectors.targets import TargetSet, check_target, uid_of
from perfdiff.errors import CollectionError, InputError

if TYPE_CHECKING:
    from perfdiff.bundle import BundleWriter

STOP_GRACE_S = 5.0  # a started command gets this long after SIGTERM before SIGKILL


@dataclass(frozen=True)
class CollectOptions:
    """What to collect from, for how long, how often, and where to write the bundle.

    Exactly one of `pid` (a running process and its children) and `cmd` (a command to start)
    is given.  Durations in ns.  `gpus`: NVML indexes to sample (None: the target's GPUs).
    Kernel traces: the perfdiff agent by default, `nsys` (needs `cmd`), or none
    (`no_kernel_trace`).  `warn` is called with each warning line as it happens.
    """

    output: Path
    pid: int | None = None
    cmd: tuple[str, ...] = ()
    interval_ns: int = 100_000_000
    duration_ns: int | None = None  # None (or 0): until a signal or the target's end
    gpus: tuple[int, ...] | None = None
    nsys: bool = False
    nsys_trace: str = DEFAULT_TRACE
    no_kernel_trace: bool = False
    argv: tuple[str, ...] = ()  # recorded in the manifest's source
    warn: Callable[[str], None] | None = field(default=None, compare=False)
    # called about once a second with the run's progress (Collection.progress) plus "warnings"
    status: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", Path(self.output))
        object.__setattr__(self, "cmd", tuple(self.cmd))
        if (self.pid is None) == (not self.cmd):
            raise InputError("collect: give either a pid or a command")
        if self.interval_ns < MIN_INTERVAL_NS:
            raise InputError(f"collect: interval {self.interval_ns} ns is below the 1ms minimum")


@dataclass(frozen=True)
class CollectResult:
    """The sealed bundle: its path, status (complete, target-exited) and final manifest."""

    path: Path
    status: str
    manifest: dict[str, Any]
    warnings: tuple[str, ...] = ()

    def rows(self, table: str) -> int:
        return int(self.manifest["files"][table]["rows"])


CGROUP_INTERVAL_NS = 1_000_000_000  # cpu.stat once a second: throttling is a per-period count


def collect(options: CollectOptions) -> CollectResult:
    """Collect from `options.pid` or a started `options.cmd` into the bundle `options.output`."""
    o = options
    cmd = list(o.cmd)
    check_kernel_trace_options(o, cmd)
    out = o.output
    out_existed = _prepare_output(out)
    fs = ProcFS()
    if o.pid is not None:
        check_target(o.pid, fs)
    elif shutil.which(cmd[0]) is None:
        raise CollectionError(f"cannot start {cmd[0]!r}: No such file or directory (or not executable)")
    warnings: list[str] = []

    def warn(msg: str) -> None:
        warnings.append(msg)
        if o.warn is not None:
            o.warn(msg)

    # Everything slow (imports, the bundle, GPU initialisation) happens before a command is
    # started, so the collection sees it from its first instruction.  The samplers get the
    # target pids through `pids`, which answers once the target set exists.
    holder: list[TargetSet] = []

    def pids() -> set[int]:
        return holder[0].pids() if holder else set()

    gpus = None if o.gpus is None else list(o.gpus)
    samplers: list[Any] = [HostSampler(pids, interval_ns=o.interval_ns, procfs=fs),
                           CgroupCpuSampler(lambda: holder[0].root if holder else None, procfs=fs,
                                            interval_ns=max(o.interval_ns, CGROUP_INTERVAL_NS)),
                           PressureSampler(pids, lambda: holder[0].root if holder else None, procfs=fs,
                                           interval_ns=max(o.interval_ns, CGROUP_INTERVAL_NS))]
    gpu = gpu_sampler(pids, gpus, o.interval_ns, warn, proc_root=fs.proc)  # a bad --gpus raises before any output
    if gpu is not None:
        samplers.append(gpu)
    kernels = _kernel_trace_source(o, out, fs, warn)  # no nsys on PATH: CollectionError, nothing started
    if kernels is not None:
        samplers.append(kernels)
    markers = MarkerReader.announce() if cmd else MarkerReader.attach(o.pid, proc_root=fs.proc)
    manifest = {
        "source": {"kind": "collect", "perfdiff_version": __version__, "argv": list(o.argv or sys.argv)},
        "target": {"mode": "command" if cmd else "pid", "command": cmd},
        "host": host_info(fs),
    }
    from perfdiff.bundle import open_writer  # numpy, pandas, pyarrow: once the target is known to exist

    try:
        writer = open_writer(out, manifest)
    except OSError as exc:
        markers.close()
        for sampler in samplers:
            sampler.close()
        raise CollectionError(f"cannot create the bundle ({exc.strerror or exc})", path=out) from None

    child: subprocess.Popen[bytes] | None = None
    try:
        if cmd:
            try:
                env = {**os.environ, **markers.env()}
                launch = cmd
                if kernels is not None and hasattr(kernels, "env"):
                    env.update(kernels.env(env))  # the perfdiff agent in every Python process of the command
                if kernels is not None and hasattr(kernels, "wrap"):
                    launch = kernels.wrap(cmd)  # nsys launch --session-new=... CMD
                child = subprocess.Popen(launch, env=env)
            except OSError as exc:
                markers.close()
                if kernels is not None:
                    kernels.close()
                _remove_bundle(out, out_existed)
                raise CollectionError(f"cannot start {cmd[0]!r}: {exc.strerror or exc}") from None
        root = child.pid if child is not None else o.pid
        assert root is not None
        targets = TargetSet(root, procfs=fs, exclude={os.getpid()})
        holder.append(targets)
        info = targets.processes[root]
        writer.manifest["target"].update(pid=root, cmdline=info.cmdline, nspid=info.nspid, uid=uid_of(fs, root))
        markers.watch(root, info.nspid)
        status = _run(writer, targets, samplers, markers, child, o, warn, warnings)
    finally:
        if child is not None and child.poll() is None:
            _stop_child(child)
    return CollectResult(writer.path, status, writer.manifest, tuple(warnings))


def gpu_sampler(pids: Callable[[], set[int]], gpus: list[int] | None, interval_ns: int,
                warn: Callable[[str], None], proc_root: str = "/proc") -> Sampler | None:
    """The NVML sampler of the target's GPUs; None when there is no NVML binding, driver or
    GPU (said through `warn`).  When perfdiff's own GPU module fails to import (a broken
    install: it ships with perfdiff), a `BrokenSampler` carrying the error stands in, so the
    collection records a sampler-error with the reason instead of going on without GPUs."""
    try:
        from perfdiff.collectors.gpu import open_gpu_sampler
    except ImportError as exc:
        return BrokenSampler("nvml", exc)
    return open_gpu_sampler(pids, gpus=gpus, interval_ns=interval_ns, warn=warn, proc_root=proc_root)


class BrokenSampler:
    """A sampler whose module failed to import: its start raises that error, which the collect
    loop records as a sampler-error (method start, the error) followed by sampler-disabled."""

    def __init__(self, name: str, error: ImportError):
        self.name = name
        self.error = error

    def start(self, t_ns: int) -> None:
        raise ImportError(f"the {self.name} sampler cannot be imported ({type(self.error).__name__}: "
                          f"{self.error}): perfdiff's installation is broken; reinstall it")

    def sample(self, t_ns: int) -> dict:
        return {}

    def manifest(self) -> dict:
        return {"collector": {"name": self.name, "import_error": f"{type(self.error).__name__}: {self.error}"}}

    def close(self) -> None:
        pass


def _kernel_trace_source(o: CollectOptions, out: Path, fs: ProcFS, warn: Callable[[str], None]) -> Any:
    """Where kernels come from: nsys (--nsys), the perfdiff agent in the command (-- CMD) or in
    the running target (--pid; says plainly when it has none), or nothing (--no-kernel-trace)."""
    if o.no_kernel_trace:
        return None
    if o.nsys:
        from perfdiff.collectors.nsys_session import NsysSession

        return NsysSession(out / "nsys", warn=warn, trace=o.nsys_trace)
    from perfdiff.collectors.cupti.reader import AgentTraceSource

    if o.cmd:
        return AgentTraceSource.announce(warn)
    from perfdiff.collectors.attach import RemoteLoader

    assert o.pid is not None
    return AgentTraceSource.attach(o.pid, warn, proc_root=fs.proc, nspid=fs.inner_pid(o.pid),
                                   loader=RemoteLoader(procfs=fs))


def _prepare_output(path: Path) -> bool:
    """Refuse a non-empty output directory before anything starts; True when it exists (empty)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InputError("output exists and is not an empty directory", path=path)
    return path.exists()


def _run(writer: BundleWriter, targets: TargetSet, samplers: list[Any], markers: MarkerReader,
         child: subprocess.Popen[bytes] | None, o: CollectOptions, warn: Callable[[str], None],
         warnings: list[str]) -> str:
    """The collection proper, from the first tick to the sealed bundle; returns the status."""

    def poll_exit() -> str | None:
        if child is not None:
            return "command-exited" if child.poll() is not None else None
        return None if targets.root_alive() else "target-exited"

    def status(progress: dict[str, Any]) -> None:
        if o.status is not None:
            o.status({**progress, "warnings": len(warnings)})

    run = Collection(writer, targets, samplers, interval_ns=o.interval_ns, duration_ns=o.duration_ns,
                     markers=markers, poll_exit=poll_exit, warn=warn, status=status if o.status else None)
    try:
        status = run.run()
        run.stop_sources()
        extra: dict[str, Any] = {}
        if child is not None:
            if child.poll() is None:
                _stop_child(child)
                extra["stopped_by_collector"] = True
            extra["exit_code"] = child.returncode
        run.finish(status, warnings, **extra)
    except CollectionError:
        markers.close()  # what was written stays: it loads (status "running" reads as interrupted)
        for sampler in samplers:
            if getattr(sampler, "name", "") in ("kernel-trace", "nsys"):
                sampler.close()  # the agent hand-off directory in /dev/shm, the nsys session
        raise
    return status


def _remove_bundle(path: Path, keep_dir: bool) -> None:
    """Undo open_writer (the output was absent or empty before)."""
    shutil.rmtree(path, ignore_errors=True)
    if keep_dir:
        path.mkdir(exist_ok=True)


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the started command, SIGKILL it after STOP_GRACE_S, and reap it."""
    try:
        child.terminate()
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except OSError:
        pass
