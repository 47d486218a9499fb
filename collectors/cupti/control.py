"""The agent's end of the control socket: one JSON command line in, the answer as one JSON line
out, for peers of the same uid or root only (the protocol is in wire).  Standard library only."""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
from typing import Any, Callable

from .wire import REQUEST_TIMEOUT_S

MAX_PATH_BYTES = 107  # sun_path holds 108 bytes with its terminating NUL
MAX_REQUEST_BYTES = 4096


class ControlServer:
    """Listens on the Unix socket `path` on a daemon thread; `answer(cmd)` (cmd is None for a line
    without one) returns the reply.  `on_error(where, exc)` hears what went wrong."""

    def __init__(self, path: str, answer: Callable[[Any], dict[str, Any]],
                 on_error: Callable[[str, BaseException], None]):
        self.path = path
        self.answer = answer
        self.on_error = on_error
        self._listener: socket.socket | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def open(self) -> bool:
        """Bind and listen (replacing a socket file left by an earlier process with this pid),
        then serve; False when impossible."""
        if self._listener is not None:
            return True
        path = self.path
        if len(path.encode()) > MAX_PATH_BYTES:
            self.on_error("socket", OSError(f"path too long for a Unix socket: {path}"))
            return False
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            if os.path.exists(path):
                os.unlink(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(8)
            sock.settimeout(1.0)
        except OSError as exc:
            self.on_error("socket", exc)
            return False
        self._listener = sock
        threading.Thread(target=self._serve, args=(sock,), name="perfdiff-agent-control", daemon=True).start()
        return True

    def close(self, *, unlink: bool = True) -> None:
        """Stop listening; `unlink`: remove the socket file too (a forked child leaves the
        parent's)."""
        sock, self._listener = self._listener, None
        if sock is not None:
            try:
                sock.close()
                if unlink:
                    os.unlink(self.path)
            except OSError:
                pass

    def _serve(self, sock: socket.socket) -> None:
        while self._listener is sock:
            try:
                conn, _ = sock.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return
            with conn:
                try:
                    self._reply(conn)
                except (OSError, ValueError) as exc:
                    self.on_error("control", exc)

    def _reply(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT_S)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid not in (os.getuid(), 0):
            return
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_REQUEST_BYTES:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        req = json.loads(data or b"{}")
        reply = self.answer(req.get("cmd") if isinstance(req, dict) else None)  # else: an unknown command
        conn.sendall(json.dumps(reply, default=str).encode() + b"\n")
