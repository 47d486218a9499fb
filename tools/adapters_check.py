"""Check the framework adapters' contract against the released sources of vLLM, SGLang and PyTorch.

    python tools/adapters_check.py [--cache DIR] [--only NAME[==VERSION]] [--plant NAME:Class.method=new]

For every release in MATRIX the wheel is fetched once (``pip download --no-deps``: the package
index is needed the first time), the few source files the adapters depend on are kept under
the cache directory (default ``~/.cache/perfdiff-adapters/NAME-VERSION/``, outside the
repository) and the wheel is deleted.  The files are parsed with ``ast`` — never imported —
and every module, class, method, signature and attribute that collectors/cupti/adapters relies
on is looked up.  Where the adapters accept alternatives (SGLang's three ways of receiving
requests, vLLM's step_fn) at least one must be there; the line printed per release says which
path gives the cycles, and what else the adapters must cope with there (a frozen receiver, a
heap frozen by gc.freeze(), an engine core started with fork).

``--plant NAME:Class.method=new`` renames a method in the parsed sources of NAME before checking
(the cache is not changed): the check must then fail.  Exit status 0 when every release meets
the contract, 1 otherwise, 2 when a release could not be fetched.

Standard library only; ``make adapters-check`` runs it (not part of ``make test``: it needs the
package index).  tests/test_adapters_check.py checks the checker on literal source snippets.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CACHE = Path(os.environ.get("PERFDIFF_ADAPTERS_CACHE", "~/.cache/perfdiff-adapters")).expanduser()

# The releases checked: vLLM's wheels are 300–500 MB each, so one per line where the adapters'
# names or the layout changed, and the newest; SGLang's are small (1–40 MB); PyTorch's global
# optimizer hooks have not changed since 2.0, and its wheels are large: one release.
MATRIX: dict[str, list[str]] = {
    "vllm": ["0.8.5.post1", "0.9.2", "0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.14.1", "0.20.2", "0.33.0"],
    "sglang": ["0.4.6.post5", "0.5.3.post3", "0.5.9", "0.5.12.post1", "0.5.13.post1", "0.5.16", "0.5.19",
               "0.5.20", "0.5.21", "0.5.23"],
    "torch": ["2.13.0+cpu"],
}

# Files kept from each wheel (fnmatch: "*" crosses "/").
KEEP: dict[str, list[str]] = {
    "vllm": ["vllm/__init__.py", "vllm/version.py", "vllm/_version.py", "vllm/envs.py", "vllm/utils.py",
             "vllm/utils/*.py", "vllm/v1/engine/*.py", "vllm/v1/core/*.py", "vllm/v1/executor/*.py",
             "vllm/v1/worker/gpu_worker.py", "vllm/executor/executor_base.py", "vllm/entrypoints/llm.py"],
    "sglang": ["sglang/version.py", "sglang/srt/managers/*.py", "sglang/srt/runtime_context.py",
               "sglang/srt/model_executor/forward_batch_info.py", "sglang/srt/disaggregation/prefill.py",
               "sglang/srt/disaggregation/decode.py", "sglang/srt/utils/common.py", "sglang/srt/utils.py"],
    "torch": ["torch/version.py", "torch/optim/optimizer.py", "torch/profiler/profiler.py"],
}


# ---------------------------------------------------------------------------- fetching

def fetch(name: str, version: str, cache: Path = CACHE) -> Path:
    """The kept sources of NAME==VERSION (downloaded and cut down on first use)."""
    dest = cache / f"{name}-{version}"
    if dest.is_dir():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="perfdiff-adapters-"))
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
                            "--only-binary", ":all:", "--ignore-requires-python", f"{name}=={version}",
                            "-d", str(tmp)], capture_output=True, text=True)
        wheels = sorted(tmp.glob("*.whl"))
        if not wheels:
            tail = [line for line in r.stderr.splitlines() if line.strip() and "Location" not in line][-1:]
            raise RuntimeError(f"pip download {name}=={version} failed: {' '.join(tail) or r.returncode}")
        part = Path(str(dest) + ".part")
        shutil.rmtree(part, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for member in z.namelist():
                if any(fnmatch.fnmatchcase(member, p) for p in KEEP[name]):
                    z.extract(member, part)
        os.replace(part, dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- the sources, parsed

class Sources:
    """Parsed modules by path ("vllm/v1/engine/core.py"), and their classes by name."""

    def __init__(self, files: dict[str, str]):
        self.trees: dict[str, ast.Module] = {}
        for path, text in files.items():
            try:
                self.trees[path] = ast.parse(text, filename=path)
            except SyntaxError:
                continue

    @classmethod
    def from_dir(cls, root: Path) -> Sources:
        return cls({str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
                    for p in root.rglob("*.py")})

    def has(self, path: str) -> bool:
        return path in self.trees

    def cls(self, path: str, name: str) -> ast.ClassDef | None:
        tree = self.trees.get(path)
        if tree is None:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        return None

    def any_cls(self, name: str, under: str = "") -> list[ast.ClassDef]:
        return [c for p, t in self.trees.items() if p.startswith(under) for c in ast.walk(t)
                if isinstance(c, ast.ClassDef) and c.name == name]

    def method(self, c: ast.ClassDef | None, name: str, under: str = "") -> ast.FunctionDef | None:
        """`name` defined in `c` or, through its base classes named in `c`, in a class of the
        same package (mixins, ExecutorBase); also under an `if` of the class body."""
        seen: set[str] = set()
        todo = [c] if c is not None else []
        while todo:
            k = todo.pop(0)
            if k.name in seen:
                continue
            seen.add(k.name)
            for node in _body(k.body):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return node  # type: ignore[return-value]
            for b in k.bases:
                bname = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                todo += self.any_cls(bname, under)
        return None

    def function(self, path: str, name: str) -> ast.FunctionDef | None:
        tree = self.trees.get(path)
        for node in _body(tree.body if tree else []):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node  # type: ignore[return-value]
        return None

    def plant(self, what: str) -> None:
        """Rename a method everywhere: "Class.method=new"."""
        target, new = what.split("=", 1)
        cname, meth = target.split(".", 1)
        for tree in self.trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name == cname:
                    for f in _body(node.body):
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == meth:
                            f.name = new


def _body(nodes: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body, those under `if`/`try` included (version switches)."""
    out: list[ast.stmt] = []
    for n in nodes:
        out.append(n)
        if isinstance(n, ast.If):
            out += _body(n.body) + _body(n.orelse)
        elif isinstance(n, ast.Try):
            out += _body(n.body) + _body(n.orelse) + _body(n.finalbody)
    return out


