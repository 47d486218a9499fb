"""One server log read into one column of the startup table: seconds per phase row.

Pass 1 reads the whole file for launch and readiness lines only; pass 2 reads the phases of the
chosen launch up to its readiness line.  Per row, repeated lines are reduced within a rank and
then across ranks; what the engine did not print is derived and marked so; the totals are added
last (docs/STARTUP.md).  Every value is in seconds.  A phase the log does not show is absent
(rendered "--"), never 0.  Pure: nothing here prints or writes.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfdiff.errors import InputError, read_input_file
from perfdiff.startup.rules import (
    HEADER_RE,
    LAUNCH_RULES,
    PROC_RE,
    READY_LABELS,
    READY_ORDER,
    RULES,
    SGLANG_RANKS_RE,
    SUM_ROWS,
    TOTAL_ANCHORS,
    TOTAL_EXPECTED,
    TOTAL_PARTS,
    Rule,
)
from perfdiff.startup.scan import (
    Event,
    Launch,
    api_server_starts,
    choose_launch,
    clean_text,
    header_after,
    header_before,
    is_phase,
    resolve_years,
    scan_events,
    split_launches,
    stamp_from,
)

# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class PhaseValue:
    """One cell: seconds after the reduction over lines and ranks, with how it was obtained."""

    value_s: float
    decimals: int  # display resolution: what the log printed, 0 for 1 s timestamps
    derived: str | None = None  # how it was derived; None when the engine printed it
    n_ranks: int = 1  # ranks that printed it; value_s is their maximum
    min_s: float = math.nan  # fastest rank (equals value_s for one rank)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StartupColumn:
    """One log: its phases (absent rows are missing from `phases`) and what the footnote says."""

    name: str
    file: str
    engine: str  # "vLLM V0", "vLLM V1", "vLLM", "SGLang"
    version: str | None
    status: str  # "complete" | "incomplete"
    ready_marker: str | None
    ready_line: int | None
    n_launches: int
    launch: int  # 1-based index of the launch parsed
    first_line: int
    last_line: int
    ranks_seen: tuple[str, ...]
    tp: int | None
    compile_cache: str | None  # "hit", "miss", "hit and miss", None (no compile lines)
    phases: dict[str, PhaseValue]
    notes: tuple[str, ...] = ()
    extras: dict[str, float] = field(default_factory=dict)  # e.g. init engine "compilation"
    compile_units: tuple[str, ...] = ()  # 0.32+ tags: "[backbone] Dynamo bytecode ..."


# ---------------------------------------------------------------------------------------------
# Reduction and derivation (docs/STARTUP.md: Ranks and repeated lines, Derived values, Totals)


# Rows whose lines of one rank can run at once (the cache loads of several compile ranges):
# they count the wall time their lines cover, not their sum.
OVERLAP_ROWS = frozenset({"graph_compile_cached"})


def covered_s(hits: Sequence[Event], times: dict[int, float]) -> float | None:
    """Wall time (s) the lines `hits` cover: each is the interval of its value ending at its
    time stamp, and the union of the intervals is measured.  A stamp of 1 s resolution says
    the line ended within that second, so each end is put as late as its second allows
    without passing the last line's stamp: lines whose stamps differ by up to 1 s are taken
    to end together (the smallest union the stamps allow).  None when a line has no stamp."""
    if any(h.pos not in times or h.value is None for h in hits):
        return None
    last = max(times[h.pos] for h in hits)
    spans = []
    for h in hits:
        resolution = 0.0 if h.stamp is not None and h.stamp.fractional else 1.0
        end = min(times[h.pos] + resolution, last)
        spans.append((end - float(h.value), end))
    total, reach = 0.0, -math.inf
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def _reduce_rank(row: str, hits: list[Event], compile_took: bool,
                 dynamo_pos: list[tuple[int, str | None]], times: dict[int, float]
                 ) -> tuple[float, int, str | None, str | None]:
    """One rank's value of a row: sum, max-per-pass, the wall time covered or the last line.

    Returns (seconds, decimals, warning, note on the cell).
    """
    dec = max(h.decimals for h in hits)
    if row in OVERLAP_ROWS and len(hits) > 1:
        added = sum(float(h.value) for h in hits if h.value is not None)
        covered = covered_s(hits, times)
        if covered is not None and covered < added - 1e-9:
            return covered, dec, None, (f"{len(hits)} lines overlap in time ({added:.{dec}f} s added up): "
                                        "the wall time they cover")
    if row == "graph_compile_general_shape":
        plain = [h for h in hits if h.groups.get("lo") is None]
        ranged = [h for h in hits if h.groups.get("lo") is not None]
        total = sum(h.value for h in plain)
        if ranged and compile_took:
            # 0.18+: all ranges of one pass compile interleaved and each line measures the
            # same window, so a pass costs its longest line; passes follow each other.
            passes: dict[tuple[str | None, int], float] = {}
            for h in ranged:
                n = sum(1 for p, u in dynamo_pos
                        if p <= h.pos and (u == h.unit or u is None or h.unit is None))
                key = (h.unit, n)
                passes[key] = max(passes.get(key, 0.0), h.value)
            total += sum(passes.values())
        else:
            total += sum(h.value for h in ranged)
        return total, dec, None, None
    if row in SUM_ROWS:
        return sum(h.value for h in hits), dec, None, None
    warning = None
    if len(hits) > 1:
        vals = ", ".join(f"{h.value:g}" for h in hits)
        warning = f"{row} printed {len(hits)} times by {hits[-1].rank_label} ({vals} s): took the last"
    return hits[-1].value, hits[-1].decimals, warning, None


def _reduce_rows(events: Sequence[Event], times: dict[int, float]
                 ) -> tuple[dict[str, PhaseValue], list[str], dict[str, dict[str, float]]]:
    """Per rank, then the maximum across ranks, for every row with a value."""
    compile_took = any(e.kind == "torch.compile" and e.groups.get("verb") == "took"
                       for e in events)
    by_row: dict[str, dict[str, list[Event]]] = defaultdict(lambda: defaultdict(list))
    dynamo: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
    for e in events:
        if e.value is not None and is_phase(e.kind):
            by_row[e.kind][e.rank].append(e)
        if e.kind == "dynamo_transform_time":
            dynamo[e.rank].append((e.pos, e.unit))
    out: dict[str, PhaseValue] = {}
    warnings: list[str] = []
    per_rank: dict[str, dict[str, float]] = {}
    for row, ranks in by_row.items():
        vals: dict[str, float] = {}
        dec = 0
        cell_notes: list[str] = []
        for rank, hits in ranks.items():
            v, d, w, note = _reduce_rank(row, hits, compile_took, dynamo[rank], times)
            vals[rank] = v
            dec = max(dec, d)
            if w:
                warnings.append(w)
            if note and note not in cell_notes:
                cell_notes.append(note)
        per_rank[row] = vals
        out[row] = _cell(vals, dec, notes=tuple(cell_notes))
    return out, warnings, per_rank


def _cell(per_rank: dict[str, float], decimals: int, derived: str | None = None,
          notes: tuple[str, ...] = ()) -> PhaseValue:
    vals = list(per_rank.values())
    return PhaseValue(value_s=max(vals), decimals=min(decimals, 2), derived=derived,
                      n_ranks=len(vals), min_s=min(vals), notes=notes)


def _ts_phase(events: Sequence[Event], begin: str, end: str, times: dict[int, float],
              how: str) -> PhaseValue | None:
    """A phase from two time stamps on the same rank (1 s resolution), max across ranks."""
    first_begin: dict[str, Event] = {}
    for e in events:
        if e.kind == begin and e.stamp is not None:
            first_begin.setdefault(e.rank, e)
    vals: dict[str, float] = {}
    dec = 0
    for e in events:
        b = first_begin.get(e.rank)
        if e.kind == end and e.stamp is not None and b is not None and b.pos <= e.pos \
                and e.rank not in vals:
            vals[e.rank] = times[e.pos] - times[b.pos]
            dec = max(dec, 2 if (e.stamp.fractional or b.stamp.fractional) else 0)
    if not vals or min(vals.values()) < 0:
        return None
    return _cell(vals, dec, derived=how)


def _difference(per_rank: dict[str, dict[str, float]], a: str, b: str,
                cells: dict[str, PhaseValue]) -> tuple[float, int] | None:
    """a − b on the ranks that printed both (max across them), else on the reduced values."""
    common = set(per_rank.get(a, {})) & set(per_rank.get(b, {}))
    if common:
        value = max(per_rank[a][r] - per_rank[b][r] for r in common)
    else:
        value = cells[a].value_s - cells[b].value_s
    dec = max(cells[a].decimals, cells[b].decimals)
    return (value, dec) if value >= 0 else None


# ---------------------------------------------------------------------------------------------
# One log


def parse_startup_log(raw: bytes | str, name: str, file: str = "",
                      extra_rules: Sequence[Rule] = ()) -> StartupColumn:
    """Parse one server log into its column.  Raises ValueError when it is no server log.

    Pass 1 reads the whole file for launch and readiness lines only; pass 2 reads the phases of
    the chosen launch up to its readiness line (later lines are serving, e.g. a weight reload
    that prints "Loading weights took" again, and are not startup).
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if not text or text.isspace():  # (isspace: no copy of a large text, unlike strip)
        raise ValueError("empty file, not a server log")
    if HEADER_RE.search(text) is None and HEADER_RE.search(clean_text(text)) is None:
        raise ValueError("not a vLLM or SGLang server log: no log record header found")
    pass1 = sorted(scan_events(text, LAUNCH_RULES) + api_server_starts(text),
                   key=lambda e: e.pos)
    launches = split_launches(text, pass1)
    idx = choose_launch(launches)
    launch = launches[idx]
    family = _family_of(text, launch)
    ready_kind, ready_ev = None, None
    for kind in READY_ORDER[family]:
        ready_ev = next((e for e in launch.events if e.kind == kind), None)
        if ready_ev is not None:
            ready_kind = kind
            break
    region_end = launch.end
    if ready_ev is not None and ready_kind.startswith("ready:"):
        nl = text.find("\n", ready_ev.pos, launch.end)
        region_end = launch.end if nl < 0 else nl + 1
    evs = scan_events(text, RULES, launch.start, region_end, extra_rules)
    engine = _engine_of(text, launch.start, region_end, evs, family)
    notes: list[str] = []

    # Time stamps this column needs: every event, the launch's first and last record, and the
    # record before each header-less readiness line (uvicorn prints no vLLM time stamp).
    first_h = header_after(text, launch.start, launch.end)
    last_h = header_before(text, launch.end, launch.start)
    stamps = [e.stamp for e in evs if e.stamp is not None]
    inherited: dict[int, int] = {}
    for e in evs:
        if e.stamp is None and e.kind.startswith("ready:"):
            prev = header_before(text, e.pos, launch.start)
            if prev is not None:
                stamps.append(stamp_from(prev, prev.start()))
                inherited[e.pos] = prev.start()
    for h in (first_h, last_h):
        if h is not None:
            stamps.append(stamp_from(h, h.start()))
    times = resolve_years(stamps)

    cells, warnings, per_rank = _reduce_rows(evs, times)
    notes.extend(warnings)
    _derive(cells, per_rank, evs, times, engine)
    extras = {}
    comp = [e.groups.get("comp") for e in evs if e.kind == "init_engine" and e.groups.get("comp")]
    if comp:
        extras["init_engine_compilation_s"] = float(comp[-1])
    if any(e.groups.get("ascend") for e in evs if e.kind == "model_loading"):
        notes.append("model_loading from vllm-ascend's 'Model runner load_model total time' line")

    # Totals
    _add_totals(cells, engine, first_h, last_h, ready_ev, inherited, times)
    harness = cells.pop("harness_total", None)
    if harness is not None:
        cells["actual_total_time"] = replace(
            harness, notes=("from the harness line 'initialize_engine took'",))
        _add_unaccounted(cells)
        if ready_ev is None:  # an offline engine without init engine line (vLLM < 0.6.5)
            ready_ev = next(e for e in evs if e.kind == "harness_total")
            ready_kind = "harness_total"

    if not set(cells) - {"actual_total_time", "unaccounted"}:
        notes.append("no startup phase found")
    if not launch.has_marker:
        notes.append("no launch marker: the log may start after the launch began")
    if idx < len(launches) - 1:
        notes.append(f"launches after the one parsed never became ready ({len(launches) - idx - 1})")
    if idx > 0:
        notes.append("timing starts at this launch's marker: lines its process printed before "
                     "it cannot be told from the previous launch's")

    version = next((e.groups["v"] for e in evs if e.kind == "info:version"), None)
    tp = next((int(e.groups["tp"]) for e in evs if e.kind == "info:tp"), None)
    hit = any(e.kind in ("graph_compile_cached", "mark:cache_hit_notime") for e in evs)
    miss = any(e.kind in ("graph_compile_general_shape", "graph_compile_specific",
                          "mark:compile_notime") for e in evs)
    cache = {(True, False): "hit", (False, True): "miss", (True, True): "hit and miss"}.get(
        (hit, miss))
    return StartupColumn(
        name=name, file=file, engine=engine, version=version,
        status="complete" if ready_ev is not None else "incomplete",
        ready_marker=READY_LABELS.get(ready_kind) if ready_kind else None,
        ready_line=_line_no(text, ready_ev.pos) if ready_ev is not None else None,
        n_launches=len(launches), launch=idx + 1,
        first_line=_line_no(text, launch.start),
        last_line=_line_no(text, max(launch.start, launch.end - 1)),
        ranks_seen=_ranks_seen(text, launch.start, region_end, engine), tp=tp,
        compile_cache=cache,
        phases=cells, notes=tuple(notes), extras=extras,
        compile_units=tuple(sorted({e.unit for e in evs if e.unit and e.kind in SUM_ROWS})),
    )


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _family_of(text: str, launch: Launch) -> str:
    """"sglang" or "vllm", from the headers of the launch's lines (SGLang's carry a year)."""
    engines = [e.engine for e in launch.events if e.engine]
    if not engines:
        h = header_after(text, launch.start, launch.end) or HEADER_RE.search(text)
        engines = ["sglang" if h is not None and h.group("sts") else "vllm"]
    return "sglang" if engines.count("sglang") > engines.count("vllm") else "vllm"


