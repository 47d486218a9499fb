"""Startup phases of vLLM and SGLang servers, read from their logs (`perfdiff startup`).

The rules are those of ``shared/STARTUP_LOGS.md`` (section numbers below refer to it): clean
the lines (§0), find the log-record headers anywhere in a line (§1), cut the file into launches
and keep the last one that became ready (§2), read each phase line (§3), reduce per rank and
then across ranks (§4), derive what the engine did not print (§5), and add the totals (§6).
Every value is in seconds.  A phase the log does not show is absent (rendered "--"), never 0.

The scan never splits the whole file into a Python list of lines: `str.find` per message
keyword (C speed) finds the few candidate lines, and only those are cleaned and parsed.  Pass 1
reads the whole file for launch and readiness lines only; pass 2 reads the phases of the chosen
launch up to its readiness line, so hours of request logging cost a few C-level scans.

Everything here is pure (no printing); `cmd_startup` is the only function that writes files.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from perfdiff.errors import InputError

# ---------------------------------------------------------------------------------------------
# Rows

#: The rows users' hand-built tables have, in their order (issue 7).
REFERENCE_ROWS: tuple[str, ...] = (
    "load_weights", "model_init", "model_loading", "dynamo_transform_time",
    "graph_compile_general_shape", "graph_compile_cached", "torch.compile",
    "kv_cache_profiling", "graph_capturing", "kv_cache_init", "init_engine", "tokenizer_init",
    "total_time", "actual_total_time",
)
#: Extra rows (STARTUP_LOGS.md §3, §6), shown only when a log has them, placed after the row
#: they belong to.
EXTRA_ROWS_AFTER: dict[str, str] = {
    "graph_compile_specific": "graph_compile_general_shape",
    "compile_and_profile_run": "torch.compile",
    "profile_run": "kv_cache_profiling",
    "unaccounted": "actual_total_time",
}
#: dist_init (SGLang) comes first: it happens before the weights load.
EXTRA_ROWS_BEFORE: dict[str, str] = {"dist_init": "load_weights"}

# Within one rank, these rows add up repeated lines (separate compile units, drafter models,
# recompiles after an AOT-load failure: all real time, §4.3); every other row is single-shot.
SUM_ROWS = frozenset({
    "dynamo_transform_time", "torch.compile", "graph_compile_general_shape",
    "graph_compile_specific", "graph_compile_cached", "graph_capturing",
})

# ---------------------------------------------------------------------------------------------
# Line cleaning (§0) and headers (§1)

ANSI_RE = re.compile(r"(?:\x1b|#033)\[[0-9;]*[A-Za-z]")

# Headers are searched in the whole text, so no part may cross a newline.
_PROC = r"\((?P<proc>[^()\n]*?) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\n]*))?\)"
VLLM_HEADER = (
    rf"(?:{_PROC}[ \t]+)?(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<vts>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?) \[?(?P<src>[^\s\]]+?):(?P<line>\d+)\] "
)
SGLANG_HEADER = (
    r"\[(?P<sts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)"
    r"(?P<ranks>(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*)\] "
)
HEADER_RE = re.compile(rf"{VLLM_HEADER}|{SGLANG_HEADER}")
PROC_RE = re.compile(_PROC)
SGLANG_RANKS_RE = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?((?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)+)\] "
)
UNIT_TAG_RE = re.compile(r"\[(?P<unit>[\w.-]+)\] ")  # 0.32+: "[backbone] Dynamo bytecode..."

# ---------------------------------------------------------------------------------------------
# Messages (§3).  A rule fires when its keyword occurs in the line and its pattern matches the
# message after the header.  Named groups: s = seconds, comp = compilation seconds (init
# engine 0.20+), lo/hi = compile range, v = version, tp = tensor-parallel size.

_NUM = r"(\d+(?:\.\d+)?)"


def _n(name: str) -> str:
    return _NUM.replace("(", f"(?P<{name}>", 1)


@dataclass(frozen=True)
class Rule:
    """One message pattern: what it yields (`kind`), the literal that pre-selects the line."""

    kind: str  # a row name, or "mark:…", "launch:…", "ready:…", "info:…", "hint:…"
    keyword: str
    pattern: re.Pattern[str]
    engine: str | None = None  # "vllm", "sglang" or None (both)


def _rule(kind: str, keyword: str, pattern: str, engine: str | None = None,
          flags: int = 0) -> Rule:
    return Rule(kind, keyword, re.compile(pattern, flags), engine)


RULES: tuple[Rule, ...] = (
    # vLLM phases
    _rule("load_weights", "Loading weights took", rf"Loading weights took {_n('s')} seconds"),
    _rule("model_loading", "Model loading took",
          rf"Model loading took [\d.]+ ?(?:GiB|GB)(?: memory)? and {_n('s')} seconds"),
    # vllm-ascend prints no time in "Loading model weights took"; its runner prints this
    # instead (seen in the vllm-hust log), which times the same load_model() block.
    _rule("model_loading", "load_model total time",
          rf"(?P<ascend>Model runner load_model total time): {_n('s')} seconds"),
    # upstream "Initializing model took", internal fork "Initializing Model took"
    _rule("model_init", "nitializing ", rf"Initializing model took {_n('s')} seconds", flags=re.IGNORECASE),
    _rule("dynamo_transform_time", "Dynamo bytecode transform time",
          rf"Dynamo bytecode transform time: {_n('s')} s"),
    _rule("graph_compile_general_shape", "Compiling a graph for",
          rf"Compiling a graph for (?:general shape|dynamic shape) takes {_n('s')} s"),
    _rule("graph_compile_general_shape", "Compiling a graph for",
          rf"Compiling a graph for compile range \((?P<lo>\d+), (?P<hi>\d+)\) takes {_n('s')} s"),
    _rule("graph_compile_specific", "Compiling a graph for",
          rf"Compiling a graph for shape \d+ takes {_n('s')} s"),
    _rule("graph_compile_cached", "Directly load the compiled graph",
          r"Directly load the compiled graph\(s\) for (?:dynamic shape|shape \S+|compile range "
          rf"\(\d+, \d+\)) from the cache, took {_n('s')} s"),
    _rule("torch.compile", "torch.compile",
          rf"torch\.compile (?P<verb>takes|took) {_n('s')} s in total"),
    _rule("compile_and_profile_run", "torch.compile and initial",
          r"torch\.compile and initial profiling/warmup run together took "
          rf"{_n('s')} s in total"),
    _rule("kv_cache_profiling", "Memory profiling",
          rf"Memory profiling (?:takes {_n('s')} seconds|results: duration={_n('s2')} seconds)"),
    _rule("profile_run", "Initial profiling/warmup run took",
          rf"Initial profiling/warmup run took {_n('s')} s"),
    _rule("graph_capturing", "Graph capturing finished",
          rf"Graph capturing finished in {_n('s')} secs", "vllm"),
    _rule("init_engine", "init engine (profile",
          r"init engine \(profile, create kv cache, warmup model\) took "
          rf"{_n('s')} s(?:econds)?(?: \(compilation: {_n('comp')} s)?"),
    _rule("tokenizer_init", "Init Tokenizer took", rf"Init Tokenizer took {_n('s')} seconds"),
    _rule("harness_total", "initialize_engine took", rf"initialize_engine took {_n('s')} seconds"),
    _rule("mark:v0_load_start", "Starting to load model", r"Starting to load model", "vllm"),
    _rule("mark:v0_load_mem", "Loading model weights took",
          r"Loading model weights took [\d.]+ GB", "vllm"),
    _rule("mark:cache_hit_notime", "Directly load the compiled graph",
          r"Directly load the compiled graph for shape \S+ from the cache"),
    _rule("mark:compile_notime", "Compiling a graph for",
          r"Compiling a graph for general shapes"),
    # SGLang phases
    _rule("model_loading", "Load weight end", rf"Load weight end\. elapsed={_n('s')} s", "sglang"),
    _rule("dist_init", "Init torch distributed ends",
          rf"Init torch distributed ends\. elapsed={_n('s')} s", "sglang"),
    _rule("dist_init", "Init parallel ends", rf"Init parallel ends\. elapsed={_n('s')} s",
          "sglang"),
    _rule("graph_capturing", "graph end.",
          r"Capture (?:cuda|cpu|npu|CUDA|CPU|NPU|XPU)? ?graph end\. Time elapsed: "
          rf"{_n('s')} s", "sglang"),
    _rule("graph_capturing", "graph end.",
          r"Capture [\w ]*?(?:CUDA|CPU|NPU|XPU|\w+) graph end\. (?:bs=\[[^\]]*\], )?"
          rf"elapsed={_n('s')} s", "sglang"),
    _rule("graph_capturing", "graph end.",
          rf"Capture piecewise CUDA graph end\. Time elapsed: {_n('s')} s", "sglang"),
    _rule("mark:sg_load_begin", "Load weight begin", r"Load weight begin", "sglang"),
    _rule("mark:sg_load_end", "Load weight end", r"Load weight end", "sglang"),
    _rule("mark:sg_pool_end", "Memory pool end", r"Memory pool end", "sglang"),
    # Launches (§2)
    _rule("launch:args", "non-default args:", r"non-default args:", "vllm"),
    _rule("launch:api_version", "vLLM API server version", r"vLLM API server version", "vllm"),
    _rule("launch:server_version", "vLLM server version", r"vLLM server version", "vllm"),
    _rule("launch:banner", "█▄", r"█▄\s+▄█", "vllm"),
    _rule("launch:server_args", "server_args=ServerArgs(", r"server_args=ServerArgs\(", "sglang"),
    # Readiness (§3, §6)
    _rule("ready:vllm_server", "Starting vLLM", r"Starting vLLM (?:API )?server(?: \d+)? on \S+",
          "vllm"),
    _rule("ready:startup_complete", "Application startup complete",
          r"Application startup complete\."),
    _rule("ready:routes", "Available routes are:", r"Available routes are:", "vllm"),
    _rule("ready:fired_up", "fired up and ready to roll",
          r"The server is fired up and ready to roll!", "sglang"),
    _rule("ready:uvicorn", "Uvicorn running on", r"Uvicorn running on", "sglang"),
    # Facts for the column footnote
    _rule("info:version", "server version", r"vLLM (?:API )?server version (?P<v>\S+)", "vllm"),
    _rule("info:version", "LLM engine (v", r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)",
          "vllm"),
    _rule("info:version", "  version ", r"[█▄▀]\s+version (?P<v>\S+)", "vllm"),
    _rule("info:tp", "tensor_parallel_size", r"'tensor_parallel_size': (?P<tp>\d+)", "vllm"),
    _rule("info:tp", "server_args=ServerArgs(", r"\btp_size=(?P<tp>\d+)", "sglang"),
    _rule("hint:v1", "V1 LLM engine", r"V1 LLM engine", "vllm"),
    _rule("hint:v0", "an LLM engine (", r"Initializing an LLM engine \(", "vllm"),
    _rule("hint:v0", " blocks:", r"# (?:GPU|cuda) blocks:", "vllm"),
)
#: Pass 1 reads the whole file for these only: where launches start and end (§2).
LAUNCH_RULES: tuple[Rule, ...] = tuple(
    r for r in RULES if r.kind.startswith(("launch:", "ready:")) or r.kind == "init_engine")

# Readiness precedence (§6): the first marker kind present wins; its first occurrence is used.
READY_ORDER = {
    "vllm": ("ready:vllm_server", "ready:startup_complete", "ready:routes", "init_engine"),
    "sglang": ("ready:fired_up", "ready:uvicorn", "ready:startup_complete"),
}
READY_LABELS = {
    "ready:vllm_server": "'Starting vLLM server'",
    "ready:startup_complete": "'Application startup complete'",
    "ready:routes": "'Available routes are:'",
    "init_engine": "the init engine line (offline engine)",
    "ready:fired_up": "'The server is fired up and ready to roll!'",
    "ready:uvicorn": "'Uvicorn running on'",
    "harness_total": "the harness's 'initialize_engine took' line",
}
# Top-level, non-overlapping blocks that total_time adds (§6; SGLang: its ModelRunner steps).
TOTAL_PARTS = {
    "vllm": ("model_loading", "init_engine", "tokenizer_init"),
    "sglang": ("dist_init", "model_loading", "kv_cache_init", "graph_capturing"),
}
TOTAL_EXPECTED = {"vllm": ("model_loading", "init_engine"),
                  "sglang": ("model_loading", "kv_cache_init", "graph_capturing")}
# A total needs one of the big blocks: KV cache init alone (1 s) would only look like a total.
TOTAL_ANCHORS = {"vllm": ("model_loading", "load_weights", "init_engine"),
                 "sglang": ("model_loading", "graph_capturing")}

# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class PhaseValue:
    """One cell: seconds after the reductions of §4, with how it was obtained."""

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


@dataclass(frozen=True)
class GroupCell:
    """mean ± sd of one row over the runs of one group (complete runs only)."""

    n: int
    mean_s: float
    sd_s: float  # ddof 1; NaN for one run
    decimals: int
    derived: bool


@dataclass(frozen=True)
class RowComparison:
    """Two groups: change of the mean (second minus first) and the Mann–Whitney p."""

    delta_s: float
    delta_pct: float
    p: float  # NaN when not computable or when α cannot be reached (see `p_note`)
    p_note: str | None
    min_p: float


@dataclass(frozen=True)
class StartupGroups:
    """Columns grouped by `--group REGEX`: per group and row a summary, and for two groups a test."""

    regex: str
    keys: tuple[str, ...]
    members: dict[str, tuple[str, ...]]
    left_out: tuple[str, ...]  # incomplete runs, not summarised
    cells: dict[str, dict[str, GroupCell]]  # key -> row -> cell
    comparison: dict[str, RowComparison]  # row -> comparison (two groups only)
    alpha: float
    runs_needed: int | None  # per group, for the U-test to be able to reach alpha


@dataclass(frozen=True)
class StartupTable:
    """The comparison: rows in display order, one column per log, optional groups."""

    rows: tuple[str, ...]
    columns: tuple[StartupColumn, ...]
    groups: StartupGroups | None = None


# ---------------------------------------------------------------------------------------------
# Scanning


@dataclass
class _Stamp:
    """A header time stamp before year resolution: vLLM prints no year."""

    pos: int
    year: int | None  # None for vLLM (resolved by `_resolve_years`)
    month: int
    day: int
    seconds: float  # within the day, with the fraction
    fractional: bool


@dataclass
class _Event:
    pos: int  # offset of the line start in the text; orders events
    kind: str
    rank: str  # rank key: "pid=N" / "pid=N@ip" / SGLang rank tokens / "main"
    rank_label: str
    proc: str | None
    pid: str | None
    engine: str | None  # engine of the header, None when the line has none
    stamp: _Stamp | None
    value: float | None = None
    decimals: int = 0
    groups: dict[str, str | None] = field(default_factory=dict)
    unit: str | None = None
    src: str | None = None  # vLLM header's file ("gpu_model_runner.py", "v1/worker/x.py")


def clean_line(line: str) -> str:
    """One line as §0 wants it: trailing CRs (vLLM's multi-line records end in "\\r") and ANSI
    colour codes removed.  ANSI goes first so that a CR behind a colour reset is at the end.

    Only candidate lines are cleaned: a colour code never splits a keyword (vLLM colours the
    process prefix, uvicorn the level and status), so keywords are found in the raw text.
    """
    return ANSI_RE.sub("", line).rstrip("\r") if ("\x1b" in line or "#033" in line) \
        else line.rstrip("\r")


def clean_text(raw: bytes | str) -> str:
    """The whole text cleaned line by line (for tests and small inputs)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return "\n".join(clean_line(x) for x in text.split("\n"))


def _stamp_from(m: re.Match[str], pos: int) -> _Stamp:
    if m.group("vts") is not None:
        ts = m.group("vts")
        year, month, day, clock = None, int(ts[0:2]), int(ts[3:5]), ts[6:]
    else:
        ts = m.group("sts")
        year, month, day, clock = int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), ts[11:]
    hh, mm, ss = clock[0:2], clock[3:5], clock[6:].replace(",", ".")
    return _Stamp(pos, year, month, day, int(hh) * 3600 + int(mm) * 60 + float(ss),
                  len(ss) > 2)


