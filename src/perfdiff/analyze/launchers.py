"""GPU functions one op replaced: kernels that vanished and kernels that are new under the
same launching op (perfdiff.launches), an implementation swapped (an attention backend, a
GEMM library).  docs/STATISTICS.md, "Replaced kernels"."""
from __future__ import annotations

import math
from collections.abc import Sequence

from perfdiff.analyze.evidence import Finding, FindingCode, ReplacedEvidence
from perfdiff.analyze.records import Analysis, FunctionStats, Replacement
from perfdiff.launches import Key, LaunchChains
from perfdiff.model.cuda_names import is_launch_call
from perfdiff.model.schema import GPU_KINDS, Kind

__all__ = ["replaced_findings", "replaced_functions", "replacements"]


def replacements(functions: Sequence[FunctionStats], chains_n: LaunchChains,
                 chains_a: LaunchChains) -> tuple[Replacement, ...]:
    """GPU functions that vanished and ones that are new, on one device, under one launching
    op: each vanished function goes to the innermost op of its chain that launches a new
    function of its device in the abnormal run, and each new function to the innermost op of
    its chain that took a vanished one.  Largest change of time first."""
    gpu = [i for i, f in enumerate(functions) if f.kind in GPU_KINDS]
    gone = [i for i in gpu if functions[i].presence == "vanished" and chains_n.get(_key(functions[i]))]
    new = [i for i in gpu if functions[i].presence == "new" and chains_a.get(_key(functions[i]))]
    if not gone or not new:
        return ()
    ops_new: dict[str, set[str]] = {}  # device → ops launching a new function there
    for i in new:
        ops_new.setdefault(functions[i].device, set()).update(chains_a[_key(functions[i])])
    took: dict[tuple[str, str], list[int]] = {}  # (device, op) → vanished functions
    for i in gone:
        f = functions[i]
        op = next((o for o in chains_n[_key(f)] if o in ops_new.get(f.device, ())), None)
        if op is not None:
            took.setdefault((f.device, op), []).append(i)
    given: dict[tuple[str, str], list[int]] = {}
    for i in new:
        f = functions[i]
        op = next((o for o in chains_a[_key(f)] if (f.device, o) in took), None)
        if op is not None:
            given.setdefault((f.device, op), []).append(i)
    # CPU ranges of one run only: the implementations' own ops, where a chain passes them
    cpu = {f.name: i for i, f in enumerate(functions) if f.kind == Kind.CPU.value and f.presence != "both"}
    out = []
    for (device, op), g in took.items():
        n = given.get((device, op))
        if not n:
            continue
        g = sorted(g, key=lambda i: -functions[i].t_n_us)
        n = sorted(n, key=lambda i: -functions[i].t_a_us)
        t_n = float(sum(functions[i].t_n_us for i in g))
        t_a = float(sum(functions[i].t_a_us for i in n))
        below = [o for i in g for o in _below(chains_n, functions[i], op)]
        below += [o for i in n for o in _below(chains_a, functions[i], op)]
        inner = sorted({cpu[o] for o in below if o in cpu})
        out.append(Replacement(op=op, device=device, gone=tuple(g), new=tuple(n), t_n_us=t_n, t_a_us=t_a,
                               inner=tuple(inner), launches_n=float(sum(functions[i].calls_n for i in g)),
                               launches_a=float(sum(functions[i].calls_a for i in n))))
    out.sort(key=lambda r: -abs(r.t_a_us - r.t_n_us))
    return tuple(out)


def _below(chains: LaunchChains, f: FunctionStats, op: str) -> tuple[str, ...]:
    """The ops of f's launching chain inside `op` (innermost first)."""
    chain = chains.get(_key(f), ())
    return chain[:chain.index(op)] if op in chain else ()


def _key(f: FunctionStats) -> Key:
    return (f.name, f.device, f.kind)


def replaced_functions(c: Analysis) -> list[int]:
    """The functions the replacements state: their kernels, their implementations' own ops,
    and the launch calls whose added calls per cycle the new kernels' launches account for."""
    out = [i for r in c.replacements for i in r.gone + r.new + r.inner]
    added = sum(r.launches_a - r.launches_n for r in c.replacements)
    if added > 0:
        out += [i for i, f in enumerate(c.functions) if f.kind == Kind.API and is_launch_call(f.name)
                and 0 < f.calls_a - f.calls_n <= added * math.exp(c.thresholds.same_calls_log) + 0.5]
    return out


def replaced_findings(c: Analysis) -> tuple[Finding, ...]:
    """One REPLACED finding per replacement: the op, its device, the kernels (gone, then new),
    their smallest q and their net change (pp of the abnormal cycle)."""
    def nz(x: float) -> float:
        return 0.0 if math.isnan(x) else x

    return tuple(Finding(FindingCode.REPLACED, function=r.op, device=r.device, related=r.gone + r.new,
                         q=min((c.functions[i].q_t for i in r.gone + r.new if not math.isnan(c.functions[i].q_t)),
                               default=math.nan),
                         evidence=ReplacedEvidence(gone=len(r.gone), t_n_us=r.t_n_us, t_a_us=r.t_a_us,
                                                   tau_pp=float(sum(nz(c.functions[i].tau_pp) for i in r.gone + r.new))))
                 for r in c.replacements)
