"""The range-tree diff: both runs' range trees (perfdiff.rangetree) matched path by path, with
each path's change and, when the pair has cycles, its tests.  Records only, no prose.

Paths are matched from the roots down by their (folded) names; of the children of a matched
node present in one run each, near-identical names are matched as one node (the same step
under another class name: perfdiff.analyze.align.match_renamed).  Values are per cycle when
the pair was cut into cycles, else totals over each run.  The tested quantity is a path's
inclusive time per cycle, with the statistics of the function table (docs/STATISTICS.md,
"Range tree").
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from perfdiff import stats
from perfdiff.analyze.align import match_renamed
from perfdiff.model.schema import Kind
from perfdiff.analyze.tree_records import (MATERIAL_RATIO, MATERIAL_SHARE, MIN_CYCLE_SHARE, RangeNode, TreeBasis,
                                           TreeDiff)
from perfdiff.rangetree import RangeProfile

__all__ = ["MATERIAL_SHARE", "RangeNode", "TreeBasis", "TreeDiff", "diff_trees"]  # the records: tree_records

NS_PER_US = 1e3
T_FLOOR_US = 1e-3  # the 1 ns timer resolution, in µs
TEST_MIN_SHARE = 0.001  # paths tested: pooled mean inclusive time ≥ 0.1 % of the pooled mean cycle
NAN = math.nan


def _children(p: RangeProfile) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, up in enumerate(p.parent.tolist()):
        out.setdefault(up, []).append(i)
    return out


_SIDES = ("Host", "GPU")  # a name's side, as match_renamed's device: renames stay on one side


def _match(pn: RangeProfile, pa: RangeProfile, per_cycle: bool
           ) -> tuple[list[tuple[int, int, int, tuple[str, ...], str | None]], list[tuple[str, str]]]:
    """Matched paths as (parent row, index in N or -1, index in A or -1, path, renamed-to),
    parents before children; and the renames made.  A GPU-side path matches GPU-side paths
    only; a rename, paths called about as often (per cycle where `per_cycle`)."""
    kids_n, kids_a = _children(pn), _children(pa)
    rows: list[tuple[int, int, int, tuple[str, ...], str | None]] = []
    renames: list[tuple[str, str]] = []
    stack: list[tuple[int, int, int, tuple[str, ...]]] = [(-1, -1, -1, ())]
    while stack:
        row, i_n, i_a, path = stack.pop()
        cn = {(pn.name[k], _SIDES[pn.is_gpu_side(k)]): k for k in kids_n.get(i_n, [])} if i_n >= 0 or row < 0 else {}
        ca = {(pa.name[k], _SIDES[pa.is_gpu_side(k)]): k for k in kids_a.get(i_a, [])} if i_a >= 0 or row < 0 else {}
        pairs = [(cn.get(key, -1), ca.get(key, -1), key[0], None) for key in dict.fromkeys([*cn, *ca])]
        only_n = [(*key, Kind.CPU.value) for key in cn if key not in ca]
        only_a = [(*key, Kind.CPU.value) for key in ca if key not in cn]
        if only_n and only_a:
            calls_n = calls_a = None
            if per_cycle:  # totals over runs of other lengths are no measure of "as often"
                calls_n = {(*key, Kind.CPU.value): _side(pn, cn[key], True)[3] for key in cn if key not in ca}
                calls_a = {(*key, Kind.CPU.value): _side(pa, ca[key], True)[3] for key in ca if key not in cn}
            for old, new in match_renamed(only_n, only_a, calls_n, calls_a):
                pairs = [pr for pr in pairs if (pr[0] < 0 or pr[0] != cn[old[:2]]) and (pr[1] < 0 or pr[1] != ca[new[:2]])]
                pairs.append((cn[old[:2]], ca[new[:2]], old[0], new[0]))
                renames.append((old[0], new[0]))
        for k_n, k_a, nm, renamed in pairs:
            rows.append((row, k_n, k_a, (*path, nm), renamed))
            stack.append((len(rows) - 1, k_n, k_a, (*path, nm)))
    return rows, renames


def _side(p: RangeProfile, i: int, per_cycle: bool) -> tuple[float, float, float, float, int]:
    """(inclusive µs, self µs, GPU µs, calls, threads) of path i of one run (zeros when absent)."""
    if i < 0:
        return 0.0, 0.0, 0.0 if p.gpu_ns is not None else NAN, 0.0, 0
    if per_cycle:
        k = max(p.n_cycles, 1)
        gpu = p.gpu_cyc_ns[i] / k / NS_PER_US if p.gpu_cyc_ns is not None else NAN
        return (p.incl_cyc_ns[i] / k / NS_PER_US, p.self_cyc_ns[i] / k / NS_PER_US, gpu,  # type: ignore[index]
                float(p.calls_cyc[i]) / k, int(p.threads[i]))  # type: ignore[index]
    gpu = p.gpu_ns[i] / NS_PER_US if p.gpu_ns is not None else NAN
    return p.incl_ns[i] / NS_PER_US, p.self_ns[i] / NS_PER_US, gpu, float(p.calls[i]), int(p.threads[i])


def _per_cycle_vector(p: RangeProfile, starts: np.ndarray, i: int) -> np.ndarray:
    """Path i's inclusive time in each cycle of its run, µs (zeros where it did not run)."""
    v = np.zeros(p.n_cycles)
    if i >= 0:
        path, cyc, val = p.incl_coo  # type: ignore[misc]
        sl = slice(int(starts[i]), int(starts[i + 1]))
        v[cyc[sl]] = val[sl] / NS_PER_US
    return v