def _rank_of(m: re.Match[str] | None, proc_m: re.Match[str] | None) -> tuple[str, str, str | None,
                                                                            str | None]:
    """Rank key, label, process name and pid of a line (§1: rank = process, or SGLang tokens).

    vLLM processes are keyed by pid (plus Ray's ip): a worker logs as "Worker" before its
    parallel rank is known and as "Worker_TP0_EP0" after, under the same pid.
    """
    src = m if (m is not None and m.group("pid")) else proc_m
    if src is not None and src.group("pid"):
        proc, pid, ip = src.group("proc"), src.group("pid"), src.group("ip")
        key = f"pid={pid}" + (f"@{ip}" if ip else "")
        return key, f"{proc} pid={pid}", proc, pid
    if m is not None and m.group("sts") is not None and m.group("ranks"):
        tokens = m.group("ranks").strip()
        return tokens, tokens, None, None
    return "main", "main process", None, None


def _decimals(text: str | None) -> int:
    return len(text.split(".", 1)[1]) if text and "." in text else 0


def scan_events(text: str, rules: Sequence[Rule] = RULES, lo: int = 0, hi: int | None = None,
                extra_rules: Sequence[Rule] = ()) -> list[_Event]:
    """Every line in text[lo:hi] that one of `rules` matches, as events in file order.

    Candidate lines are found with `str.find` per keyword (C speed; a regex alternation of 40
    literals is ten times slower on a 100 MB log), then cleaned and parsed one by one.  A line
    may hold a record glued after a progress bar, so a message belongs to the last header that
    starts before it.  `extra_rules` (user `--phase-regex`) are searched with their regex.
    """
    hi = len(text) if hi is None else hi
    by_keyword: dict[str, list[Rule]] = defaultdict(list)
    for r in rules:
        by_keyword[r.keyword].append(r)
    line_starts: set[int] = set()
    for keyword in by_keyword:
        pos = text.find(keyword, lo, hi)
        while pos >= 0:
            start = text.rfind("\n", lo, pos) + 1 or lo
            line_starts.add(max(start, lo))
            nxt = text.find("\n", pos, hi)
            pos = -1 if nxt < 0 else text.find(keyword, nxt, hi)
    for rule in extra_rules:
        for m in rule.pattern.finditer(text, lo, hi):
            line_starts.add(max(text.rfind("\n", lo, m.start()) + 1, lo))
    events: list[_Event] = []
    for start in sorted(line_starts):
        end = text.find("\n", start, hi)
        line = clean_line(text[start:hi] if end < 0 else text[start:end])
        applicable = [r for k, rs in by_keyword.items() if k in line for r in rs]
        events.extend(_events_of_line(line, start, applicable + list(extra_rules)))
    return events


