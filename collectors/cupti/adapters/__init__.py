"""Framework adapters: engine steps of vLLM, SGLang and PyTorch training as cycles, without
changing the framework's code.

``install()`` (called when the agent starts in a process) puts an import hook first on
``sys.meta_path``: when the process imports one of the modules in ``TARGETS``, the module runs
as usual and the adapter then wraps its classes (modules imported already are wrapped at once).
What each adapter wraps is in its module (``vllm``, ``sglang``, ``pytorch``); what it records
and how is in ``record``.  A version whose names are not found stays unwrapped, with one
warning line naming what was missing (where only an ``OPTIONAL`` part lacks its names, that
part alone).  ``uninstall()`` removes the hook and every wrapper.
$PERFDIFF_ADAPTERS=0 turns the adapters off.

Records reach the collector through the marks file (perfdiff.marker): the installed perfdiff's
marker module, or, where the agent was loaded by path, the collector's copy named by
$PERFDIFF_MARKER_FILE.  Standard library only.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

from .record import Recorder

__all__ = ["TARGETS", "install", "installed", "status", "uninstall"]

ENV_ENABLE = "PERFDIFF_ADAPTERS"  # "0": no adapters
from ..wire import ENV_MARKER_FILE  # noqa: E402
MARKER_API = ("emit", "active", "encode_name", "cycle_line", "range_line", "load_line")

# module imported → (adapter module, function, what the warning calls it)
TARGETS: dict[str, tuple[str, str, str]] = {
    "vllm.v1.engine.core": ("vllm", "patch_core", "vLLM engine core"),
    "vllm.v1.engine.output_processor": ("vllm", "patch_output", "vLLM output processor"),
    "vllm.v1.engine.detokenizer": ("vllm", "patch_detokenizer", "vLLM detokenizer"),
    "sglang.srt.managers.scheduler": ("sglang", "patch_scheduler", "SGLang scheduler"),
    "sglang.srt.managers.tokenizer_manager": ("sglang", "patch_tokenizer", "SGLang tokenizer manager"),
    "sglang.srt.managers.detokenizer_manager": ("sglang", "patch_detokenizer", "SGLang detokenizer"),
    "torch.optim.optimizer": ("pytorch", "patch_optimizer", "PyTorch optimizer"),
    "torch.profiler.profiler": ("pytorch", "patch_profiler", "PyTorch profiler"),
}

# Phases of other processes than the engine step's: a version without them keeps its engine
# wrapped (one warning names the part left out); a missing engine name unwraps the process.
OPTIONAL = frozenset({"vllm.v1.engine.output_processor", "vllm.v1.engine.detokenizer",
                      "sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.detokenizer_manager"})

_REC: Recorder | None = None
_FINDER: _Finder | None = None


class _Loader:
    """The real loader of a target module, then the adapter once the module has run."""

    def __init__(self, loader: Any, after: Callable[[Any], None]):
        self._loader = loader
        self._after = after

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        # The module's own __loader__ is the real one again before anything can look at it.
        try:
            module.__loader__ = self._loader
            module.__spec__.loader = self._loader
        except AttributeError:
            pass
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder:
    """A meta-path finder that only ever answers for TARGETS, by asking the finders after it."""

    def __init__(self, after: Callable[[Any], None]):
        self._after = after
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in TARGETS or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader, self._after)
                    return spec
            return None
        except Exception:  # noqa: BLE001 - the normal import machinery takes over
            return None
        finally:
            self._busy.discard(fullname)

    def invalidate_caches(self) -> None:
        pass


def _marker(explicit: str | None = None) -> Any:
    """The marker module the records go through (see the module docstring); None if none fits."""
    if __package__ and __package__.startswith("perfdiff.") and explicit is None:
        from perfdiff import marker

        return marker
    mod = sys.modules.get("_perfdiff_marker")
    path = explicit or os.environ.get(ENV_MARKER_FILE)
    if mod is None and path and os.path.isfile(path):
        spec = importlib.util.spec_from_file_location("_perfdiff_marker", path)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
    if mod is None:
        try:
            from perfdiff import marker as mod  # type: ignore[no-redef]
        except Exception:  # noqa: BLE001
            return None
    return mod if all(hasattr(mod, f) for f in MARKER_API) else None


def _adapt(module: Any) -> None:
    """Run the adapter of an imported target module (never raises)."""
    rec = _REC
    if rec is None or not rec.enabled:
        return
    name = getattr(module, "__name__", "")
    adapter, func, what = TARGETS[name]
    try:
        mod = importlib.import_module(f"{__name__}.{adapter}")
        missing = getattr(mod, func)(module, rec)
        if missing:
            version = getattr(mod, "version", lambda: "")()
            rec.give_up(adapter, f"{what} ({name}{', version ' + version if version else ''})", missing,
                        undo=name not in OPTIONAL)
    except Exception as exc:  # noqa: BLE001
        rec.failed(adapter, f"{what} ({name}): adapter failed", exc)


def install(marker_file: str | None = None, warn: Callable[[str], None] | None = None) -> Recorder | None:
    """Install the import hook (once per process) and wrap target modules already imported;
    the Recorder, or None when turned off or no marker module fits.  Never raises."""
    global _REC, _FINDER
    try:
        if os.environ.get(ENV_ENABLE) == "0":
            return None
        if _REC is not None and _REC.enabled:
            return _REC
        if _REC is None:
            marker = _marker(marker_file)
            if marker is None:
                return None
            _REC = Recorder(marker, warn)
            _FINDER = _Finder(_adapt)
        _REC.enabled = True  # again after an uninstall (a second attach): wrap anew
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        _REC.late = True
        try:
            for name in TARGETS:
                module = sys.modules.get(name)
                if module is not None:
                    _adapt(module)
        finally:
            _REC.late = False
        return _REC
    except Exception as exc:  # noqa: BLE001
        try:
            sys.stderr.write(f"perfdiff agent: framework adapters not installed ({type(exc).__name__}: {exc})\n")
        except Exception:  # noqa: BLE001
            pass
        return None


def uninstall() -> int:
    """Remove the import hook and every wrapper; how many wrappers were removed."""
    rec, finder = _REC, _FINDER
    if finder is not None:
        try:
            sys.meta_path.remove(finder)
        except ValueError:
            pass
    if rec is None:
        return 0
    rec.enabled = False  # a method bound before removal (vLLM's step_fn) passes straight through
    return rec.undo()


def installed() -> Recorder | None:
    return _REC


def status() -> dict[str, Any]:
    """The adapters' part of the agent status ({} when not installed)."""
    return _REC.status() if _REC is not None else {}
