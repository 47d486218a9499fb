"""Which functions are waits: calls that spend their time waiting for something else (a
stream, an event, a lock, a poll), so that their growth is a symptom of a slower cause, not
a cause.  Standard library only: the ranks' workers classify names without the analysis."""
from __future__ import annotations

import re

__all__ = ["HOST_STATES", "WAIT_PATTERNS", "is_wait"]

WAIT_PATTERNS = re.compile(
    r"(Synchronize|cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize|cudaStreamWaitEvent|"
    r"hipDeviceSynchronize|hipStreamSynchronize|hipEventSynchronize|"
    r"^(poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|futex|pthread_cond_wait|pthread_cond_timedwait|"
    r"pthread_join|sem_wait|sem_timedwait|nanosleep|clock_nanosleep|usleep|sleep|wait|waitpid)$)")
# The host's scheduler states are rows of kind "host" too; "blocked" is time, not a call.
HOST_STATES = ("runq", "blocked", "iowait", "oncpu")


def is_wait(name: str, kind: str) -> bool:
    """A wait spends its time waiting for something else: a symptom, not a cause."""
    if kind not in ("api", "host", "cpu"):
        return False
    if kind == "host" and name in HOST_STATES:
        return False
    return bool(WAIT_PATTERNS.search(name))