def diff_trees(pn: RangeProfile, pa: RangeProfile, *, alpha: float = 0.05,
               cycle_ns: tuple[np.ndarray, np.ndarray] | None = None, matched: bool = False) -> TreeDiff:
    """Match both runs' range paths and compare them.

    `cycle_ns`: both runs' cycle durations (ns) when the pair was cut into cycles (the
    profiles then hold per-cycle sums); `matched`: cycle i of both runs does the same work
    (paired tests, as in the function table)."""
    share = (pn.cycle_share, pa.cycle_share)
    per_cycle = (cycle_ns is not None and pn.incl_coo is not None and pa.incl_coo is not None
                 and all(not math.isfinite(x) or x >= MIN_CYCLE_SHARE for x in share))
    rows, renames = _match(pn, pa, per_cycle)
    vals = []
    for _, i_n, i_a, _, _ in rows:
        vals.append((_side(pn, i_n, per_cycle), _side(pa, i_a, per_cycle)))
    if per_cycle:
        dn, da = cycle_ns  # type: ignore[misc]
        scale = float((dn.sum() + da.sum()) / (len(dn) + len(da))) / NS_PER_US
    else:
        scale = max((max(v[0][0], v[1][0]) for r, v in zip(rows, vals, strict=True) if r[0] < 0), default=0.0)
    tests: dict[int, stats.TwoSample] = {}
    if per_cycle:
        tests = _tests(pn, pa, rows, vals, scale, alpha, matched)
    q = stats.bh_qvalues([tests[j].p_mwu for j in sorted(tests)])
    qs = dict(zip(sorted(tests), q.tolist(), strict=True))
    nodes = []
    for j, ((up, i_n, i_a, path, renamed), (vn, va)) in enumerate(zip(rows, vals, strict=True)):
        presence = "both" if i_n >= 0 and i_a >= 0 else ("vanished" if i_a < 0 else "new")
        node = RangeNode(path=path, name_a=renamed, parent=up, children=(), presence=presence,
                         incl_n_us=vn[0], incl_a_us=va[0], self_n_us=vn[1], self_a_us=va[1], gpu_n_us=vn[2],
                         gpu_a_us=va[2], calls_n=vn[3], calls_a=va[3], threads_n=vn[4], threads_a=va[4],
                         test=tests.get(j), q=qs.get(j, NAN),
                         gpu_side=pn.is_gpu_side(i_n) if i_n >= 0 else pa.is_gpu_side(i_a))
        nodes.append(_with_material(node, scale, alpha, per_cycle))
    ordered, roots = _order(nodes)
    return TreeDiff(nodes=tuple(ordered), roots=roots, basis=TreeBasis.PER_CYCLE if per_cycle else TreeBasis.TOTAL,
                    alpha=alpha, scale_us=scale, n_cycles=(pn.n_cycles, pa.n_cycles) if per_cycle else (0, 0),
                    matched=matched and per_cycle, n_tests=len(tests), nested=(pn.nested, pa.nested),
                    gpu_reason=(pn.gpu_reason, pa.gpu_reason), too_deep=(pn.too_deep, pa.too_deep),
                    renames=tuple(renames), cycle_share=share)


