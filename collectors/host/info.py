"""The manifest's host entry: what machine a run was collected on (read once, at the start)."""
from __future__ import annotations

import os
from typing import Any

from perfdiff.collectors.procfs import ProcFS


def cpu_model(fs: ProcFS) -> str:
    """The first "model name" of /proc/cpuinfo ("" where there is none, as on aarch64)."""
    try:
        for line in fs.read("cpuinfo").split(b"\n"):
            if line.startswith(b"model name"):
                return line.partition(b":")[2].decode().strip()
    except OSError:
        pass
    return ""


def host_info(procfs: ProcFS | None = None) -> dict[str, Any]:
    """The manifest's host entry: name, kernel, architecture, CPU model, logical CPUs, the
    clock-tick rate (Hz) and the page size (bytes)."""
    import psutil  # here: every perfdiff command imports the collectors for their parsers

    u = os.uname()
    return {
        "hostname": u.nodename,
        "kernel": u.release,
        "arch": u.machine,
        "cpu_model": cpu_model(procfs or ProcFS()),  # psutil has none
        "cores": psutil.cpu_count(),
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
    }