def _events_of_line(line: str, start: int, rules: Sequence[Rule]) -> list[_Event]:
    headers = list(HEADER_RE.finditer(line))
    proc_m = PROC_RE.search(line)  # for header-less lines: "(APIServer pid=1) INFO:     ..."
    out: list[_Event] = []
    for rule in rules:
        for h in reversed(headers or [None]):  # the record the message belongs to
            msg_from = h.end() if h is not None else 0
            mm = rule.pattern.search(line, msg_from)
            if mm is None:
                continue
            engine = None if h is None else ("vllm" if h.group("vts") else "sglang")
            if rule.engine is not None and engine is not None and rule.engine != engine:
                break
            rank, label, proc, pid = _rank_of(
                h, proc_m if proc_m is not None and (h is None or proc_m.end() <= h.start())
                else None)
            gd = mm.groupdict()
            secs = gd.get("s") or gd.get("s2") or (mm.group(1) if rule.kind.startswith("user:")
                                                   else None)
            unit_m = UNIT_TAG_RE.match(line, msg_from)
            out.append(_Event(
                pos=start, kind=rule.kind.removeprefix("user:"), rank=rank, rank_label=label,
                proc=proc, pid=pid, engine=engine,
                stamp=_stamp_from(h, start) if h is not None else None,
                value=float(secs) if secs is not None else None, decimals=_decimals(secs),
                groups=gd, unit=unit_m.group("unit") if unit_m else None,
                src=h.group("src") if h is not None and h.group("vts") else None,
            ))
            break
    return out


