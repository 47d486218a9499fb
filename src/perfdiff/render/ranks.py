"""The multi-rank report: the verdict, the rank table, each run's straggler analysis, the
findings across ranks and the rank mapping, as Markdown (names escaped), and its JSON."""
from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections import Counter
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

from perfdiff.analyze.gate_records import GateDecision
from perfdiff.model.schema import CycleSource
from perfdiff.ranks.records import (CollectiveTime, ExcessKind, GroupCode, IdentitySource, RankAnalysis, RankFinding,
                                    RankNotice, RankNoticeCode, RankVerdict, RankVerdictCode, ScopeCode, Straggler,
                                    StragglerCode)
from perfdiff.render.gate import gate_section
from perfdiff.render.text import NameTable, fmt_num, fmt_p, fmt_signed, fmt_signed_time, fmt_time_us, md_escape
from perfdiff.render.totals import rejected_text
from perfdiff.render.wording import device_plans_text, plan_text
from perfdiff.version import __version__

__all__ = ["RANKS_FORMAT", "rank_json", "rank_markdown", "ranks_text"]

RANKS_FORMAT = "perfdiff-rank-comparison"
RANKS_FORMAT_VERSION = 3
CAUSE_WIDTH = 60  # characters of a name in the rank table (the narrowest the report prints)
MAX_WAIT_ROWS = 16  # ranks listed per straggler table (the least waiting first)
LISTED_RANKS = 16  # numbers or ranges of ranks named in one sentence; beyond, how many more
MAX_RANK_ROWS = 32  # more ranks: the rank table shows the notable ones, the full table collapsed
SOURCE_WORDS = {IdentitySource.TRACE: "trace", IdentitySource.ENVIRONMENT: "launcher variables",
                IdentitySource.MANIFEST: "manifest", IdentitySource.NCCL: "NCCL rank (NVTX)",
                IdentitySource.DEVICE: "GPU used (device order)",
                IdentitySource.PROCESS: "pid order (nothing in the export names the ranks)",
                IdentitySource.FILE_NAME: "file name", IdentitySource.ORDER: "sorted order"}
EXCESS_WORDS = {ExcessKind.INPUT: "input (data loading)", ExcessKind.COMPUTE: "compute (GPU kernels)",
                ExcessKind.TRANSFER: "transfer (memcpy, memset)", ExcessKind.HOST: "host (CPU ranges, runtime calls)"}


def ranks_text(ranks: tuple[int, ...] | list[int], world: int) -> str:
    """"all 8 ranks", "both ranks", "rank 3", "ranks 1, 5 and 6" (of 8); three or more in a row
    as a range ("ranks 0–3 and 8"); beyond LISTED_RANKS numbers or ranges (and one more), how
    many ranks, the first LISTED_RANKS and how many more ("56 ranks (0, 2, 4, 6, 8, 10, 12, 14,
    16, 18, 20, 22, 24, 26, 28, 30 and 40 more)")."""
    ranks = sorted(set(ranks))
    if len(ranks) == world and world > 1:
        return "both ranks" if world == 2 else f"all {world} ranks"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    items: list[tuple[str, int]] = []  # (text, ranks it names)
    for run in runs:
        items += [(f"{run[0]}–{run[-1]}", len(run))] if len(run) >= 3 else [(str(r), 1) for r in run]
    if len(items) > LISTED_RANKS + 1:  # "and 1 more" would be no shorter than the one it hides
        more = sum(n for _, n in items[LISTED_RANKS:])
        return f"{len(ranks)} ranks (" + ", ".join(t for t, _ in items[:LISTED_RANKS]) + f" and {more} more)"
    if len(items) == 1:
        return f"ranks {items[0][0]}"
    return "ranks " + ", ".join(t for t, _ in items[:-1]) + f" and {items[-1][0]}"


def _per_cycle(us: float) -> str:
    return f"{fmt_signed_time(us)} per cycle"


