"""The range-tree diff in words: an indented Markdown tree (`tree_lines`), the report of
`perfdiff tree` (`tree_report`), the compare report's "Range tree" section (`tree_section`)
and the full table as CSV (`tree_csv`).  Names are escaped here (perfdiff.render.text).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Any

from perfdiff.analyze.tree_records import MATERIAL_RATIO, MATERIAL_SHARE, MIN_CYCLE_SHARE, RangeNode, TreeBasis, TreeDiff
from perfdiff.render.text import NA, NameTable, fmt_num, fmt_p, fmt_signed_time, fmt_time_us, md_escape, shorten
from perfdiff.version import __version__

NAME_WIDTH = 80
SECTION_LINES = 12  # lines of the tree the compare report shows before its details block
PATH_SEP = ";"  # joins a path's names in the CSV, as folded stacks do


@dataclass(frozen=True)
class TreeLabels:
    """What the report says about the inputs: run names and paths, and how cycles were found."""

    name_n: str
    name_a: str
    path_n: str
    path_a: str
    cycles: str = ""  # how the pair was cut, in words ("" without cycles)
    csv_name: str | None = None


def _name(n: RangeNode, names: NameTable) -> str:
    s = f"**{names.md(n.name, NAME_WIDTH)}**"
    if n.name_a is not None:
        s += f" ⇄ **{names.md(n.name_a, NAME_WIDTH)}**"
    return s


def _pair(n: RangeNode, vn: float, va: float) -> str:
    left = "—" if n.presence == "new" else fmt_time_us(vn)
    right = "—" if n.presence == "vanished" else fmt_time_us(va)
    return f"{left} → {right}"


def _calls(x: float) -> str:
    """Calls (per cycle or total): whole numbers as such, else three significant digits."""
    if not math.isfinite(x):
        return NA
    return f"{x:,.0f}" if x == round(x) else f"{x:,.3g}"


GPU_SIDE_MARK = " *(GPU timeline)*"  # after the top of a GPU-side tree: its spans are on a GPU stream


def node_line(n: RangeNode, names: NameTable) -> str:
    """One node: inclusive N → A (Δ, ratio, q, Cliff's δ); self; GPU; calls; its names as
    `names` words them."""
    mark = GPU_SIDE_MARK if n.gpu_side and n.depth == 0 else ""
    mark += {"new": " *(abnormal only)*", "vanished": " *(normal only)*"}.get(n.presence, "")
    change = [fmt_signed_time(n.delta_us)]
    if math.isfinite(n.ratio) and n.presence == "both":
        change.append(f"×{n.ratio:.3g}")
    if n.test is not None:
        change.append(f"q {fmt_p(n.q)}")
        if math.isfinite(n.test.cliffs_delta):
            change.append(f"δ {fmt_num(n.test.cliffs_delta)}")
    parts = [f"{_pair(n, n.incl_n_us, n.incl_a_us)} ({', '.join(change)})",
             f"self {_pair(n, n.self_n_us, n.self_a_us)}"]
    if math.isfinite(n.gpu_n_us) or math.isfinite(n.gpu_a_us):
        parts.append(f"GPU {_pair(n, n.gpu_n_us, n.gpu_a_us)}")
    parts.append(f"calls {_calls(n.calls_n)} → {_calls(n.calls_a)}")
    return f"{_name(n, names)}{mark}: " + " · ".join(parts)


def _subtree_sizes(d: TreeDiff) -> tuple[list[int], list[int]]:
    """(paths in each node's subtree, of them present in one run only), itself included."""
    size = [1] * len(d.nodes)
    one = [int(n.presence != "both") for n in d.nodes]
    for j in range(len(d.nodes) - 1, -1, -1):  # pre-order: children after their parent
        up = d.nodes[j].parent
        if up >= 0:
            size[up] += size[j]
            one[up] += one[j]
    return size, one


def tree_lines(d: TreeDiff) -> list[str]:
    """The tree as a nested Markdown list: nodes with a material change and their ancestors,
    children by |Δ|; the rest of each level collapsed into one line."""
    return _rendered(d)[0]


def _rendered(d: TreeDiff) -> tuple[list[str], list[str], list[str]]:
    """The tree's lines, the notes under it, and the names it shortened, in full, as a last
    note (none when it shortened none); the range names apart from one another (one
    NameTable of every name the tree shows)."""
    names = NameTable([n.name for n in d.nodes] + [n.name_a for n in d.nodes if n.name_a is not None]
                      + [x for pair in d.renames for x in pair])
    lines, notes = _lines(d, names), _notes(d, names)
    listed = names.full()
    return lines, notes, ["Range names in full: " + "; ".join(listed) + "."] if listed else []


def _lines(d: TreeDiff, names: NameTable) -> list[str]:
    size, one = _subtree_sizes(d)
    lines: list[str] = []

    def level(children: tuple[int, ...], depth: int) -> None:
        indent = "  " * depth
        hidden = [c for c in children if not d.nodes[c].changed_below]
        for c in children:
            if d.nodes[c].changed_below:
                lines.append(f"{indent}- {node_line(d.nodes[c], names)}")
                level(d.nodes[c].children, depth + 1)
        if hidden:
            # Not material is not unchanged: what these paths moved together (the outermost of
            # them; paths under them are inside it) stays in sight.
            k, k1 = sum(size[c] for c in hidden), sum(one[c] for c in hidden)
            moved = math.fsum(d.nodes[c].delta_us for c in hidden if math.isfinite(d.nodes[c].delta_us))
            extra = [f"{fmt_signed_time(moved)} together"] if abs(moved) >= 1.0 else []  # µs
            extra += [f"{k1} in one run only"] if k1 else []
            lines.append(f"{indent}- … {k} path{'s' if k != 1 else ''} without a material change"
                         + (f" ({', '.join(extra)})" if extra else ""))

    level(d.roots, 0)
    return lines


# The function table's own time leaves a range's CUDA calls out (they are functions of their
# own); the tree has no node for them, so they stay in its self time.
SELF_WORDS = ("Self time is a range's time outside the ranges inside it, its CUDA calls included (the function "
              "table's own time counts those calls apart).")


def _basis_text(d: TreeDiff, labels: TreeLabels) -> str:
    if d.basis == TreeBasis.PER_CYCLE:
        tests = "paired over matched cycles" if d.matched else "over the cycles"
        return (f"Inclusive time of each range path per cycle ({d.n_cycles[0]:,} normal and {d.n_cycles[1]:,} "
                f"abnormal cycles: {md_escape(labels.cycles)}), normal → abnormal (change, ratio, q and Cliff's δ "
                f"of the test {tests}); then self time, the GPU time of the work launched inside the range, and "
                f"calls, all per cycle. {SELF_WORDS} A change is material when it moves at least "
                f"{MATERIAL_SHARE:.0%} of the mean cycle and q ≤ {d.alpha:g}.")
    why = f" ({md_escape(labels.cycles)})" if labels.cycles else ""
    shares = [x for x in d.cycle_share if math.isfinite(x)]
    if shares and min(shares) < MIN_CYCLE_SHARE:
        why = (f" (the pair's cycles, {md_escape(labels.cycles)}, hold only {min(shares):.0%} of the top-level "
               "ranges' time)")
    return (f"Inclusive time of each range path in total over each run{why}, normal → abnormal (change, ratio); "
            f"then self time, the GPU time of the work launched inside the range, and calls. {SELF_WORDS} "
            f"A change is material "
            f"when it moves at least {MATERIAL_SHARE:.0%} of the largest top-level range and {MATERIAL_RATIO:.0%} "
            f"of the path's time.")


def _notes(d: TreeDiff, names: NameTable) -> list[str]:
    out = []
    rn, ra = (r if r != "no ranges" else None for r in d.gpu_reason)
    if rn and rn == ra:
        out.append(f"GPU time unknown in both runs: {md_escape(rn)}.")
    else:
        for side, reason in (("normal", rn), ("abnormal", ra)):
            if reason:
                out.append(f"GPU time unknown in the {side} run: {md_escape(reason)}.")
    for side, k in zip(("normal", "abnormal"), d.too_deep, strict=True):
        if k:
            out.append(f"{k:,} ranges of the {side} run nested too deep were left out.")
    if any(n.gpu_side for n in d.nodes):
        out.append("Ranges under a path marked *(GPU timeline)* are GPU-side: the span of an annotation's GPU work "
                   "on one stream, from its first kernel's start to its last one's end; their GPU time is the "
                   "work on that stream inside the span, per cycle in the cycle it was launched in.")
    if d.renames:
        out.append("Matched as one range (the same step under another name): "
                   + "; ".join(f"{names.md(a, 60)} (normal) ⇄ {names.md(b, 60)} (abnormal)"
                               for a, b in d.renames) + ".")
    return out


def tree_report(d: TreeDiff, labels: TreeLabels) -> str:
    """The Markdown report of `perfdiff tree`."""
    out = [f"# Range tree: {md_escape(labels.name_n)} (normal) vs {md_escape(labels.name_a)} (abnormal)", "",
           f"*perfdiff {__version__}* · N = normal run **{md_escape(labels.name_n)}** "
           f"({md_escape(shorten(labels.path_n, 60))}) · A = abnormal run **{md_escape(labels.name_a)}** "
           f"({md_escape(shorten(labels.path_a, 60))})", "", _basis_text(d, labels), ""]
    material = d.n_material
    out.append(f"{material} of {len(d.nodes):,} paths changed materially." if material else
               f"No path of {len(d.nodes):,} changed materially.")
    lines, notes, listed = _rendered(d)
    out += ["", *lines, ""]
    if labels.csv_name:
        notes.append(f"Every path, every column: {md_escape(labels.csv_name)}.")
    notes += listed
    for note in notes:
        out += [note, ""]
    return "\n".join(out)


def tree_section(d: TreeDiff, labels: TreeLabels) -> dict[str, Any]:
    """What the compare report's "Range tree" section prints: a sentence, the first lines of
    the tree, and the whole tree for a details block."""
    lines, notes, listed = _rendered(d)
    notes += listed
    top = lines[:SECTION_LINES]
    material = d.n_material
    lead = (f"{material} of {len(d.nodes):,} range paths changed materially" if material
            else f"No range path of {len(d.nodes):,} changed materially")
    return {"intro": lead + ". " + _basis_text(d, labels), "top": top, "more": len(lines) > len(top),
            "full": lines, "notes": notes}


CSV_COLUMNS = ["leaf", "path", "N_ms", "A_ms", "A-N_ms", "ratio", "basis", "presence", "renamed_to", "depth",
               "self_N_ms", "self_A_ms", "gpu_N_ms", "gpu_A_ms", "calls_N", "calls_A", "threads_N", "threads_A",
               "n_N", "n_A", "p_mwu", "q", "cliffs_delta", "hl_ms", "material", "side"]


def _ms(us: float, present: bool = True) -> str:
    return repr(float(us) / 1e3) if present and math.isfinite(us) else ""


def tree_csv(d: TreeDiff) -> bytes:
    """Every path of the tree (pre-order), one row each; a run's cells are empty where the
    path is absent from it or the value is unknown."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for n in d.nodes:
        in_n, in_a = n.presence != "new", n.presence != "vanished"
        t = n.test
        w.writerow([
            n.name, PATH_SEP.join(n.path), _ms(n.incl_n_us, in_n), _ms(n.incl_a_us, in_a),
            _ms(n.delta_us, in_n and in_a), _f(n.ratio) if in_n and in_a else "",
            str(d.basis), n.presence, n.name_a or "", n.depth,
            _ms(n.self_n_us, in_n), _ms(n.self_a_us, in_a), _ms(n.gpu_n_us, in_n), _ms(n.gpu_a_us, in_a),
            _f(n.calls_n) if in_n else "", _f(n.calls_a) if in_a else "", n.threads_n if in_n else "",
            n.threads_a if in_a else "",
            t.n_n if t else "", t.n_a if t else "", _f(t.p_mwu if t else math.nan), _f(n.q),
            _f(t.cliffs_delta if t else math.nan), _ms(t.hl) if t else "", int(n.material),
            "gpu" if n.gpu_side else "cpu"])
    return buf.getvalue().encode("utf-8")


def _f(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else ""
