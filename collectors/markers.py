"""Collector side of the cycle-marker transport (the target side is perfdiff.marker).

Two ways a target learns where to write (see perfdiff.marker for the file format):

* announced (``collect -- CMD``): the collector makes a private directory, passes it to the
  command in ``$PERFDIFF_MARKER_DIR``, and every process of the command creates its own
  ``<pid>.marks`` there; the reader picks up every file that appears.
* attached (``collect --pid``): the collector creates ``<pid>.marks`` for each target
  process in the target's well-known directory (``/dev/shm/perfdiff-markers-<uid>``, or the
  ``$PERFDIFF_MARKER_DIR`` found in the target's environment), reached through
  ``/proc/PID/root`` when the target lives in another mount namespace (a container).

The reader only ever reads new complete lines (a partial last line waits for the next read),
refreshes each file's atime so targets know someone listens, and removes the files it made
when it closes.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from perfdiff.collectors import procfs
from perfdiff.collectors.base import RowBuffer
from perfdiff.collectors.procfs import ProcFS
from perfdiff.marker import ENV_DIR, STALE_NS, SUFFIX, default_marker_dir
from perfdiff.model.schema import MISSING

READ_CHUNK = 1 << 20  # bytes read per file per call; the rest waits for the next call
ABANDONED_NS = 10 * STALE_NS  # a marks file nobody refreshed this long was left by a killed collector


@dataclass
class _MarksFile:
    path: str
    fd: int
    offset: int
    partial: bytes = b""


@dataclass
class MarkerStats:
    """What the reader saw, for the manifest."""

    files: int = 0
    marks: int = 0
    malformed: int = 0
    pids: list[int] = field(default_factory=list)


LOAD_METRICS = ("step_requests", "step_tokens", "step_prefill_tokens", "step_decode_tokens")


def parse_marks(data: bytes, out: RowBuffer) -> tuple[int, int]:
    """Parse whole lines into `out`: cycle marks ``start end tid name`` as markers, phase
    records ``R start end tid self name`` as activity of kind cpu (device Host, with their
    thread), load records ``L start end requests tokens prefill decode`` as the step_* samples
    (``-``: unknown, no row).  Returns (cycle marks, malformed lines)."""
    good = bad = 0
    ranges: dict[str, list] = {c: [] for c in ("function", "start_ns", "end_ns", "busy_ns", "tid")}
    for line in data.split(b"\n"):
        if not line:
            continue
        tag = line[:2]
        try:
            if tag == b"R ":
                parts = line.split(b" ", 5)
                start, end, tid, own = int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4])
                if end < start or start <= 0 or not 0 <= own <= end - start:
                    raise ValueError(line)
                for col, v in zip(ranges, (parts[5].decode("utf-8", "replace"), start, end, own, tid), strict=True):
                    ranges[col].append(v)
                continue
            if tag == b"L ":
                parts = line.split(b" ")
                start, end = int(parts[1]), int(parts[2])
                values = [None if p == b"-" else int(p) for p in parts[3:7]]
                if end < start or start <= 0 or len(values) != len(LOAD_METRICS):
                    raise ValueError(line)
                for metric, v in zip(LOAD_METRICS, values, strict=True):
                    if v is not None:
                        out.sample(metric, "Host", start, end, float(v))
                continue
            parts = line.split(b" ", 3)
            start, end, tid = int(parts[0]), int(parts[1]), int(parts[2])
            name = parts[3].decode("utf-8", "replace") if len(parts) == 4 else "cycle"
        except (ValueError, IndexError):
            bad += 1
            continue
        if end < start or start <= 0:
            bad += 1
            continue
        out.marker(name, start, end, tid, "perfdiff")
        good += 1
    n = len(ranges["function"])
    if n:
        out.add_columns("activity", {**ranges, "kind": ["cpu"] * n, "device": ["Host"] * n,
                                     "bytes": [MISSING] * n})
    return good, bad


class MarkerReader:
    """Reads the marks of the target processes into markers rows.

    `directory` is where the marks files live as seen by the collector.  `announced`: the
    directory is private to this collection and targets create their own files in it;
    otherwise the reader creates one file per target process with `watch`.
    """

    def __init__(self, directory: str, *, announced: bool, owner_uid: int | None = None,
                 remove_dir: bool = False):
        self.directory = directory
        self.announced = announced
        self.owner_uid = owner_uid
        self.remove_dir = remove_dir
        self.files: dict[str, _MarksFile] = {}
        self.stats = MarkerStats()
        self.errors: list[str] = []

    # ------------------------------------------------------------------ set-up

    @classmethod
    def announce(cls) -> "MarkerReader":
        """A private directory for `collect -- CMD` (in /dev/shm when there is one); pass `env()` on."""
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        directory = tempfile.mkdtemp(prefix="perfdiff-markers-", dir=shm)
        return cls(directory, announced=True, remove_dir=True)

    def env(self) -> dict[str, str]:
        """Environment entries that point a started command at this reader."""
        return {ENV_DIR: self.directory}

    @classmethod
    def attach(cls, pid: int, *, proc_root: str | ProcFS = "/proc") -> "MarkerReader":
        """The reader for an already running target `pid` (its well-known marker directory)."""
        fs = procfs.as_procfs(proc_root)
        uid = target_uid(pid, fs)
        root = fs.path(pid, "root") if other_mount_ns(pid, fs) else ""
        env_dir = target_env(pid, fs).get(ENV_DIR)
        directory = root + env_dir if env_dir else default_marker_dir(uid, root)
        return cls(directory, announced=False, owner_uid=uid)

    def watch(self, pid: int, nspid: int | None = None) -> None:
        """Create (attached mode) the marks file of target process `pid` so it starts marking.

        `nspid` is the pid as the target sees it (innermost PID namespace), which names its file.
        """
        if self.announced:
            return
        path = os.path.join(self.directory, f"{nspid or pid}{SUFFIX}")
        if path in self.files:
            return
        try:
            self._ensure_dir()
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            self.errors.append(f"cannot create {path}: {exc.strerror or exc}")
            return
        st = os.fstat(fd)
        if self.owner_uid is not None and os.geteuid() == 0 and st.st_uid != self.owner_uid:
            try:
                os.fchown(fd, self.owner_uid, -1)
            except OSError as exc:
                self.errors.append(f"cannot chown {path}: {exc.strerror or exc}")
        # A file left by an earlier collector may hold old marks: start at its end.
        self.files[path] = _MarksFile(path, fd, st.st_size)
        self.stats.pids.append(pid)
        self._touch(path)

    def _ensure_dir(self) -> None:
        if os.path.isdir(self.directory):
            if not self.files:
                self.sweep()
            return
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        if self.owner_uid is not None and os.geteuid() == 0:
            os.chown(self.directory, self.owner_uid, -1)

    def sweep(self) -> int:
        """Remove marks files that no collector refreshed for ABANDONED_NS (left by a collector
        killed with SIGKILL; their targets stopped writing to them long ago).  Returns how many."""
        now, removed = time.time_ns(), 0
        try:
            names = os.listdir(self.directory)
        except OSError:
            return 0
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                if name.endswith(SUFFIX) and now - os.stat(path, follow_symlinks=False).st_atime_ns > ABANDONED_NS:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
        return removed

    # ------------------------------------------------------------------ reading

    def _discover(self) -> None:
        if not self.announced:
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if not name.endswith(SUFFIX):
                continue
            path = os.path.join(self.directory, name)
            if path in self.files:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            self.files[path] = _MarksFile(path, fd, 0)
            try:
                self.stats.pids.append(int(name[: -len(SUFFIX)]))
            except ValueError:
                pass

    def read(self, out: RowBuffer) -> int:
        """Append every new complete mark to `out`; returns how many.  Refreshes atimes."""
        self._discover()
        total = 0
        for f in self.files.values():
            data = b""
            while True:
                try:
                    chunk = os.pread(f.fd, READ_CHUNK, f.offset)
                except OSError:
                    break
                if not chunk:
                    break
                f.offset += len(chunk)
                data += chunk
                if len(chunk) < READ_CHUNK:
                    break
            if data:
                data = f.partial + data
                cut = data.rfind(b"\n") + 1
                f.partial = data[cut:]
                good, bad = parse_marks(data[:cut], out)
                total += good
                self.stats.marks += good
                self.stats.malformed += bad
            self._touch(f.path)
        self.stats.files = len(self.files)
        return total

    @staticmethod
    def _touch(path: str) -> None:
        """Set the atime to now (mtime unchanged): the target's sign that someone listens."""
        try:
            st = os.stat(path)
            os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
        except OSError:
            pass

    def close(self, out: RowBuffer | None = None) -> None:
        """Read what is left into `out`, then remove the marks files (and a private directory)."""
        if out is not None:
            self.read(out)
        for f in self.files.values():
            try:
                os.close(f.fd)
            except OSError:
                pass
            # Removing the file tells the target to stop writing (also one a crashed collector
            # left and this one reused).
            try:
                os.unlink(f.path)
            except OSError:
                pass
        self.files.clear()
        if self.remove_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def manifest(self) -> dict[str, Any]:
        """Collector entry for the manifest."""
        return {
            "name": "markers",
            "transport": "append-only file per process",
            "directory": self.directory,
            "mode": "announced" if self.announced else "attached",
            "files": self.stats.files,
            "marks": self.stats.marks,
            "malformed": self.stats.malformed,
            "pids": sorted(set(self.stats.pids)),
            "errors": self.errors[:20],
        }


# ---------------------------------------------------------------------- /proc helpers


def target_uid(pid: int, proc_root: str | ProcFS) -> int | None:
    try:
        uid = procfs.field(procfs.as_procfs(proc_root).read(pid, "status"), b"Uid")
        return int(uid.split()[0]) if uid is not None else None  # real uid
    except (OSError, ValueError, IndexError):
        return None


def target_env(pid: int, proc_root: str | ProcFS) -> dict[str, str]:
    """The target's start-up environment (empty when unreadable)."""
    try:
        raw = procfs.as_procfs(proc_root).read(pid, "environ")
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def other_mount_ns(pid: int, proc_root: str | ProcFS) -> bool:
    fs = procfs.as_procfs(proc_root)
    try:
        return fs.readlink("self", "ns", "mnt") != fs.readlink(pid, "ns", "mnt")
    except OSError:
        return False