def verdict_line(v: RankVerdict, names: NameTable, coll: CollectiveTime | None = None,
                 worlds: tuple[int, int] | None = None, pairs: dict[int, int] | None = None,
                 iterations: bool = True) -> str:
    """One verdict statement, its function named as `names` words it; `coll`: the analysis's
    collectives' own time (the counts of collectives, and whether it was measured); `worlds`:
    the runs' world sizes; `pairs`: the normal run's number of each abnormal rank compared,
    where --ranks paired other numbers; `iterations`: the cycles are iterations (else time
    windows or idle gaps)."""
    if v.code == RankVerdictCode.STRAGGLER:
        return _straggler_line(v, pairs or {})
    if v.code == RankVerdictCode.STRAGGLER_GONE:
        was = f" (its excess in {EXCESS_WORDS[v.excess]})" if v.excess else ""
        return (f"**straggler gone: rank {v.ranks[0]}**: in the normal run the other ranks waited "
                f"{fmt_time_us(v.size_us)} per cycle (median) in collectives for it{was}; in the abnormal run no rank "
                "holds the others back.")
    if v.code == RankVerdictCode.COLLECTIVES:
        return _collectives_line(v, coll, worlds)
    if v.code == RankVerdictCode.UNEXPLAINED:
        measured = coll is not None and math.isfinite(coll.delta_us)
        own = (", nor the collectives' own time," if measured
               else f" (the collectives' own time is not measured: {md_escape(coll.reason)})" if coll else "")
        none = "no straggler and no function of their own" if iterations else "no function of their own"
        line = (f"**the job's cycle changed ({_per_cycle(v.size_us)}), unexplained on the ranks compared**: {none}"
                f"{own} changed significantly and materially. Waits (synchronisation) are not read as causes, and a "
                "change spread thinly over many functions stays below the threshold.")
        if v.others:
            line += (f" {_left_out(v.others).capitalize()} {_verb(v.others, 'was', 'were')} not compared: the ranks "
                     f"compared may be waiting for {_them(v.others)}.")
        return line
    if v.code == RankVerdictCode.NO_CHANGE:
        compared = "the rank compared" if v.world == 1 else f"the {v.world} ranks compared"
        return f"**no change on any rank**: nothing significant and material on {compared}, nor in the job's cycle."
    word = ("slower" if v.size_us > 0 else "faster") if iterations else \
        f"{'more' if v.size_us > 0 else 'less'} time per cycle"
    return (f"**{word} on {ranks_text(v.ranks, v.world)}**: **{names.md(v.function or '', 80)}** "
            f"({_per_cycle(v.size_us)}, {fmt_signed(v.tau_pp)} pp of the abnormal cycle).")


def _straggler_line(v: RankVerdict, pairs: dict[int, int]) -> str:
    a_rank = v.ranks[0]
    rank = pairs.get(a_rank, a_rank)
    named = f"rank {rank}" + (f" (the abnormal run's rank {a_rank})" if rank != a_rank else "")
    where = f"; its excess is in **{EXCESS_WORDS[v.excess]}**" if v.excess else "; what it spends it in is unknown"
    # With ranks left out and no work of its own to show, it may only relay a wait: no "straggler" headline.
    head = f"**{named} arrives last**" if v.others and not v.excess else f"**straggler: {named}**"
    line = f"{head}: the other ranks wait {fmt_time_us(v.size_us)} per cycle (median) in collectives for it{where}."
    if v.others and not v.excess:
        line += (f" {_left_out(v.others).capitalize()} {_verb(v.others, 'was', 'were')} not compared: rank "
                 f"{rank} may only pass on a wait for {_them(v.others)}; {_way_out(v)}.")
    return line


def _collectives_line(v: RankVerdict, coll: CollectiveTime | None, worlds: tuple[int, int] | None) -> str:
    scope = f"{ranks_text(v.ranks, v.world)} compared" if v.world > 1 else f"rank {v.ranks[0]}, the one compared"
    longer = v.size_us > 0
    counts = coll is not None and math.isfinite(coll.count_n) and math.isfinite(coll.count_a) and coll.count_n > 0 \
        and coll.count_a > 0 and round(coll.count_n) != round(coll.count_a)
    # "slower" asserts the collective itself; with other possible causes the headline stays neutral.
    head = (f"{'more' if longer else 'less'} time in collectives" if counts or (longer and v.others)
            else f"collectives {'slower' if longer else 'faster'}")
    beyond = ", beyond waiting for one another" if v.world > 1 else ""
    line = (f"**{head} on {scope}**: {_per_cycle(v.size_us)} ({fmt_signed(v.tau_pp)} pp of the abnormal cycle) of "
            f"their own time{beyond}.")
    itself = "the collectives themselves take longer (network, NVLink, NCCL's settings, other traffic, more data)"
    if worlds is not None and worlds[0] != worlds[1]:
        # Each run's collectives join its own world: their cost, and the wait for ranks not
        # compared, differ with it.
        return (f"{line} The runs' world sizes differ ({worlds[0]} and {worlds[1]}): their collectives join "
                "different numbers of ranks and wait for the ranks not compared.")
    if counts:
        line += (f" A cycle holds {fmt_num(coll.count_n, 0)} → {fmt_num(coll.count_a, 0)} collectives, each "
                 f"{fmt_time_us(coll.mean_n_us / coll.count_n)} → {fmt_time_us(coll.mean_a_us / coll.count_a)} of "
                 "its own: the job issues more or fewer of them (bucket sizes, sharding, the model).")
        itself = "the collectives changed"
    if longer and v.others:
        line += (f" Either {_left_out(v.others)}, not compared, {_verb(v.others, 'arrives', 'arrive')} late, or "
                 f"{itself}; {_way_out(v, 'tell which')}.")
    elif longer and not counts:
        line += f" {itself[0].upper()}{itself[1:]}."
    return line


