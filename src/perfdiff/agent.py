"""Kernel traces from inside this program, for `perfdiff collect`.

    import perfdiff.agent            # starts the agent if the environment asks for it
    perfdiff.agent.start()           # or start it explicitly (e.g. in a server's start-up)

`perfdiff collect -- CMD` sets $PERFDIFF_AGENT_DIR and the agent records from the start.
Started without it, the agent waits idle (no CUPTI, no cost) until `perfdiff collect --pid`
asks it to record over its socket; $PERFDIFF_AGENT=1 makes the import itself start it so.

Start it before the program's first NVTX call, or NVTX ranges will not reach the trace (see
perfdiff.collectors.cupti.agent and docs/COLLECTORS.md).  Importing this module needs only
the standard library: without cupti-python (``pip install cupti-python``) the agent just
reports why there is no kernel trace, and the program runs on.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = ["start", "stop", "status"]


def _impl() -> ModuleType:
    # The copy `collect`'s bootstrap may have loaded from the collector's files (a target environment
    # without perfdiff, or another version of it) holds the running agent: use it, not a second one.
    loaded = sys.modules.get("_perfdiff_cupti_agent.agent")
    if loaded is not None:
        return loaded
    from perfdiff.collectors.cupti import agent

    return agent


def start(directory: str | None = None) -> Any:
    """Start (once) this process's agent; returns it.  Never raises for a missing cupti-python
    or a CUPTI that refuses: ``status()["reason"]`` says why there is no trace."""
    return _impl().start(directory)


def stop() -> dict[str, Any]:
    """Write what CUPTI holds and stop tracing; the agent's status ({} when none runs here)."""
    agent = _impl().current()
    return agent.stop_recording() if agent is not None else {}


def status() -> dict[str, Any]:
    """The agent's state, reason, record counts, dropped records ({} when none runs here)."""
    agent = _impl().current()
    return agent.status() if agent is not None else {}


_impl().start_from_env()