def required(fn: ast.FunctionDef | None) -> int:
    """Positional parameters without a default, `self` not counted."""
    if fn is None:
        return -1
    a = fn.args
    pos = a.posonlyargs + a.args
    return len(pos) - len(a.defaults) - 1


def positional(fn: ast.FunctionDef | None) -> int:
    """Positional parameters, `self` not counted (a *args counts as many)."""
    if fn is None:
        return -1
    return 99 if fn.args.vararg else len(fn.args.posonlyargs + fn.args.args) - 1


def calls(node: ast.AST | None, dotted: str) -> bool:
    """Whether `node` calls `dotted` ("self.ingest_requests", "gc.freeze", "freeze_gc_heap")."""
    if node is None:
        return False
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and _dotted(n.func) == dotted:
            return True
    return False


def assigns(node: ast.AST | None, attr: str) -> bool:
    """Whether `node` assigns ``self.<attr>``."""
    if node is None:
        return False
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == attr and _dotted(t.value) == "self":
                return True
    return False


def mentions(node: ast.AST | None, attr: str) -> bool:
    return node is not None and any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(node))


def fields(c: ast.ClassDef | None) -> set[str]:
    """Annotated fields of a (data)class body."""
    if c is None:
        return set()
    return {n.target.id for n in _body(c.body) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def frozen_dataclass(c: ast.ClassDef | None) -> bool:
    """``@dataclass(frozen=True)`` or ``slots=True``: no attribute can be set on an instance."""
    for d in c.decorator_list if c is not None else []:
        if isinstance(d, ast.Call) and _dotted(d.func).endswith("dataclass"):
            for kw in d.keywords:
                if kw.arg in ("frozen", "slots") and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    return True
    return False


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


# ---------------------------------------------------------------------------- the contract

@dataclass
class Result:
    """What one release gave: the names missing (the contract broken) and what it showed."""

    name: str
    version: str
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def need(self, ok: bool, what: str) -> bool:
        if not ok:
            self.missing.append(what)
        return ok

    @property
    def ok(self) -> bool:
        return not self.missing

    def line(self) -> str:
        head = f"{self.name} {self.version}: "
        if self.missing:
            return head + "FAIL — missing: " + "; ".join(self.missing) + ("; " + "; ".join(self.notes)
                                                                         if self.notes else "")
        return head + "ok — " + "; ".join(self.notes)


def check_vllm(src: Sources, version: str = "") -> Result:
    r = Result("vllm", version)
    core_py = "vllm/v1/engine/core.py"
    core = src.cls(core_py, "EngineCore")
    if not r.need(core is not None, f"{core_py}: class EngineCore"):
        return r
    step = src.method(core, "step")
    r.need(step is not None and required(step) == 0, "EngineCore.step(self)")
    bq = src.method(core, "step_with_batch_queue")
    proc = src.cls(core_py, "EngineCoreProc")
    r.need(proc is not None, f"{core_py}: class EngineCoreProc")
    busy = src.method(proc, "run_busy_loop") if proc is not None else None
    r.need(busy is not None, "EngineCoreProc.run_busy_loop")
    init, pinit = src.method(core, "__init__"), src.method(proc, "__init__") if proc else None
    for attr in ("scheduler", "model_executor"):
        r.need(assigns(init, attr), f"EngineCore.__init__ sets self.{attr}")
    where = ("EngineCore.__init__" if assigns(init, "step_fn") else "EngineCoreProc.__init__" if assigns(pinit, "step_fn")
             else "run_busy_loop (a local)" if mentions(busy, "step_fn") or _local(busy, "step_fn") else "")
    r.notes.append("cycles: EngineCore.step" + (", step_with_batch_queue" if bq is not None else "")
                   + (f" (step_fn bound in {where})" if where else " (the busy loop calls self.step)"))
    sched = src.cls("vllm/v1/core/sched/scheduler.py", "Scheduler")
    r.need(src.method(sched, "schedule") is not None, "vllm/v1/core/sched/scheduler.py: Scheduler.schedule")
    upd = src.method(sched, "update_from_output")
    r.need(upd is not None and positional(upd) >= 2, "Scheduler.update_from_output(self, scheduler_output, "
                                                       "model_runner_output)")
    out = src.cls("vllm/v1/core/sched/output.py", "SchedulerOutput")
    have = fields(out)
    for f in ("num_scheduled_tokens", "total_num_scheduled_tokens", "scheduled_new_reqs"):
        r.need(f in have, f"SchedulerOutput.{f}")
    r.need("req_id" in fields(src.cls("vllm/v1/core/sched/output.py", "NewRequestData")), "NewRequestData.req_id")
    if "scheduled_spec_decode_tokens" not in have:
        r.notes.append("no scheduled_spec_decode_tokens")
    ex = src.cls("vllm/v1/executor/abstract.py", "Executor")
    em = src.method(ex, "execute_model", under="vllm/")
    r.need(em is not None and positional(em) >= 1, "Executor.execute_model(self, scheduler_output, …)")
    if src.method(ex, "sample_tokens", under="vllm/") is not None:
        r.notes.append("sample_tokens")
    r.need(src.method(src.cls("vllm/v1/engine/output_processor.py", "OutputProcessor"), "process_outputs") is not None,
           "OutputProcessor.process_outputs")
    if calls(init, "freeze_gc_heap") or calls(init, "gc.freeze"):
        r.notes.append("heap frozen in EngineCore.__init__ (attach finds the engine from the threads' frames)")
    elif calls(pinit, "gc.freeze") or calls(pinit, "freeze_gc_heap"):
        r.notes.append("heap frozen in EngineCoreProc.__init__ (attach finds the engine from the threads' frames)")
    envs = src.trees.get("vllm/envs.py")
    if envs is not None and _default_fork(envs):
        r.notes.append("library engine core started with fork by default (the agent re-arms after fork)")
    r.need(src.has("vllm/v1/worker/gpu_worker.py"), "vllm/v1/worker/gpu_worker.py (PyTorch defers there)")
    return r


def _local(fn: ast.FunctionDef | None, name: str) -> bool:
    return fn is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(fn))


