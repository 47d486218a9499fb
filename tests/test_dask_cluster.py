"""Runs of many ranks on a real Dask cluster: a `dask scheduler` and two `dask worker`
processes on localhost, started with the distributed package's own commands, and `perfdiff
compare --scheduler ADDRESS` against them gives the report a local run gives."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

sys.path.insert(0, str(ROOT / "bench"))
import gen_ranks  # noqa: E402

DASK = shutil.which("dask", path=str(Path(sys.executable).parent))
pytestmark = [pytest.mark.live, pytest.mark.skipif(DASK is None, reason="the distributed package is not installed")]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([DASK, *args], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def cluster(tmp_path: Path):
    """The address of a scheduler with two single-threaded workers, each its own process."""
    file = tmp_path / "scheduler.json"
    procs = [_start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                     str(file)], tmp_path / "scheduler.log")]
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert file.exists(), (tmp_path / "scheduler.log").read_text()
        procs += [_start(["worker", "--scheduler-file", str(file), "--nthreads", "1", "--nworkers", "1",
                          "--no-dashboard", "--name", f"w{i}"], tmp_path / f"worker{i}.log") for i in range(2)]
        from distributed import Client

        address = json.loads(file.read_text())["address"]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            assert len(client.scheduler_info()["workers"]) == 2
        yield address
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_compare_on_a_real_cluster_reports_what_a_local_run_does(tmp_path: Path, cluster: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    n, a = gen_ranks.generate(tmp_path, fmt="kineto", plant=gen_ranks.Plant(straggler=2, dataloader_factor=10.0),
                              ranks=4, kernels=1_200, steps=16, collectives=3)
    on_cluster = run_cli(["compare", n, a, "--scheduler", cluster, "-o", tmp_path / "cluster.md",
                          "--json", tmp_path / "cluster.json"], capsys)
    local = run_cli(["compare", n, a, "--workers", "1", "-o", tmp_path / "local.md",
                     "--json", tmp_path / "local.json"], capsys)
    assert on_cluster[0] == local[0] == 0, on_cluster[2] + local[2]
    md = (tmp_path / "cluster.md").read_text()
    assert "rank 2" in md.lower() or "| 2 |" in md
    # The same comparison, wherever it ran: all but how many workers ran it and for how long.
    docs = []
    for name in ("cluster.json", "local.json"):
        doc = json.loads((tmp_path / name).read_text())
        docs.append({k: v for k, v in doc.items() if k not in ("workers", "phases")})
    assert docs[0] == docs[1]
    assert json.loads((tmp_path / "cluster.json").read_text())["workers"] == 2  # the cluster's two did the work
    assert [p["name"] for p in json.loads((tmp_path / "cluster.json").read_text())["phases"]] == \
        [p["name"] for p in json.loads((tmp_path / "local.json").read_text())["phases"]]
