"""The one error type users can cause, carrying its exit code (docs/ARCHITECTURE.md, errors)."""
from __future__ import annotations

EXIT_OK = 0
EXIT_GATE = 1  # --fail-on gate tripped
EXIT_INPUT = 2  # bad usage or bad input
EXIT_COLLECT = 3  # collection failed (no such pid, no permission, disk full)


class PerfdiffError(Exception):
    """An error the user can cause and fix; `main` prints its one line and exits with `code`."""

    code: int = EXIT_INPUT

    def __init__(self, message: str, *, path: object | None = None, code: int | None = None):
        self.path = None if path is None else str(path)
        if code is not None:
            self.code = code
        super().__init__(f"{self.path}: {message}" if self.path else message)


class InputError(PerfdiffError):
    """Bad usage or bad input: exit code 2."""

    code = EXIT_INPUT


class CollectionError(PerfdiffError):
    """Collection failed: exit code 3."""

    code = EXIT_COLLECT