def _tests(pn: RangeProfile, pa: RangeProfile, rows: list, vals: list, scale_us: float, alpha: float,
           matched: bool) -> dict[int, stats.TwoSample]:
    """The inclusive-time test of each path large enough to test (row → result)."""
    starts_n = np.searchsorted(pn.incl_coo[0], np.arange(pn.n_paths + 1))  # type: ignore[index]
    starts_a = np.searchsorted(pa.incl_coo[0], np.arange(pa.n_paths + 1))  # type: ignore[index]
    kn, ka = pn.n_cycles, pa.n_cycles
    test = stats.compare_paired if matched else stats.compare_samples
    out = {}
    for j, ((_, i_n, i_a, _, _), (vn, va)) in enumerate(zip(rows, vals, strict=True)):
        if (vn[0] * kn + va[0] * ka) / (kn + ka) < TEST_MIN_SHARE * scale_us:
            continue
        out[j] = test(_per_cycle_vector(pa, starts_a, i_a), _per_cycle_vector(pn, starts_n, i_n),
                      floor=T_FLOOR_US, alpha=alpha)
    return out


def _with_material(node: RangeNode, scale_us: float, alpha: float, per_cycle: bool) -> RangeNode:
    """The node with `material` set: its change moves ≥ MATERIAL_SHARE of the scale, and is
    significant (per cycle) or ≥ MATERIAL_RATIO of its larger time (totals).  A path in one
    run only needs the size alone."""
    big = abs(node.delta_us) >= MATERIAL_SHARE * scale_us and abs(node.delta_us) > 0
    if node.presence != "both":
        material = big
    elif per_cycle:
        material = big and math.isfinite(node.q) and node.q <= alpha
    else:
        material = big and abs(node.delta_us) >= MATERIAL_RATIO * max(node.incl_n_us, node.incl_a_us)
    return replace(node, material=bool(material))


def _order(nodes: list[RangeNode]) -> tuple[list[RangeNode], tuple[int, ...]]:
    """Nodes in pre-order, children by |Δ| (then name), with parent/children indexes and
    changed_below filled in."""
    kids: dict[int, list[int]] = {}
    for j, n in enumerate(nodes):
        kids.setdefault(n.parent, []).append(j)
    below = [n.material for n in nodes]
    for j in range(len(nodes) - 1, -1, -1):  # parents come before their children in `nodes`
        if below[j] and nodes[j].parent >= 0:
            below[nodes[j].parent] = True

    def key(j: int) -> tuple[float, str, bool]:
        return (-abs(nodes[j].delta_us), nodes[j].name, nodes[j].gpu_side)

    order: list[int] = []
    stack = sorted(kids.get(-1, []), key=key)[::-1]
    while stack:
        j = stack.pop()
        order.append(j)
        stack.extend(sorted(kids.get(j, []), key=key)[::-1])
    new = {old: k for k, old in enumerate(order)}
    out = []
    for old in order:
        n = nodes[old]
        out.append(replace(n, parent=new.get(n.parent, -1), changed_below=below[old],
                           children=tuple(new[c] for c in sorted(kids.get(old, []), key=key))))
    return out, tuple(new[j] for j in sorted(kids.get(-1, []), key=key))