def api_server_starts(text: str) -> list[_Event]:
    """The first line of each APIServer pid (vLLM 0.10+), as "launch:api_pid" events.

    Every request line carries the prefix, so each search skips the pids already seen with a
    negative look-ahead and runs in C: one search per distinct pid, not one per line.
    """
    out: list[_Event] = []
    seen: list[str] = []
    while True:
        skip = "(?!(?:" + "|".join(seen) + r")\))" if seen else ""
        m = re.search(r"\(APIServer pid=" + skip + r"(\d+)\)", text)
        if m is None or len(seen) > 1000:
            return out
        seen.append(m.group(1))
        start = text.rfind("\n", 0, m.start()) + 1
        out.append(_Event(pos=start, kind="launch:api_pid", rank=f"pid={m.group(1)}",
                          rank_label=f"APIServer pid={m.group(1)}", proc="APIServer",
                          pid=m.group(1), engine="vllm", stamp=None))


# ---------------------------------------------------------------------------------------------
# Launches (§2)


@dataclass
class _Launch:
    start: int
    end: int = -1
    events: list[_Event] = field(default_factory=list)
    has_marker: bool = False


def split_launches(text: str, events: Sequence[_Event]) -> list[_Launch]:
    """Cut the log where a new launch starts (§2).

    The markers of one launch come in a burst (banner, then "non-default args"), so a marker
    opens a new launch only when the current one already showed the same marker, a readiness
    or init engine line, or when a new APIServer pid shows up after that.
    """
    launches = [_Launch(start=0)]
    seen: set[str] = set()
    progressed = False
    api_pid: str | None = None
    for ev in events:
        cur = launches[-1]
        new_api = ev.proc == "APIServer" and api_pid is not None and ev.pid != api_pid
        # one launch may run several API servers: a new pid splits only after readiness
        marker = ev.kind.startswith("launch:") and ev.kind != "launch:api_pid"
        if (marker and (progressed or ev.kind in seen)) or (new_api and progressed):
            cur.end = ev.pos
            launches.append(_Launch(start=ev.pos))
            seen, progressed, api_pid = set(), False, None
            cur = launches[-1]
        if ev.kind.startswith("launch:"):
            seen.add(ev.kind)
            cur.has_marker = True
        if ev.proc == "APIServer" and api_pid is None:
            api_pid = ev.pid
        if ev.kind.startswith("ready:") or ev.kind == "init_engine":
            progressed = True
        cur.events.append(ev)
    launches[-1].end = len(text)
    return launches