def _engine_of(text: str, lo: int, hi: int, events: Sequence[Event], family: str) -> str:
    """"SGLang", "vLLM V1", "vLLM V0" or "vLLM" (no telling sign) for the footnote."""
    if family == "sglang":
        return "SGLang"
    procs = {p for p, _pid, _ip in PROC_RE.findall(text, lo, hi)}
    kinds = {e.kind for e in events}
    srcs = {(e.kind, (e.src or "").rsplit("/", 1)[-1]) for e in events}
    v1_src = any(e.src and (e.src.startswith("v1/") or e.src.endswith("gpu_model_runner.py"))
                 for e in events) or ("init_engine", "core.py") in srcs
    if "hint:v1" in kinds or v1_src or any(
            re.match(r"(EngineCore|Worker|VllmWorker |APIServer)", p) for p in procs):
        return "vLLM V1"
    v0_src = ("init_engine", "llm_engine.py") in srcs or any(
        s == "model_runner.py" for _k, s in srcs)
    if "hint:v0" in kinds or v0_src or "VllmWorkerProcess" in procs:
        return "vLLM V0"
    return "vLLM"


def _ranks_seen(text: str, lo: int, hi: int, engine: str) -> tuple[str, ...]:
    """Worker ranks that logged anything in text[lo:hi] (the footnote's "ranks seen")."""
    if engine == "SGLang":
        toks = sorted({t.strip() for t in SGLANG_RANKS_RE.findall(text, lo, hi)})
        return tuple(toks) or ("main",)
    names: dict[str, str] = {}
    for proc, pid, ip in PROC_RE.findall(text, lo, hi):
        if re.match(r"(VllmWorkerProcess|RayWorkerWrapper|VllmWorker|Worker)\b|Worker_", proc):
            key = pid + (f"@{ip}" if ip else "")
            if proc != "Worker" or key not in names:  # keep the name that says the rank
                names[key] = f"{proc} pid={pid}"
    ranks = sorted(names.values())
    if any(n.startswith("VllmWorkerProcess") for n in ranks) or engine == "vLLM V0" and any(
            n.startswith("RayWorkerWrapper") for n in ranks):
        ranks.insert(0, "driver")  # V0: the unprefixed driver process is rank 0
    if not ranks:  # one rank, in the engine process (V1 EngineCore) or the only process
        m = PROC_RE.search(text, lo, hi)
        while m is not None and not m.group("proc").startswith("EngineCore"):
            m = PROC_RE.search(text, m.end(), hi)
        ranks = [f"{m.group('proc')} pid={m.group('pid')}" if m else "main process"]
    return tuple(ranks)


