"""A live target under a real CPU quota: `perfdiff collect` outside and inside a cgroup with
cpu.max (v2) or cpu.cfs_quota_us (v1) of 0.1 CPU, compared; the verdict names CPU quota
throttling with the throttled time.  Needs a writable cgroup CPU controller (root on the
host, or a delegated cgroup); skipped with the reason elsewhere.  The cgroup is always removed."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import perfdiff
from perfdiff.analyze.verdict import VerdictCode

from test_collect_faults import live_host_lock  # noqa: E402

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workload.py"
PY = sys.executable
CGROUP = Path("/sys/fs/cgroup")
QUOTA_US, PERIOD_US = 10_000, 100_000  # 0.1 CPU: below what the loop gets even on a loaded host
SECONDS = 8  # per collection: about seven once-a-second cpu.stat readings, enough for q ≤ α under load


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def make_quota_cgroup(name: str) -> tuple[Path, str | None]:
    """A new child cgroup limited to 0.1 CPU: (its folder, the parent controller line this
    function turned on and must turn off, or None).  Raises pytest.skip with the reason when
    no CPU controller can be written here."""
    if (CGROUP / "cgroup.controllers").exists():  # cgroup v2
        if "cpu" not in (CGROUP / "cgroup.controllers").read_text().split():
            pytest.skip(f"cgroup v2 at {CGROUP}: the cpu controller is not available (not in cgroup.controllers)")
        enabled = None
        if "cpu" not in (CGROUP / "cgroup.subtree_control").read_text().split():
            try:
                _write(CGROUP / "cgroup.subtree_control", "+cpu")
            except OSError as exc:
                pytest.skip(f"cannot enable +cpu in {CGROUP}/cgroup.subtree_control: {exc.strerror}")
            enabled = "-cpu"
        folder = CGROUP / name
        limit = [("cpu.max", f"{QUOTA_US} {PERIOD_US}")]
    else:
        v1 = next((CGROUP / d for d in ("cpu", "cpu,cpuacct") if (CGROUP / d / "cpu.cfs_quota_us").exists()), None)
        if v1 is None:
            pytest.skip(f"no cgroup CPU controller at {CGROUP} (neither cgroup v2 nor a v1 cpu hierarchy)")
        enabled = None
        folder = v1 / name
        limit = [("cpu.cfs_period_us", str(PERIOD_US)), ("cpu.cfs_quota_us", str(QUOTA_US))]
    try:
        folder.mkdir()
    except OSError as exc:
        if enabled:
            _write(CGROUP / "cgroup.subtree_control", enabled)
        pytest.skip(f"cannot create a cgroup under {folder.parent}: {exc.strerror}")
    try:
        for f, v in limit:
            _write(folder / f, v)
    except OSError as exc:
        folder.rmdir()
        if enabled:
            _write(CGROUP / "cgroup.subtree_control", enabled)
        pytest.skip(f"cannot set a CPU quota in {folder}: {exc.strerror}")
    return folder, enabled


@pytest.fixture
def quota_cgroup() -> Iterator[Path]:
    folder, enabled = make_quota_cgroup(f"perfdiff-quota-test-{os.getpid()}")
    try:
        yield folder
    finally:
        # The targets have exited (each test waits for its own); an empty cgroup can be removed.
        folder.rmdir()
        if enabled:
            _write(CGROUP / "cgroup.subtree_control", enabled)


def collect(out: Path, cgroup: Path | None) -> None:
    """Start the CPU-bound marked workload (in `cgroup` from its first instruction when given),
    collect it for SECONDS with `perfdiff collect --pid`, then stop it."""
    argv = [PY, str(WORKLOAD), "--seconds", "60", "--work", "20000", "--wait-ms", "1"]
    if cgroup is not None:  # join the cgroup, then become the workload (same pid)
        argv = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" "$@"', *argv]
    target = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # past the interpreter's start-up
        assert target.poll() is None
        subprocess.run([PY, "-m", "perfdiff", "collect", "--pid", str(target.pid), "--duration", f"{SECONDS}s",
                        "--no-kernel-trace", "-o", str(out)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    finally:
        target.kill()
        target.wait()


def test_a_cpu_quota_is_named_with_its_throttled_time(tmp_path: Path, quota_cgroup: Path) -> None:
    with live_host_lock(exclusive=False):
        collect(tmp_path / "normal", None)
        collect(tmp_path / "abnormal", quota_cgroup)
    c = perfdiff.compare(tmp_path / "normal", tmp_path / "abnormal")
    quota = [v for v in c.verdict if v.code == VerdictCode.CPU_QUOTA]
    assert quota, [v.code for v in c.verdict]
    v = quota[0].detail
    # 0.1 CPU for a loop that wants most of one: throttled for much of every 100 ms period.
    assert v.throttled_ms_per_s_a > 100 and v.throttled_ms_per_s_n < v.throttled_ms_per_s_a / 10
    assert "**CPU quota throttling**: the target's cgroup was throttled" in c.to_markdown()
