"""The one error type users can cause, carrying its exit code (docs/ARCHITECTURE.md, errors),
and what the entry point needs to report anything else (a bug) in one line."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

EXIT_OK = 0
EXIT_GATE = 1  # --fail-on: a regression (the gate judged, and it failed)
EXIT_INPUT = 2  # bad usage or bad input
EXIT_COLLECT = 3  # collection failed (no such pid, no permission, disk full)
EXIT_CANNOT_JUDGE = 4  # --fail-on: the gate could not judge (perfdiff.analyze.gate_records.GateReason)
EXIT_INTERNAL = 70  # a bug in perfdiff (EX_SOFTWARE of sysexits.h): anything but a PerfdiffError
_MAX_MESSAGE = 400  # characters of an error's message (the path comes on top)


class PerfdiffError(Exception):
    """An error the user can cause and fix; `main` prints its one line and exits with `code`."""

    code: int = EXIT_INPUT

    def __init__(self, message: str, *, path: object | None = None, code: int | None = None):
        if "\n" in message or "\r" in message:  # one line, whatever a library's message holds
            message = " ".join(message.split())
        if len(message) > _MAX_MESSAGE:  # a library's message can quote pages of its input
            message = message[:_MAX_MESSAGE - 1] + "…"
        self.path = None if path is None else str(path)
        if code is not None:
            self.code = code
        super().__init__(f"{self.path}: {message}" if self.path else message)


class InputError(PerfdiffError):
    """Bad usage or bad input: exit code 2."""

    code = EXIT_INPUT


class SeveralProcesses(InputError):
    """An nsys export in which two or more processes launched kernels, where the caller asked
    not to be given the most active one alone (`import_nsys(several_processes="raise")`): the
    command line compares such exports as ranks or process by process instead."""


class CollectionError(PerfdiffError):
    """Collection failed: exit code 3."""

    code = EXIT_COLLECT


class InternalError(Exception):
    """A bug met in a worker process, raised again in the parent: the original exception's
    type name and message, its traceback (text), and the input it was reading (or None)."""

    def __init__(self, type_name: str, message: str, traceback_text: str, input_path: str | None = None):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        self.perfdiff_input = input_path


def read_input_file(path: str | os.PathLike[str], expected: str) -> bytes:
    """The bytes of a file the user named; InputError naming it when it is missing, a folder
    (`expected`: what it should have been, e.g. "a server log file") or unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError(f"is a folder, expected {expected}", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None


@contextlib.contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name `path` as the input being read on any exception but a PerfdiffError leaving the
    block (attribute `perfdiff_input`, see `input_of`), so the entry point can say which
    input a bug met.  The innermost block names it."""
    try:
        yield
    except PerfdiffError:
        raise
    except Exception as exc:
        if getattr(exc, "perfdiff_input", None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                exc.perfdiff_input = os.fspath(path)  # type: ignore[attr-defined]
        raise


def input_of(exc: BaseException) -> str | None:
    """The input `exc` met while it was being read (`reading`), or None."""
    value = getattr(exc, "perfdiff_input", None)
    return None if value is None else str(value)