def _derive(cells: dict[str, PhaseValue], per_rank: dict[str, dict[str, float]],
            evs: Sequence[Event], times: dict[int, float], engine: str) -> None:
    """Fill what the engine did not print, marked derived."""
    if "model_loading" not in cells:
        if engine == "SGLang":
            v = _ts_phase(evs, "mark:sg_load_begin", "mark:sg_load_end", times,
                          "time stamps: 'Load weight end' - 'Load weight begin'")
        else:
            v = _ts_phase(evs, "mark:v0_load_start", "mark:v0_load_mem", times,
                          "time stamps: 'Loading model weights took' - 'Starting to load model'")
        if v is not None:
            cells["model_loading"] = v
            per_rank["model_loading"] = {}
    if engine == "SGLang" and "kv_cache_init" not in cells:
        v = _ts_phase(evs, "mark:sg_load_end", "mark:sg_pool_end", times,
                      "time stamps: 'Memory pool end' - 'Load weight end'")
        if v is not None:
            cells["kv_cache_init"] = v
    ml, lw, mi = (cells.get(k) for k in ("model_loading", "load_weights", "model_init"))
    if ml is not None and lw is not None and mi is None:
        d = _difference(per_rank, "model_loading", "load_weights", cells)
        if d is not None:
            cells["model_init"] = PhaseValue(
                d[0], d[1], derived="model_loading - load_weights (includes post-load weight "
                                    "processing)", min_s=d[0])
    elif ml is not None and mi is not None and lw is None:
        d = _difference(per_rank, "model_loading", "model_init", cells)
        if d is not None:
            cells["load_weights"] = PhaseValue(d[0], d[1], derived="model_loading - model_init",
                                               min_s=d[0])


