"""What the CUPTI agent and the collector agree on: the hand-off files and the control socket.

Per target process P, in directory D:

    D/P.rec          append-only fixed-width records (REC: 48 bytes, little-endian)
    D/P.names        append-only ``id<TAB>name`` lines; a name is written before its records
    D/P.status.json  state, reason, counts, dropped records, clock anchors (replaced atomically)
    D/P.sock         control socket: one JSON line in ({"cmd": "start"|"stop"|"flush"|"status"}),
                     the status as one JSON line out; same uid or root only

Times in REC are CUPTI ns; the status's anchors map them to CLOCK_REALTIME ns.  Standard
library only: both the target and the collector import it.
"""
from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

WIRE_VERSION = 1  # of the files and the socket protocol; the bootstrap checks it
ENV_DIR = "PERFDIFF_AGENT_DIR"  # announced hand-off directory (collect -- CMD)
ENV_ENABLE = "PERFDIFF_AGENT"  # "1": `import perfdiff.agent` starts an idle agent (collect --pid)
ENV_FILE = "PERFDIFF_AGENT_FILE"  # the agent's module file, for targets where perfdiff is not importable
ENV_WIRE = "PERFDIFF_AGENT_WIRE"  # the collector's WIRE_VERSION
ENV_MARKER_FILE = "PERFDIFF_MARKER_FILE"  # the collector's perfdiff/marker.py, for the framework adapters

REQUEST_TIMEOUT_S = 10.0  # a socket request (a forced flush may take a while)

REC = struct.Struct("<B3xIqqIIIIQ")  # kind, name id, start, end, correlation, stream, device, tid, bytes
K_KERNEL, K_MEMCPY, K_MEMSET, K_API, K_RANGE = 1, 2, 3, 4, 5
KIND_NAMES = {K_KERNEL: "kernel", K_MEMCPY: "memcpy", K_MEMSET: "memset", K_API: "api", K_RANGE: "nvtx"}


def default_agent_dir(uid: int | None = None, root: str = "") -> str:
    """Where an agent not announced by `collect -- CMD` waits for a collector (per uid)."""
    base = "/dev/shm" if os.path.isdir(root + "/dev/shm") else "/tmp"
    return f"{root}{base}/perfdiff-agent-{os.getuid() if uid is None else uid}"


def request(path: str, cmd: str, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any] | None:
    """Send one command to the agent listening at `path`; its status, or None when none answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data)
        return reply if isinstance(reply, dict) else None
    except (OSError, ValueError):
        return None
