"""cupti-python as the in-target agent sees it: loading it, saying in one line why it refused,
CUPTI's names turned into perfdiff's labels, and where libcupti is.  Standard library only."""
from __future__ import annotations

import os
import sys
from typing import Any

CUDA_ROOTS = ("/usr/local/cuda",)  # toolkits searched for libcupti after $CUDA_HOME and $CUDA_PATH

RESULT_REASONS = {
    "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED":
        "another CUPTI client already holds this process: the PyTorch profiler, nsys or another tracer",
    "ERROR_NOT_INITIALIZED":
        "CUPTI could not attach to the CUDA driver, which is probably older than this CUPTI: install the "
        "cupti-python that matches the driver's CUDA version",
    "ERROR_NOT_COMPATIBLE": "CUPTI refused the global activity API: another client in this process uses "
                            "CUPTI's subscriber-scope API, or this CUPTI does not match the driver",
    "ERROR_CUDA_COMPILER_NOT_COMPATIBLE": "this CUPTI does not match the CUDA compiler the code was built with",
    "ERROR_INSUFFICIENT_PRIVILEGES": "CUPTI lacks the privileges to trace this process",
    "ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED": "CUPTI does not support this virtualised GPU",
    "ERROR_MIG_DEVICE_NOT_SUPPORTED": "CUPTI does not support tracing on this MIG device",
    "ERROR_WSL_DEVICE_NOT_SUPPORTED": "CUPTI does not support this GPU under WSL",
}


def import_cupti() -> Any:
    """The ``cupti.cupti`` module of cupti-python (ImportError when it is not installed)."""
    from cupti import cupti  # type: ignore[import-not-found]

    return cupti


def import_reason(exc: ImportError) -> str:
    """One line saying why cupti-python could not be imported."""
    if getattr(exc, "name", None) == "cupti":
        return "cupti-python is not installed in the target's Python (pip install cupti-python)"
    return f"cupti-python cannot be imported ({type(exc).__name__}: {exc})"


def cupti_reason(cupti: Any, exc: BaseException) -> str:
    """One line saying why CUPTI refused, from a cuptiError's status or any other exception."""
    status = getattr(exc, "status", None)
    if isinstance(exc, getattr(cupti, "cuptiError", ())) and status is not None:
        try:
            name = cupti.Result(status).name
        except (ValueError, AttributeError):
            name = f"status {status}"
        why = RESULT_REASONS.get(name, "CUPTI refused to trace")
        return f"{why} (CUPTI_{name})"
    return f"CUPTI could not be loaded ({type(exc).__name__}: {exc})"


def copy_kind_label(name: str) -> str:
    """`HTOD` → `HtoD` (CUPTI's enum spelling → the name Kineto and the nsys importer use)."""
    if len(name) == 4 and name[1:3] == "TO":
        return f"{name[0]}to{name[3]}"
    return name.title()


def api_name(cupti: Any, cbid: int) -> str:
    """The runtime call with callback id `cbid` (``cudaLaunchKernel_v7000``)."""
    try:
        return str(cupti.get_callback_name(cupti.CallbackDomain.RUNTIME_API, cbid))
    except Exception:  # noqa: BLE001 - a cbid this CUPTI cannot name
        return f"<runtime api {cbid}>"


def memory_label(cupti: Any, kind: int) -> str:
    """An ActivityMemoryKind value as a label (``Pinned``, ``Device Static``)."""
    try:
        return cupti.ActivityMemoryKind(kind).name.replace("_", " ").title()
    except (ValueError, AttributeError):
        return f"kind {kind}"


def memcpy_label(cupti: Any, ck: int, sk: int, dk: int) -> str:
    """A copy's name from its copy, source and destination kinds (``Memcpy HtoD (Pinned -> Device)``)."""
    try:
        copy = copy_kind_label(cupti.ActivityMemcpyKind(ck).name)
    except (ValueError, AttributeError):
        copy = f"kind {ck}"
    return f"Memcpy {copy} ({memory_label(cupti, sk)} -> {memory_label(cupti, dk)})"


_VERSION: list[str] = []


def cupti_python_version() -> str:
    """The installed cupti-python's version ("unknown" when not installed or a test fake)."""
    if not _VERSION:  # importlib.metadata scans sys.path: once per process
        try:
            from importlib.metadata import version

            _VERSION.append(version("cupti-python"))
        except Exception:  # noqa: BLE001 - not installed, or a test fake
            _VERSION.append("unknown")
    return _VERSION[0]


def loaded_library(fragment: str, maps: str = "/proc/self/maps") -> str | None:
    """Path of a shared library mapped in this process whose file name contains `fragment`."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.startswith("/") and fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def find_libcupti() -> str | None:
    """libcupti as cupti-python would load it, without loading it: the one mapped in this
    process, else the nvidia-cuda-cupti wheel on sys.path, else the CUDA toolkit ($CUDA_HOME,
    $CUDA_PATH, /usr/local/cuda) — cuda.pathfinder's order and directories for Linux."""
    import glob

    mapped = loaded_library("libcupti.so")
    if mapped:
        return mapped
    roots = [(p or ".", ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib")) for p in sys.path]
    toolkits = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *CUDA_ROOTS)
    roots += [(r, ("extras/CUPTI/lib64", "lib")) for r in toolkits if r]
    for root, subdirs in roots:
        for sub in subdirs:
            for soname in ("libcupti.so.13", "libcupti.so.12"):
                hits = glob.glob(os.path.join(root, sub, soname))
                if hits:
                    return os.path.abspath(hits[0])
    return None