def _add_totals(cells: dict[str, PhaseValue], engine: str, first_h: re.Match[str] | None,
                last_h: re.Match[str] | None, ready_ev: Event | None,
                inherited: dict[int, int], times: dict[int, float]) -> None:
    """total_time (sum of the top-level blocks) and actual_total_time (first record to ready)."""
    key = "sglang" if engine == "SGLang" else "vllm"
    parts = [p for p in TOTAL_PARTS[key] if p in cells]
    total_notes: list[str] = []
    if "model_loading" not in cells and "load_weights" in cells and key == "vllm":
        parts.insert(0, "load_weights")
        total_notes.append("model_loading absent: load_weights used")
    if any(p in cells for p in TOTAL_ANCHORS[key]):
        missing = [p for p in TOTAL_EXPECTED[key] if p not in cells and not
                   (p == "model_loading" and "load_weights" in parts)]
        if missing:
            total_notes.append("partial: no " + ", ".join(missing))
        derived = [p for p in parts if cells[p].derived]
        cells["total_time"] = PhaseValue(
            value_s=sum(cells[p].value_s for p in parts),
            decimals=max(cells[p].decimals for p in parts),
            derived=("sum including derived " + ", ".join(derived)) if derived else None,
            min_s=math.nan, notes=tuple(total_notes))
    if first_h is None:
        return
    t0 = times[first_h.start()]
    frac = stamp_from(first_h, 0).fractional
    if ready_ev is not None:
        pos = ready_ev.pos if ready_ev.stamp is not None else inherited.get(ready_ev.pos)
        if pos is None:
            return
        t1, act_notes = times[pos], ()
        frac = frac or (ready_ev.stamp.fractional if ready_ev.stamp else False)
    else:
        if last_h is None:
            return
        t1 = times[last_h.start()]
        act_notes = ("no readiness marker: up to the last time-stamped line",)
    cells["actual_total_time"] = PhaseValue(t1 - t0, 2 if frac else 0, min_s=math.nan,
                                            notes=act_notes)
    _add_unaccounted(cells)