def _is_phase(kind: str) -> bool:
    return not kind.startswith(("mark:", "launch:", "ready:", "info:", "hint:"))


def choose_launch(launches: Sequence[_Launch]) -> int:
    """Index of the last launch that became ready or printed init engine, else the last (§2)."""
    for i in range(len(launches) - 1, -1, -1):
        if any(e.kind.startswith("ready:") or e.kind == "init_engine"
               for e in launches[i].events):
            return i
    return len(launches) - 1


# ---------------------------------------------------------------------------------------------
# Time stamps (§6: no year in vLLM, 1 s resolution, out-of-order lines)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_HALF_YEAR_S = 182 * 86400.0


def _naive_seconds(st: _Stamp, year: int) -> float:
    try:
        day = datetime(year, st.month, st.day, tzinfo=timezone.utc)
    except ValueError:  # 02-29 in a year made up for a year-less log
        day = datetime(year, st.month, 1, tzinfo=timezone.utc) + timedelta(days=st.day - 1)
    return (day - _EPOCH).total_seconds() + st.seconds


def _resolve_years(stamps: Iterable[_Stamp]) -> dict[int, float]:
    """Seconds since the epoch per line offset.  vLLM stamps get year 2000 (a leap year), plus
    one each time the time jumps back by more than half a year between stamps in file order."""
    out: dict[int, float] = {}
    offset, prev = 0, None
    for st in sorted(stamps, key=lambda s: s.pos):
        if st.year is not None:
            out[st.pos] = _naive_seconds(st, st.year)
            continue
        t = _naive_seconds(st, 2000 + offset)
        if prev is not None and t < prev - _HALF_YEAR_S:
            offset += 1
            t = _naive_seconds(st, 2000 + offset)
        out[st.pos], prev = t, t
    return out