def _way_out(v: RankVerdict, then: str = "") -> str:
    """How to bring the ranks left out into the comparison: `--ranks all` pairs the ranks that
    pairing left out; a rank whose trace (or whose pair's) could not be cut needs a new profile."""
    if v.uncut and set(v.others) <= set(v.uncut):
        one = len(v.others) == 1
        whose = "its trace, or its pair's" if one else "their traces, or their pairs'"
        return (f"{whose}, lost the plan's markers "
                f"(see the notes), so only a new profile "
                + (f"can {then}" if then else f"of {_them(v.others)} can tell"))
    return "compare with `--ranks all`" + (f" to {then}" if then else "")


def _left_out(ranks: tuple[int, ...]) -> str:
    """"the abnormal run's rank 1", "the abnormal run's ranks 1, 2 and 5" (numbers as that run
    gives them: with --ranks N:A they differ from the normal run's)."""
    return f"the abnormal run's {_listed(ranks)}"


def _verb(ranks: tuple[int, ...], one: str, many: str) -> str:
    return one if len(ranks) == 1 else many


def _them(ranks: tuple[int, ...]) -> str:
    return "it" if len(ranks) == 1 else "them"


def finding_line(f: RankFinding, alpha: float, names: NameTable) -> str:
    word = "more" if f.delta_us > 0 else "less"
    scope = ranks_text(f.ranks, f.world)
    scope += " (every rank compared)" if f.code == ScopeCode.ALL_RANKS else f" only (of {f.world})"
    return (f"**{names.md(f.function, 80)}** ({md_escape(f.kind)}) took {fmt_time_us(abs(f.delta_us))} {word} per "
            f"cycle on {scope}: median τ {fmt_signed(f.tau_pp)} pp, q {fmt_p(f.q_max)} "
            f"(significant at α = {alpha:g}).")


def straggler_text(s: Straggler) -> str:
    run = "normal" if s.side == "normal" else "abnormal"
    if s.code == StragglerCode.NO_COLLECTIVES:
        return f"No straggler analysis of the {run} run: {md_escape(s.excess_reason)}."
    if s.code == StragglerCode.NOT_ITERATIONS:
        return (f"No straggler analysis of the {run} run: its cycles are not iterations, so collectives cannot be "
                "matched across ranks by them (see the plan above).")
    head = (f"{s.cycles} cycles, {s.collectives} matched collectives per cycle; the ranks' wait per cycle spreads "
            f"over {fmt_time_us(s.skew_us)} (median).")
    if s.grouped:
        head += (f" The collectives run on {len(s.groups)} communicators: each wait is read among its communicator's "
                 "members only (table below), and a rank's wait sums its communicators'.")
    if s.code == StragglerCode.NO_SKEW:
        quiet = (f"{head} No rank makes the others wait materially in the collectives (the least waiting rank saves "
                 "less than 2 % of the cycle)")
        if run == "normal":  # the baseline: no slowdown of its own to explain
            return quiet + "."
        return (f"{quiet}: if the run is slower, either every rank slowed alike, or a barrier "
                "before the collectives (a host synchronisation, a blocking call) lines the ranks up and makes the "
                "culprit indistinguishable here; look for the rank that waits least in that barrier.")
    if s.code == StragglerCode.UNSTABLE:
        return (f"{head} The last rank to arrive changes from cycle to cycle (the most frequent one is last no more "
                f"often than chance, p {fmt_p(s.p_last)}): no one rank holds the others back.")
    where = (f" Its excess over the other ranks' median is in **{EXCESS_WORDS[s.excess]}**" if s.excess
             else f" What it spends its excess in is unknown: {md_escape(s.excess_reason)}")
    parts = ", ".join(f"{k.value} {fmt_signed_time(v)}" for k, v in s.excess_us)
    return (f"{head} **Rank {s.culprit}** arrives last (in {fmt_num(100 * _share(s), 0)} % of cycles, p "
            f"{fmt_p(s.p_last)}) and waits least: it is the culprit, the others its victims.{where}"
            + (f" (per cycle: {parts})." if parts else "."))