def _add_unaccounted(cells: dict[str, PhaseValue]) -> None:
    """actual_total_time - total_time, only when both are whole: a ready launch, no part missing."""
    act, tot = cells.get("actual_total_time"), cells.get("total_time")
    cells.pop("unaccounted", None)
    if act is None or tot is None or act.notes and "readiness" in act.notes[0] \
            or any(n.startswith("partial") for n in tot.notes):
        return
    value = act.value_s - tot.value_s
    notes = ("negative: the log starts after the launch began",) if value < 0 else ()
    cells["unaccounted"] = PhaseValue(value, max(act.decimals, tot.decimals), min_s=math.nan,
                                      notes=notes)


# ---------------------------------------------------------------------------------------------
# Files


def read_startup_log(path: str | Path, name: str | None = None,
                     extra_rules: Sequence[Rule] = ()) -> StartupColumn:
    """Read and parse one log file; user errors raise InputError naming the file."""
    p = Path(path)
    text = read_input_file(p, "a server log file").decode("utf-8", errors="replace")  # the bytes are freed here
    try:
        return parse_startup_log(text, name or p.stem, p.name, extra_rules)
    except ValueError as exc:
        raise InputError(str(exc), path=p) from None


def column_names(paths: Sequence[str | Path]) -> list[str]:
    """Column names: the file stems, with parent folders added until they are unique."""
    parts = [Path(p).absolute().parts for p in paths]
    names = [Path(p).stem for p in paths]
    depth = 1
    while len(set(names)) < len(names) and depth < max(len(x) for x in parts):
        depth += 1
        names = ["/".join(x[-depth:-1] + (Path(x[-1]).stem,)) for x in parts]
    seen: dict[str, int] = {}
    for i, n in enumerate(names):  # the same file given twice
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            names[i] = f"{n} ({seen[n]})"
    return names