def _header_after(text: str, lo: int, hi: int) -> re.Match[str] | None:
    return HEADER_RE.search(text, lo, hi)


def _header_before(text: str, pos: int, floor: int) -> re.Match[str] | None:
    """The last header that starts in [floor, pos): searched in growing windows from `pos`."""
    window = 8192
    while True:
        lo = max(floor, pos - window)
        last = None
        for m in HEADER_RE.finditer(text, lo, pos):
            last = m
        if last is not None or lo == floor:
            return last
        window *= 8


# ---------------------------------------------------------------------------------------------
# Reduction (§4) and derivation (§5, §6)


def _reduce_rank(row: str, hits: list[_Event], compile_took: bool,
                 dynamo_pos: list[tuple[int, str | None]]) -> tuple[float, int, str | None]:
    """One rank's value of a row: sum, max-per-pass or the last line (§4.3).

    Returns (seconds, decimals, warning).
    """
    dec = max(h.decimals for h in hits)
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
        return total, dec, None
    if row in SUM_ROWS:
        return sum(h.value for h in hits), dec, None
    warning = None
    if len(hits) > 1:
        vals = ", ".join(f"{h.value:g}" for h in hits)
        warning = f"{row} printed {len(hits)} times by {hits[-1].rank_label} ({vals} s): took the last"
    return hits[-1].value, hits[-1].decimals, warning


def _reduce_rows(events: Sequence[_Event]) -> tuple[dict[str, PhaseValue], list[str],
                                                   dict[str, dict[str, float]]]:
    """Per rank, then the maximum across ranks, for every row with a value (§4)."""
    compile_took = any(e.kind == "torch.compile" and e.groups.get("verb") == "took"
                       for e in events)
    by_row: dict[str, dict[str, list[_Event]]] = defaultdict(lambda: defaultdict(list))
    dynamo: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
    for e in events:
        if e.value is not None and _is_phase(e.kind):
            by_row[e.kind][e.rank].append(e)
        if e.kind == "dynamo_transform_time":
            dynamo[e.rank].append((e.pos, e.unit))
    out: dict[str, PhaseValue] = {}
    warnings: list[str] = []
    per_rank: dict[str, dict[str, float]] = {}
    for row, ranks in by_row.items():
        vals: dict[str, float] = {}
        dec = 0
        for rank, hits in ranks.items():
            v, d, w = _reduce_rank(row, hits, compile_took, dynamo[rank])
            vals[rank] = v
            dec = max(dec, d)
            if w:
                warnings.append(w)
        per_rank[row] = vals
        out[row] = _cell(vals, dec)
    return out, warnings, per_rank


def _cell(per_rank: dict[str, float], decimals: int, derived: str | None = None,
          notes: tuple[str, ...] = ()) -> PhaseValue:
    vals = list(per_rank.values())
    return PhaseValue(value_s=max(vals), decimals=min(decimals, 2), derived=derived,
                      n_ranks=len(vals), min_s=min(vals), notes=notes)


def _ts_phase(events: Sequence[_Event], begin: str, end: str, times: dict[int, float],
              how: str) -> PhaseValue | None:
    """A phase from two time stamps on the same rank (1 s resolution), max across ranks."""
    first_begin: dict[str, _Event] = {}
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
    first_h = _header_after(text, launch.start, launch.end)
    last_h = _header_before(text, launch.end, launch.start)
    stamps = [e.stamp for e in evs if e.stamp is not None]
    inherited: dict[int, int] = {}
    for e in evs:
        if e.stamp is None and e.kind.startswith("ready:"):
            prev = _header_before(text, e.pos, launch.start)
            if prev is not None:
                stamps.append(_stamp_from(prev, prev.start()))
                inherited[e.pos] = prev.start()
    for h in (first_h, last_h):
        if h is not None:
            stamps.append(_stamp_from(h, h.start()))
    times = _resolve_years(stamps)

    cells, warnings, per_rank = _reduce_rows(evs)
    notes.extend(warnings)
    _derive(cells, per_rank, evs, times, engine)
    extras = {}
    comp = [e.groups.get("comp") for e in evs if e.kind == "init_engine" and e.groups.get("comp")]
    if comp:
        extras["init_engine_compilation_s"] = float(comp[-1])
    if any(e.groups.get("ascend") for e in evs if e.kind == "model_loading"):
        notes.append("model_loading from vllm-ascend's 'Model runner load_model total time' line")

    # Totals (§6)
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