def _share(s: Straggler) -> float:
    return next((w.last_share for w in s.waits if w.rank == s.culprit), math.nan)


def _listed(ranks: tuple[int, ...]) -> str:
    """ranks_text of the ranks ("rank 3", "ranks 0–15 and 21"); "" for none (a notice about
    the run, not its ranks)."""
    return ranks_text(ranks, 0) if ranks else ""


def notice_line(n: RankNotice) -> str:
    listed, one = _listed(n.ranks), len(n.ranks) == 1
    if n.code == RankNoticeCode.PLAN_IMPOSED:
        return (f"The {n.side} run's {listed} {'lacks' if one else 'lack'} the plan's cycle source on "
                f"{'its' if one else 'their'} own; {'it was' if one else 'they were'} cut by it anyway.")
    if n.code == RankNoticeCode.ITERATIONS_TRIMMED:
        return (f"Up to {n.count} cycles of a rank of the {n.side} run are left out: they are not on every rank "
                "of that run.")
    if n.code == RankNoticeCode.CYCLES_NOT_ITERATIONS:
        return ("These cycles are time windows or the spans between idle gaps, not iterations: they fall where each "
                "rank's own timing puts them, so no straggler analysis and no collectives' own time (both match "
                "collectives across ranks by iteration), and each function's own time per cycle also moves with "
                "the length of the iterations. ProfilerStep ranges, perfdiff markers or --cycle on a named range "
                "give iterations.")
    if n.code == RankNoticeCode.UNCUT:
        # Under --ranks N:A a pair's ranks differ in number: the other run's are named too.
        other = "abnormal" if n.side == "normal" else "normal"
        which = f" ({_listed(n.paired)} of the {other} run)" if n.paired and sorted(n.paired) != sorted(n.ranks) else ""
        return (f"The {n.side} run's {listed} {'has' if one else 'have'} too few of the markers the plan cuts at to be "
                f"cut by it (the profiler may have stopped early or failed on "
                f"{'it' if one else 'them'}): {'it is' if one else 'they are'} left out, with "
                f"{'its pair' if one else 'their pairs'} in the other run{which}.")
    if n.code == RankNoticeCode.PAIRED_BY_USER:
        return f"Ranks paired as --ranks says; the numbers are the normal run's: {listed}."
    if n.code == RankNoticeCode.UNPAIRED:
        return f"{listed[0].upper()}{listed[1:]} {'is' if one else 'are'} in one run only: not compared."
    if n.code == RankNoticeCode.NO_COLLECTIVES:
        return (f"The {n.side} run's {listed} {'has' if one else 'have'} no NCCL kernel, where the others have "
                f"them: {'it takes' if one else 'they take'} no part in the run's straggler analysis, and "
                f"{'its' if one else 'their'} wait in collectives is n/a.")
    if n.code == RankNoticeCode.GROUPS_UNKNOWN:
        whose = "both runs'" if n.side == BOTH else f"the {n.side} run's"
        one = one and n.side != BOTH
        return (f"The {'trace' if one else 'traces'} of {whose} {listed} {'does' if one else 'do'} not "
                "name the communicator (process group) of some or all of "
                f"{'its' if one else 'their'} collectives: for those, groups could not be told apart, and they "
                "are matched across every rank that has them. With several communicators (tensor and data parallel) "
                "a rank may then be blamed for a collective it does not join; PyTorch profiles that record the "
                "process group in the NCCL kernels' args, and nsys exports of NCCL's NVTX payloads "
                "(--include-blobs=true), avoid it.")
    return (f"The {n.side} run's {listed} {'declares' if one else 'declare'} another rank number than "
            f"{'its' if one else 'their'} file name gave.")


BOTH = "both"  # a notice's side when the same ranks of both runs share it


