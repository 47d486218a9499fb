"""What `perfdiff startup` looks for in a server log: the table's rows, the record headers of
vLLM and SGLang, and one `Rule` per message that gives a phase, a launch or readiness.

Which line gives which row, per framework and version, is described in docs/STARTUP.md.
Patterns only: nothing here reads a file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from perfdiff.errors import InputError

# ---------------------------------------------------------------------------------------------
# Rows

#: The rows of the hand-built tables `perfdiff startup` replaces, in their order.
REFERENCE_ROWS: tuple[str, ...] = (
    "load_weights", "model_init", "model_loading", "dynamo_transform_time",
    "graph_compile_general_shape", "graph_compile_cached", "torch.compile",
    "kv_cache_profiling", "graph_capturing", "kv_cache_init", "init_engine", "tokenizer_init",
    "total_time", "actual_total_time",
)
#: Extra rows, shown only when a log has them, placed after the row they belong to.
EXTRA_ROWS_AFTER: dict[str, str] = {
    "graph_compile_specific": "graph_compile_general_shape",
    "compile_and_profile_run": "torch.compile",
    "profile_run": "kv_cache_profiling",
    "unaccounted": "actual_total_time",
}
#: dist_init (SGLang) comes first: it happens before the weights load.
EXTRA_ROWS_BEFORE: dict[str, str] = {"dist_init": "load_weights"}

# Within one rank, these rows add up repeated lines (separate compile units, drafter models,
# recompiles after an AOT-load failure: all real time); every other row is single-shot.
SUM_ROWS = frozenset({
    "dynamo_transform_time", "torch.compile", "graph_compile_general_shape",
    "graph_compile_specific", "graph_compile_cached", "graph_capturing",
})

# ---------------------------------------------------------------------------------------------
# Line cleaning and record headers

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
# Messages (docs/STARTUP.md, Phase lines).  A rule fires when its keyword occurs in the line and its pattern matches the
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
    # instead, which times the same load_model() block.
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
    # Launches
    _rule("launch:args", "non-default args:", r"non-default args:", "vllm"),
    _rule("launch:api_version", "vLLM API server version", r"vLLM API server version", "vllm"),
    _rule("launch:server_version", "vLLM server version", r"vLLM server version", "vllm"),
    _rule("launch:banner", "█▄", r"█▄\s+▄█", "vllm"),
    _rule("launch:server_args", "server_args=ServerArgs(", r"server_args=ServerArgs\(", "sglang"),
    # Readiness
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
#: Pass 1 reads the whole file for these only: where launches start and end.
LAUNCH_RULES: tuple[Rule, ...] = tuple(
    r for r in RULES if r.kind.startswith(("launch:", "ready:")) or r.kind == "init_engine")

# Readiness precedence: the first marker kind present wins; its first occurrence is used.
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
# Top-level, non-overlapping blocks that total_time adds (SGLang: its ModelRunner steps).
TOTAL_PARTS = {
    "vllm": ("model_loading", "init_engine", "tokenizer_init"),
    "sglang": ("dist_init", "model_loading", "kv_cache_init", "graph_capturing"),
}
TOTAL_EXPECTED = {"vllm": ("model_loading", "init_engine"),
                  "sglang": ("model_loading", "kv_cache_init", "graph_capturing")}
# A total needs one of the big blocks: KV cache init alone (1 s) would only look like a total.
TOTAL_ANCHORS = {"vllm": ("model_loading", "load_weights", "init_engine"),
                 "sglang": ("model_loading", "graph_capturing")}



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