def _family_of(text: str, launch: _Launch) -> str:
    """"sglang" or "vllm", from the headers of the launch's lines (SGLang's carry a year)."""
    engines = [e.engine for e in launch.events if e.engine]
    if not engines:
        h = _header_after(text, launch.start, launch.end) or HEADER_RE.search(text)
        engines = ["sglang" if h is not None and h.group("sts") else "vllm"]
    return "sglang" if engines.count("sglang") > engines.count("vllm") else "vllm"


def _engine_of(text: str, lo: int, hi: int, events: Sequence[_Event], family: str) -> str:
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
            evs: Sequence[_Event], times: dict[int, float], engine: str) -> None:
    """Fill what the engine did not print, marked derived (§5)."""
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
                last_h: re.Match[str] | None, ready_ev: _Event | None,
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
    frac = _stamp_from(first_h, 0).fractional
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
# Files and the table


def parse_phase_regex(spec: str) -> Rule:
    """A `--phase-regex ROW=REGEX` option: REGEX's one capture group is the seconds of ROW."""
    row, sep, pattern = spec.partition("=")
    row = row.strip()
    if not sep or not row or not pattern:
        raise InputError(f"--phase-regex {spec!r}: expected ROW=REGEX")
    if row in ("total_time", "actual_total_time", "unaccounted"):
        raise InputError(f"--phase-regex {spec!r}: {row} is computed, not read from a line")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise InputError(f"--phase-regex {spec!r}: invalid regular expression ({exc})") from None
    if compiled.groups != 1:
        raise InputError(f"--phase-regex {spec!r}: REGEX needs exactly one capture group "
                         "(the seconds)")
    return Rule(kind=f"user:{row}", keyword="", pattern=compiled)


def read_startup_log(path: str | Path, name: str | None = None,
                     extra_rules: Sequence[Rule] = ()) -> StartupColumn:
    """Read and parse one log file; user errors raise InputError naming the file."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8", errors="replace")  # the bytes are freed here
    except FileNotFoundError:
        raise InputError("no such file", path=p) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a server log file", path=p) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=p) from None
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


def table_rows(columns: Sequence[StartupColumn], extra_rows: Sequence[str] = ()) -> tuple[str, ...]:
    """The reference rows, plus the extra rows that some column has, next to their neighbour."""
    present = {r for c in columns for r in c.phases}
    rows = list(REFERENCE_ROWS)
    for row, before in EXTRA_ROWS_BEFORE.items():
        if row in present:
            rows.insert(rows.index(before), row)
    for row, after in EXTRA_ROWS_AFTER.items():
        if row in present:
            rows.insert(rows.index(after) + 1, row)
    for row in extra_rows:  # user rows go before the totals
        if row not in rows and row in present:
            rows.insert(rows.index("total_time"), row)
    return tuple(rows)


def build_startup_table(columns: Sequence[StartupColumn], group_regex: str | None = None,
                        alpha: float = 0.05, extra_rows: Sequence[str] = ()) -> StartupTable:
    """Assemble the table; with `group_regex`, summarise the columns per configuration."""
    rows = table_rows(columns, extra_rows)
    groups = group_columns(columns, rows, group_regex, alpha) if group_regex else None
    return StartupTable(rows=rows, columns=tuple(columns), groups=groups)


# ---------------------------------------------------------------------------------------------
# Groups of repeated runs (issue 7, item 4; display rules of STATS.md)


def group_key(name: str, pattern: re.Pattern[str]) -> str | None:
    """The configuration of a column: the regex's first group if it has one, else its match."""
    m = pattern.search(name)
    if m is None:
        return None
    return m.group(1) if pattern.groups and m.group(1) is not None else m.group(0)