def _default_fork(tree: ast.Module) -> bool:
    """vllm/envs.py reads VLLM_WORKER_MULTIPROC_METHOD with the default "fork"."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            args = [a.value for a in n.args if isinstance(a, ast.Constant)]
            if "VLLM_WORKER_MULTIPROC_METHOD" in args and "fork" in args:
                return True
    return False


def check_sglang(src: Sources, version: str = "") -> Result:
    r = Result("sglang", version)
    sched_py = "sglang/srt/managers/scheduler.py"
    s = src.cls(sched_py, "Scheduler")
    if not r.need(s is not None, f"{sched_py}: class Scheduler"):
        return r
    under = "sglang/srt/"
    loops = [n for n in ("event_loop_normal", "event_loop_overlap") if src.method(s, n, under) is not None]
    r.need(bool(loops), "Scheduler.event_loop_normal or event_loop_overlap")
    r.need(src.method(s, "get_next_batch_to_run", under) is not None, "Scheduler.get_next_batch_to_run")
    rb = src.method(s, "run_batch", under)
    r.need(rb is not None and positional(rb) >= 1, "Scheduler.run_batch(self, batch, …)")
    pbr = src.method(s, "process_batch_result", under)
    r.need(pbr is not None and positional(pbr) >= 2, "Scheduler.process_batch_result(self, batch, result)")
    loop = src.method(s, loops[0], under) if loops else None
    ingest = src.method(s, "ingest_requests", under)
    recv = src.method(s, "recv_requests", under)
    receiver = src.cls("sglang/srt/managers/scheduler_components/request_receiver.py", "SchedulerRequestReceiver")
    rrecv = src.method(receiver, "recv_requests")
    if ingest is not None and calls(loop, "self.ingest_requests"):
        r.need(required(ingest) == 0, "Scheduler.ingest_requests(self) without required arguments")
        r.need(rrecv is not None and calls(ingest, "self.request_receiver.recv_requests"),
               "ingest_requests calls request_receiver.recv_requests")
        how = "iterations begin at Scheduler.ingest_requests"
    elif recv is not None and calls(loop, "self.recv_requests"):
        r.need(required(recv) == 0, "Scheduler.recv_requests(self)")
        how = "iterations begin at Scheduler.recv_requests"
    elif rrecv is not None and calls(loop, "self.request_receiver.recv_requests"):
        r.need(required(rrecv) == 0, "SchedulerRequestReceiver.recv_requests(self)")
        how = "iterations begin at request_receiver.recv_requests"
    else:
        r.need(False, "where an iteration receives: Scheduler.ingest_requests, Scheduler.recv_requests or "
                      "request_receiver.recv_requests, called by the event loop")
        how = ""
    if how:
        r.notes.append(how)
    if receiver is not None and frozen_dataclass(receiver):
        r.notes.append("receiver frozen (wrapped through its class)")
    if src.method(s, "handle_freeze_gc", under) is not None:
        r.notes.append("heap frozen on /freeze_gc")
    ranks = ("runtime_context.get_parallel()" if src.function("sglang/srt/runtime_context.py", "get_parallel")
             else "Scheduler.ps" if mentions(s, "ps") and assigns(src.method(s, "__init__", under), "ps")
             else "Scheduler.tp_rank" if assigns(src.method(s, "__init__", under), "tp_rank") or
             mentions(src.method(s, "__init__", under), "tp_rank") else "")
    r.need(bool(ranks), "the ranks: get_parallel(), Scheduler.ps or Scheduler.tp_rank")
    r.notes.append(f"ranks from {ranks}")
    batch = fields(src.cls("sglang/srt/managers/schedule_batch.py", "ScheduleBatch"))
    for f in ("reqs", "forward_mode", "extend_num_tokens", "decoding_reqs"):
        r.need(f in batch, f"ScheduleBatch.{f}")
    mode = src.cls("sglang/srt/model_executor/forward_batch_info.py", "ForwardMode")
    for m in ("is_extend", "is_decode", "is_mixed", "is_idle"):
        r.need(src.method(mode, m) is not None, f"ForwardMode.{m}")
    tm = src.cls("sglang/srt/managers/tokenizer_manager.py", "TokenizerManager")
    r.need(src.method(tm, "_handle_batch_output", under) is not None, "TokenizerManager._handle_batch_output")
    dm = src.cls("sglang/srt/managers/detokenizer_manager.py", "DetokenizerManager")
    r.need(src.method(dm, "handle_batch_token_id_out", under) is not None,
           "DetokenizerManager.handle_batch_token_id_out")
    r.need(src.has("sglang/srt/managers/tp_worker.py"), "sglang/srt/managers/tp_worker.py (PyTorch defers there)")
    return r


def check_torch(src: Sources, version: str = "") -> Result:
    r = Result("torch", version)
    opt = "torch/optim/optimizer.py"
    for f in ("register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"):
        fn = src.function(opt, f)
        r.need(fn is not None and positional(fn) + 1 == 1, f"{opt}: {f}(hook)")
    prof = src.cls("torch/profiler/profiler.py", "profile")
    st = src.method(prof, "step", under="torch/profiler/")
    r.need(st is not None and required(st) == 0, "torch.profiler.profile.step(self)")
    r.notes.append("cycles: optimizer step hooks, profiler.step")
    return r


CHECKS: dict[str, Callable[[Sources, str], Result]] = {"vllm": check_vllm, "sglang": check_sglang,
                                                        "torch": check_torch}


# ---------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where the sources are kept (default {CACHE})")
    ap.add_argument("--only", action="append", default=[], metavar="NAME[==VERSION]")
    ap.add_argument("--plant", action="append", default=[], metavar="NAME:Class.method=new",
                    help="rename a method in NAME's parsed sources (the check must then fail)")
    args = ap.parse_args(argv)
    plants: dict[str, list[str]] = {}
    for p in args.plant:
        name, what = p.split(":", 1)
        plants.setdefault(name, []).append(what)
    failed = unfetched = 0
    results: list[Result] = []
    for name, versions in MATRIX.items():
        for version in versions:
            if args.only and not any(o == name or o == f"{name}=={version}" for o in args.only):
                continue
            try:
                root = fetch(name, version, args.cache)
            except (RuntimeError, OSError, zipfile.BadZipFile) as exc:
                print(f"{name} {version}: NOT CHECKED — {exc}", flush=True)
                unfetched += 1
                continue
            src = Sources.from_dir(root)
            for what in plants.get(name, []):
                src.plant(what)
            res = CHECKS[name](src, version)
            results.append(res)
            failed += not res.ok
            print(res.line(), flush=True)
    summary = f"adapters-check: {len(results)} releases checked, {failed} failed"
    if unfetched:
        summary += f", {unfetched} not fetched"
    if plants:
        summary += " (planted: " + ", ".join(args.plant) + ")"
    print(summary)
    return 1 if failed else 2 if unfetched else 0


if __name__ == "__main__":
    sys.exit(main())