def _merged(notes: list[RankNotice]) -> list[RankNotice]:
    """The notes, with a communicator notice that names the same ranks in both runs said once."""
    groups = [n for n in notes if n.code == RankNoticeCode.GROUPS_UNKNOWN]
    if len(groups) != 2 or sorted(groups[0].ranks) != sorted(groups[1].ranks):
        return notes
    return [dataclasses.replace(n, side=BOTH) if n is groups[0] else n for n in notes if n is not groups[1]]


def _iteration_words(a: RankAnalysis) -> str:
    if a.plan.source == CycleSource.PROFILER_STEP:
        (n0, n1), (a0, a1) = a.iterations
        return f"the same ProfilerStep number: steps {n0}–{n1} in N, {a0}–{a1} in A"
    return "the same place in each rank's sequence of cycles"


def _renumbered(a: RankAnalysis) -> dict[int, int]:
    """The normal run's number of each abnormal rank compared, where --ranks paired ranks of
    other numbers (the report's rank numbers are the normal run's); {} otherwise."""
    if all(p.normal.rank == p.abnormal.rank for p in a.pairs):
        return {}
    return {p.abnormal.rank: p.rank for p in a.pairs}


def _rank_table(a: RankAnalysis, rows: tuple | list, names: NameTable) -> list[str]:
    culprit = a.stragglers[1].culprit
    held = f" (for rank {_renumbered(a).get(culprit, culprit)})" if culprit is not None else ""
    lines = ["| Rank | N: median cycle | A: median cycle | Δ | Top cause | τ (pp) | Wait in collectives N | "
             "Wait in collectives A |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        own = f"{names.md(r.cause, CAUSE_WIDTH)} ({md_escape(r.cause_kind or '')})" if r.cause else ""
        cause = (f"waits in collectives{held}" + (f", then {own}" if own else "")) if r.waited else own or "—"
        lines.append(f"| {r.rank} | {fmt_time_us(r.median_n_us)} | {fmt_time_us(r.median_a_us)} | "
                     f"{fmt_signed_time(r.delta_us)} | {cause} | "
                     f"{fmt_signed(r.wait_tau_pp if r.waited else r.cause_tau_pp)} | "
                     f"{fmt_time_us(r.wait_n_us)} | {fmt_time_us(r.wait_a_us)} |")
    return lines


def _ranks_section(a: RankAnalysis, names: NameTable) -> list[str]:
    """The rank table; with many ranks, the notable ones (culprits, a top cause, the largest
    |Δ|) first and every rank in a collapsed block."""
    if len(a.rows) <= MAX_RANK_ROWS:
        return _rank_table(a, a.rows, names) + [""]
    sn, sa = a.stragglers
    culprits = {sn.culprit, _renumbered(a).get(sa.culprit, sa.culprit)} - {None}
    notable = sorted(a.rows, key=lambda r: (r.rank not in culprits, r.cause is None, -abs(r.delta_us), r.rank))
    shown = sorted(notable[:MAX_RANK_ROWS // 2], key=lambda r: r.rank)
    return (_rank_table(a, shown, names) + ["", f"<details><summary>All {len(a.rows)} ranks</summary>", ""]
            + _rank_table(a, a.rows, names) + ["", "</details>", ""])


def _wait_table(s: Straggler) -> list[str]:
    if not s.waits:
        return []
    rows = sorted(s.waits, key=lambda w: (w.wait_us, w.rank))
    lines = ["| Rank | Wait per cycle (median) | Last to arrive (% of cycles) |", "|---|---|---|"]
    for w in rows[:MAX_WAIT_ROWS]:
        lines.append(f"| {w.rank} | {fmt_time_us(w.wait_us)} | {fmt_num(100 * w.last_share, 0)} % |")
    if len(rows) > MAX_WAIT_ROWS:
        lines.append(f"| … {len(rows) - MAX_WAIT_ROWS} more | | |")
    return lines


GROUP_WORDS = {GroupCode.CULPRIT: "arrives last: holds this group back",
               GroupCode.RELAY: "arrives last, late from waiting in another group",
               GroupCode.NO_SKEW: "members wait alike", GroupCode.UNSTABLE: "last member changes from cycle to cycle"}


def _group_table(s: Straggler) -> list[str]:
    """Per communicator: its members, who arrives last there and what that means."""
    if not s.groups:
        return []
    lines = ["| Communicator | Ranks | Collectives per cycle | Wait spread per cycle | Last to arrive | Reading |",
             "|---|---|---|---|---|---|"]
    for g in s.groups:
        last = str(g.last) if g.last is not None else "—"
        note = GROUP_WORDS[g.code]
        if g.code == GroupCode.RELAY:
            note += f" ({fmt_time_us(g.wait_elsewhere_us)} per cycle)"
        lines.append(f"| {md_escape(g.group) if g.group else 'unnamed'} | {', '.join(str(r) for r in g.ranks)} | "
                     f"{g.collectives} | {fmt_time_us(g.skew_us)} | {last} | {note} |")
    return lines


def _mapping(a: RankAnalysis) -> list[str]:
    """The pairs' inputs and how each was identified; with many ranks, a line that sums them
    up and the table collapsed."""
    lines = ["| Rank | N input | identified by | A input | identified by |", "|---|---|---|---|---|"]
    for p in a.pairs:
        def cell(i) -> str:
            name = Path(i.path).name + (f" (pid {i.pid})" if i.pid is not None else "")
            return f"{i.rank}: {md_escape(name)}"
        lines.append(f"| {p.rank} | {cell(p.normal)} | {SOURCE_WORDS[p.normal.source]} | {cell(p.abnormal)} | "
                     f"{SOURCE_WORDS[p.abnormal.source]} |")
    if len(a.pairs) <= MAX_RANK_ROWS:
        return lines
    same = all(p.normal.rank == p.abnormal.rank == p.rank for p in a.pairs)

    def how(side: str) -> str:
        counts = Counter(SOURCE_WORDS[getattr(p, side).source] for p in a.pairs)
        return ", ".join(f"{n} by {words}" for words, n in counts.most_common())

    head = (f"{len(a.pairs)} pairs" + (", each rank with the same rank of the other run" if same else "")
            + f". How the ranks were identified: in N, {how('normal')}; in A, {how('abnormal')}.")
    return [head, "", f"<details><summary>All {len(a.pairs)} pairs</summary>", "", *lines, "", "</details>"]


def _names(labels: tuple[str, str]) -> tuple[str, str]:
    """The inputs as the title names them: their last path parts, as many as it takes to tell
    them apart ("normal/report.sqlite" vs "abnormal/report.sqlite", not "report.sqlite" twice)."""
    # Absolute: "." names its folder, and "x" and "/x" are told apart by "/".
    n, a = Path(os.path.abspath(labels[0])).parts, Path(os.path.abspath(labels[1])).parts
    for k in range(1, max(len(n), len(a)) + 1):
        pair = str(PurePath(*n[-k:])), str(PurePath(*a[-k:]))
        if pair[0] != pair[1]:
            return pair
    return labels


def rank_markdown(a: RankAnalysis, labels: tuple[str, str], plots: list[str] | None = None,
                  plots_note: str | None = None, gate: GateDecision | None = None) -> str:
    """The report of a multi-rank comparison (`labels`: the normal and abnormal inputs); the
    functions' names apart from one another wherever they appear.  `plots`: picture files
    beside it, linked by relative path; `plots_note`: why there are none; `gate`: the CI gate's
    decision, stated after the verdict."""
    names = NameTable([f.function for f in a.findings] + [r.cause for r in a.rows if r.cause]
                      + [v.function for v in a.verdict if v.function] + ([a.plan.name] if a.plan.name else []))
    text = _markdown(a, labels, plots or [], plots_note, names, gate)
    listed = names.full()
    if listed:
        text += "\n".join(["", "<details><summary>Function names in full</summary>", ""]
                          + [f"- {n}" for n in listed] + ["", "</details>", ""])
    return text


def _markdown(a: RankAnalysis, labels: tuple[str, str], plots: list[str], plots_note: str | None,
              names: NameTable, gate: GateDecision | None = None) -> str:
    compared = f"{len(a.pairs)} rank{'s' if len(a.pairs) != 1 else ''} compared"
    # Cycles that are not iterations change how every figure below reads: said with the plan.
    unaligned = [n for n in a.notices if n.code == RankNoticeCode.CYCLES_NOT_ITERATIONS]
    notes = _merged([n for n in a.notices if n.code != RankNoticeCode.CYCLES_NOT_ITERATIONS])
    name_n, name_a = _names(labels)
    out = [f"# Cross-Rank Comparison: {md_escape(name_n)} vs {md_escape(name_a)}", "",
           f"*perfdiff {__version__}* · N = normal run ({md_escape(labels[0])}, world size {a.world_n}) · "
           f"A = abnormal run ({md_escape(labels[1])}, world size {a.world_a}) · {compared}, "
           f"on {a.workers} worker{'s' if a.workers != 1 else ''}", "",
           plan_text(a.plan, names).replace("Both runs are", "Every rank of both runs is")
           + (f" **{notice_line(unaligned[0])}**" if unaligned
              else f" Cycle k of every rank is the same iteration ({_iteration_words(a)}).")
           + (f" {passed}" if (passed := rejected_text(a.plan)) else ""), ""]
    # Ranks that each drive several GPUs: what each GPU's work alone would be cut at.
    per_gpu = device_plans_text(a.plan, names, "The ranks the plan was chosen on each drive")
    out += [per_gpu, ""] if per_gpu else []
    if a.cycle is not None:
        c = a.cycle
        per = ("per iteration, the median over ranks; then the median over iterations" if not unaligned
               else "per cycle k, the median over ranks; then the median over cycles")
        out += [f"Job cycle time ({per}): N "
                f"{fmt_time_us(c.median_n_us)}, A {fmt_time_us(c.median_a_us)} ({fmt_signed(c.change_pct)} %, "
                f"Mann–Whitney p {fmt_p(c.p)}).", ""]
    out += ["**Verdict:**", ""]
    out += [f"- {verdict_line(v, names, a.collectives, (a.world_n, a.world_a), _renumbered(a), not unaligned)}"
            for v in a.verdict] + [""]
    if gate is not None:
        out += [gate_section(gate), ""]
    out += ["## 1. Ranks", "", "Per rank: median cycle of each run, the function whose own time moved most "
            "(significant and material, in the direction of its cycle) — after its wait in collectives where that "
            "grew by at least half its Δ and by more than the function moved — with its change as τ, pp of the "
            "abnormal cycle, and the median time per cycle it waits in collectives for the last rank.", ""]
    out += _ranks_section(a, names)
    # A link's target percent-encoded: "#" would start a fragment, "(" ")" end the link.
    out += [f"![median cycle and wait in collectives, per rank]({quote(p)})" for p in plots] + ([""] if plots else [])
    if plots_note:
        out += [f"Pictures: {md_escape(plots_note)}", ""]
    out += ["## 2. Stragglers", ""]
    for s in a.stragglers:
        out += [f"**{'N: normal' if s.side == 'normal' else 'A: abnormal'} run.** {straggler_text(s)}", ""]
        out += _wait_table(s) + ([""] if s.waits else [])
        out += _group_table(s) + ([""] if s.groups else [])
    if a.collectives is not None:
        k = a.collectives
        p = f"Mann–Whitney p {fmt_p(k.p)}" if math.isfinite(k.p) else f"p n/a: {md_escape(k.reason)}"
        own = (f"N {fmt_time_us(k.mean_n_us)} in {fmt_num(k.count_n, 0)} collectives, A {fmt_time_us(k.mean_a_us)} "
               f"in {fmt_num(k.count_a, 0)} ({_per_cycle(k.delta_us)}, {fmt_signed(k.tau_pp)} pp, {p})"
               if math.isfinite(k.delta_us) else md_escape(k.reason))
        out += ["**The collectives' own time** per cycle, beyond the waits above (each rank's NCCL kernels less its "
                f"wait for the others compared; per iteration the median over ranks, then the mean): {own}.", ""]
    out += ["## 3. Findings Across Ranks", ""]
    if a.findings:
        out += [f"{i}. {finding_line(f, a.alpha, names)}" for i, f in enumerate(a.findings, 1)] + [""]
    else:
        out += ["No function changed significantly and materially on any rank.", ""]
    out += ["## 4. Rank Mapping", ""] + _mapping(a) + [""]
    if notes:
        out += ["## Notes", ""] + [f"- {notice_line(n)}" for n in notes] + [""]
    return "\n".join(out)


def _plain(x: Any) -> Any:
    if isinstance(x, enum.Enum):
        return x.value
    if dataclasses.is_dataclass(x):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def rank_json(a: RankAnalysis) -> dict[str, Any]:
    """Every record of the analysis as JSON-ready data (NaN as null)."""
    return {"format": RANKS_FORMAT, "format_version": RANKS_FORMAT_VERSION, "perfdiff_version": __version__,
            **_plain(a)}
