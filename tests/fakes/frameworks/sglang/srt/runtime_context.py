"""The process-wide parallel context of SGLang 0.5.17 and later (stand-in)."""
from __future__ import annotations


class ParallelContext:
    """Ranks published by the launcher; reading one not published raises, as SGLang's does."""

    __slots__ = ("_stamp",)

    def __init__(self):
        self._stamp: dict[str, int | None] = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._stamp:
            raise RuntimeError(f"parallel name {name!r} has not been written in this process")
        return self._stamp[name]

    def publish(self, **ranks: int | None) -> None:
        self._stamp.update(ranks)


_PARALLEL = ParallelContext()


def get_parallel() -> ParallelContext:
    return _PARALLEL