def group_columns(columns: Sequence[StartupColumn], rows: Sequence[str], regex: str,
                  alpha: float = 0.05) -> StartupGroups:
    """mean ± sd per group and row over complete runs; for two groups Δ and a U-test p.

    The test is perfdiff.stats' Mann–Whitney (exact with ties up to C(n1+n2, n1) = 200 000).
    """
    # imported here: scipy costs ~1 s, and every perfdiff command imports this module
    import numpy as np

    from perfdiff.stats import cycles_needed, mann_whitney_p, min_attainable_p

    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise InputError(f"--group {regex!r}: invalid regular expression ({exc})") from None
    members: dict[str, list[StartupColumn]] = {}
    left_out: list[str] = []
    for col in columns:
        key = group_key(col.name, pattern)
        if key is None:
            raise InputError(f"--group {regex!r} does not match this file's name {col.name!r}",
                             path=col.file or col.name)
        members.setdefault(key, [])
        if col.status == "complete":
            members[key].append(col)
        else:
            left_out.append(col.name)
    cells: dict[str, dict[str, GroupCell]] = {}
    for key, cols in members.items():
        cells[key] = {}
        for row in rows:
            vals = [c.phases[row] for c in cols if row in c.phases]
            if not vals:
                continue
            arr = np.array([v.value_s for v in vals])
            cells[key][row] = GroupCell(
                n=len(arr), mean_s=float(arr.mean()),
                sd_s=float(arr.std(ddof=1)) if len(arr) > 1 else math.nan,
                decimals=max(v.decimals for v in vals),
                derived=any(v.derived for v in vals))
    comparison: dict[str, RowComparison] = {}
    runs_needed = None
    keys = tuple(members)
    if len(keys) == 2:
        a_cols, b_cols = members[keys[0]], members[keys[1]]
        for row in rows:
            a = np.array([c.phases[row].value_s for c in a_cols if row in c.phases])
            b = np.array([c.phases[row].value_s for c in b_cols if row in c.phases])
            if len(a) == 0 or len(b) == 0:
                continue
            p, method = mann_whitney_p(a, b)
            min_p = 1.0 if method == "all-tied" else min_attainable_p(len(a), len(b))
            note = "all values tied" if method == "all-tied" else None
            if note is None and min_p > alpha:  # STATS.md: n/a, and say how many runs it needs
                note = f"the U-test cannot reach alpha={alpha:g} with {len(a)} and {len(b)} runs"
                p = math.nan
            delta = float(b.mean() - a.mean())
            comparison[row] = RowComparison(
                delta_s=delta, delta_pct=100.0 * delta / a.mean() if a.mean() else math.nan,
                p=p, p_note=note, min_p=min_p)
        if any(c.p_note and c.p_note.startswith("the U-test cannot") for c in comparison.values()):
            runs_needed = cycles_needed(1, alpha)  # one test: runs per group to reach alpha
    return StartupGroups(
        regex=regex, keys=keys, members={k: tuple(c.name for c in v) for k, v in members.items()},
        left_out=tuple(left_out), cells=cells, comparison=comparison, alpha=alpha,
        runs_needed=runs_needed)


# ---------------------------------------------------------------------------------------------
# Command line


def add_startup_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `perfdiff startup LOG… [-o table.md] [--csv …] [--json …] [--group REGEX]`."""
    p = subparsers.add_parser(
        "startup", help="compare the startup phases of vLLM/SGLang server logs",
        description="Build the startup-phase table (one column per log, one row per phase, in "
                    "seconds) from vLLM and SGLang server logs as they are written.")
    p.add_argument("logs", nargs="+", metavar="LOG", help="server log files, one per run")
    p.add_argument("-o", "--output", metavar="TABLE.md",
                   help="write the Markdown table here (default or '-': standard output)")
    p.add_argument("--csv", metavar="TABLE.csv", help="also write the values as CSV")
    p.add_argument("--json", metavar="TABLE.json", help="also write everything as JSON")
    p.add_argument("--group", metavar="REGEX",
                   help="group runs by configuration: REGEX's first group (or match) in the file "
                        "name; shows mean ± sd per group and, for two groups, the U-test p")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--phase-regex", action="append", default=[], metavar="ROW=REGEX",
                   help="read ROW (e.g. kv_cache_init) from lines matching REGEX, whose one "
                        "capture group is the seconds; repeatable")
    p.set_defaults(func=cmd_startup)


def cmd_startup(args: argparse.Namespace) -> int:
    """Run `perfdiff startup`: parse the logs, write the table(s).  Returns the exit code."""
    from perfdiff import render_startup

    rules = [parse_phase_regex(s) for s in args.phase_regex]
    if not 0.0 < args.alpha < 1.0:
        raise InputError(f"--alpha {args.alpha}: must be between 0 and 1")
    inputs = {Path(p).resolve() for p in args.logs}
    to_stdout = args.output in (None, "-")
    outputs = [(None if to_stdout else args.output, render_startup.render_markdown),
               (args.csv, render_startup.render_csv),
               (args.json, render_startup.render_json)]
    for out, _ in outputs:
        if out is not None and Path(out).resolve() in inputs:
            raise InputError("refusing to overwrite an input log", path=out)
    names = column_names(args.logs)
    columns = [read_startup_log(p, n, rules) for p, n in zip(args.logs, names, strict=True)]
    table = build_startup_table(columns, args.group, args.alpha,
                                extra_rows=[r.kind.removeprefix("user:") for r in rules])
    if to_stdout:
        sys.stdout.write(render_startup.render_markdown(table))
    for out, render in outputs:
        if out is None:
            continue
        try:
            Path(out).write_text(render(table), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", path=out) from None
    return 0
