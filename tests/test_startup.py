"""`perfdiff startup`: every rule of shared/STARTUP_LOGS.md on small literal lines, the real
logs of shared/data/real/startup_logs with values read off them by hand, a golden table, the
shapes of the hand-built reference tables, and the command's user errors."""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from golden import check_golden

from perfdiff.cli.startup import add_parser as add_startup_parser
from perfdiff.errors import InputError
from perfdiff.text import fmt_p, md_escape
from perfdiff.startup import (
    REFERENCE_ROWS,
    build_startup_table,
    column_names,
    parse_phase_regex,
    parse_startup_log,
    render_markdown,
)
from perfdiff.startup.render import format_seconds
from perfdiff.startup.scan import clean_text

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REAL = SHARED / "data" / "real" / "startup_logs"
REFERENCE = SHARED / "reference"
GOLDEN = Path(__file__).resolve().parent / "golden" / "startup"


def col(text: str, **kw):
    return parse_startup_log(text, "x", "x.log", **kw)


def val(c, row: str) -> float:
    return c.phases[row].value_s


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------
# §0 line normalisation


def test_clean_text_strips_ansi_escapes_syslog_escapes_and_trailing_crs():
    raw = "\x1b[36m(VllmWorkerProcess pid=5)\x1b[0m INFO x\r\r\nA #033[32mB#033[0m\r\nC\rD\n"
    assert clean_text(raw) == "(VllmWorkerProcess pid=5) INFO x\nA B\nC\rD\n"
    assert clean_text(b"caf\xe9 ok\n") == "caf\ufffd ok\n"  # utf-8, errors replaced


def test_coloured_process_prefix_still_names_the_rank():
    c = col("\x1b[36m(VllmWorkerProcess pid=7)\x1b[0m INFO 07-17 23:41:16 model_runner.py:1] "
            "Graph capturing finished in 5 secs.\r\n"
            "INFO 07-17 23:41:17 model_runner.py:1] Graph capturing finished in 6 secs.\r\n")
    assert val(c, "graph_capturing") == 6 and c.phases["graph_capturing"].n_ranks == 2
    assert c.phases["graph_capturing"].min_s == 5


@pytest.mark.parametrize("prefix", [
    "[RAW SERVER] ",
    "2024-09-13T22:25:38,258 [INFO ] W-9000-model_1.0-stdout MODEL_LOG - ",
    "2025-02-04 21:29:17 ",
    "│ ",
    "    ",
    "myprefix ",  # VLLM_LOGGING_PREFIX
])
def test_foreign_prefixes_do_not_hide_records(prefix):
    c = col(prefix + "INFO 02-04 21:29:17 [default_loader.py:272] Loading weights took 4.44 "
            "seconds" + ("   │" if prefix == "│ " else "") + "\n")
    assert val(c, "load_weights") == 4.44


def test_record_glued_after_a_progress_bar_is_read_with_its_own_rank():
    bar = "Capturing CUDA graphs (decode, FULL):  97%|█████▎| 65/67 [00:15<00:00,  4.58it/s]"
    c = col(bar + "(Worker_TP2_EP2 pid=9) INFO 09-29 09:52:20 [gpu_model_runner.py:3468] "
            "Graph capturing finished in 38 secs, took 1.64 GiB\n")
    assert val(c, "graph_capturing") == 38
    assert c.ranks_seen == ("Worker_TP2_EP2 pid=9",)


# ---------------------------------------------------------------------------------------------
# §1 headers and process prefixes


@pytest.mark.parametrize("header", [
    "INFO 07-17 23:41:16 model_runner.py:559] ",  # <= 0.7: no '['
    "INFO 03-21 20:15:44 [monitor.py:33] ",  # 0.8+
    "DEBUG 09-29 09:52:20 [v1/worker/gpu_worker.py:279] ",  # 0.10.2+ DEBUG relpath
    "INFO 07-16 19:52:39.123 [core.py:1] ",  # custom datefmt with a fraction
    "WARNING 07-16 19:52:39,5 [core.py:1] ",
])
def test_vllm_header_variants(header):
    c = col(header + "Memory profiling takes 7.51 seconds\n")
    assert val(c, "kv_cache_profiling") == 7.51


@pytest.mark.parametrize("prefix, label", [
    ("(VllmWorkerProcess pid=6923) ", "VllmWorkerProcess pid=6923"),  # V0 mp
    ("(RayWorkerWrapper pid=77, ip=10.1.2.3) ", "RayWorkerWrapper pid=77"),  # V0 Ray
    ("(VllmWorker rank=1 pid=12) ", "VllmWorker rank=1 pid=12"),  # V1 0.6.6-0.9
    ("(VllmWorker TP1 pid=12) ", "VllmWorker TP1 pid=12"),  # 0.10.0-0.10.1
    ("(VllmWorker PP0_TP1 pid=12) ", "VllmWorker PP0_TP1 pid=12"),
    ("(Worker_TP1 pid=12) ", "Worker_TP1 pid=12"),  # 0.10.2+
    ("(Worker_PP0_TP1 pid=12) ", "Worker_PP0_TP1 pid=12"),
    ("(Worker_DP0_TP1 pid=12) ", "Worker_DP0_TP1 pid=12"),
    ("(Worker_TP1_EP1 pid=12) ", "Worker_TP1_EP1 pid=12"),
    ("(Worker_TP0_DCP0_EP0 pid=12) ", "Worker_TP0_DCP0_EP0 pid=12"),
])
def test_worker_process_prefixes_are_ranks(prefix, label):
    text = lines(
        f"{prefix}INFO 06-02 11:03:11 [default_loader.py:1] Loading weights took 3.00 seconds",
        "INFO 06-02 11:03:12 [default_loader.py:1] Loading weights took 2.00 seconds")
    c = col(text)
    assert val(c, "load_weights") == 3.0 and c.phases["load_weights"].n_ranks == 2
    assert label in c.ranks_seen


@pytest.mark.parametrize("proc", ["EngineCore_0", "EngineCore_DP0", "EngineCore", "MainProcess"])
def test_engine_process_prefixes(proc):
    c = col(f"({proc} pid=5) INFO 10-26 21:47:45 [default_loader.py:267] Loading weights took "
            "1.27 seconds\n")
    assert val(c, "load_weights") == 1.27 and c.phases["load_weights"].n_ranks == 1
    if proc.startswith("EngineCore"):
        assert c.engine == "vLLM V1" and c.ranks_seen == (f"{proc} pid=5",)


def test_rank_is_the_pid_when_a_worker_renames_itself():
    c = col(lines(
        "(Worker pid=9) INFO 07-16 19:53:12 [gpu_model_runner.py:1] Graph capturing finished in 2 secs",
        "(Worker_TP0_EP0 pid=9) INFO 07-16 19:53:19 [gpu_model_runner.py:1] Graph capturing "
        "finished in 3 secs"))
    assert val(c, "graph_capturing") == 5 and c.phases["graph_capturing"].n_ranks == 1
    assert c.ranks_seen == ("Worker_TP0_EP0 pid=9",)


def test_ray_workers_on_two_nodes_with_the_same_pid_are_two_ranks():
    c = col(lines(
        "(RayWorkerWrapper pid=7, ip=10.0.0.1) INFO 12-13 02:10:28 worker.py:1] Memory profiling takes 2.0 seconds",
        "(RayWorkerWrapper pid=7, ip=10.0.0.2) INFO 12-13 02:10:28 worker.py:1] Memory profiling takes 3.0 seconds"))
    assert val(c, "kv_cache_profiling") == 3.0 and c.phases["kv_cache_profiling"].n_ranks == 2


def test_sglang_headers_ranks_ms_and_outer_docker_time_stamp():
    c = col(lines(
        "2026-01-15T13:56:49.1Z [2026-01-15 13:56:49.250 DP1 TP1] Load weight end. elapsed=9.50 s, type=X",
        "[2026-01-15 13:56:49.100 DP0 TP0] Load weight end. elapsed=9.25 s, type=X",
        "[2026-01-15 13:56:49.900 DP0 TP0] Memory pool end. avail mem=11.85 GB",
        "[2026-01-15 13:56:50.000 DP1 TP1] Memory pool end. avail mem=11.85 GB"))
    assert c.engine == "SGLang"
    assert val(c, "model_loading") == 9.5 and c.phases["model_loading"].n_ranks == 2
    kv = c.phases["kv_cache_init"]  # 0.80 s on DP0 TP0, 0.75 s on DP1 TP1
    assert kv.derived and kv.value_s == pytest.approx(0.8) and kv.decimals == 2
    assert c.ranks_seen == ("DP0 TP0", "DP1 TP1")


def test_uvicorn_line_without_time_stamp_inherits_the_previous_one():
    c = col(lines(
        "(APIServer pid=1) INFO 08-05 08:10:19 [api_utils.py:404] non-default args: {}",
        "(APIServer pid=1) INFO 08-05 08:18:29 [launcher.py:37] Available routes are:",
        "(APIServer pid=1) INFO:     Started server process [1]",
        "(APIServer pid=1) INFO:     Application startup complete."))
    # "Available routes are:" ranks below "Application startup complete" (§6)
    assert c.status == "complete" and c.ready_marker == "'Application startup complete'"
    assert val(c, "actual_total_time") == 490 and c.ready_line == 4


# ---------------------------------------------------------------------------------------------
# §2 launches

TWO_LAUNCHES = lines(
    "(APIServer pid=1) INFO 08-05 08:09:18 [api_utils.py:470]        █     █     █▄   ▄█",
    "(APIServer pid=1) INFO 08-05 08:09:18 [api_utils.py:470]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.11.0",
    "(APIServer pid=1) INFO 08-05 08:09:18 [api_utils.py:404] non-default args: {'model': 'a'}",
    "(EngineCore_DP0 pid=2) INFO 08-05 08:09:30 [default_loader.py:1] Loading weights took 9.00 seconds",
    "(APIServer pid=3) INFO 08-05 08:10:19 [api_utils.py:470]        █     █     █▄   ▄█",
    "(APIServer pid=3) INFO 08-05 08:10:19 [api_utils.py:470]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.12.0",
    "(APIServer pid=3) INFO 08-05 08:10:19 [api_utils.py:404] non-default args: {'model': 'b'}",
    "(EngineCore_DP0 pid=4) INFO 08-05 08:11:00 [default_loader.py:1] Loading weights took 5.00 seconds",
    "(EngineCore_DP0 pid=4) INFO 08-05 08:12:00 [core.py:1] init engine (profile, create kv cache, warmup model) took 40.00 seconds",
    "(APIServer pid=3) INFO 08-05 08:12:19 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000")


def test_last_ready_launch_is_parsed_and_counted():
    c = col(TWO_LAUNCHES)
    assert (c.n_launches, c.launch, c.version) == (2, 2, "0.12.0")
    assert val(c, "load_weights") == 5.0
    assert val(c, "actual_total_time") == 120  # 08:12:19 - 08:10:19
    assert c.first_line == 5 and c.ready_line == 10


def test_a_later_launch_that_never_got_ready_leaves_the_ready_one_parsed():
    c = col(TWO_LAUNCHES + lines(
        "(APIServer pid=5) INFO 08-05 09:00:00 [api_utils.py:404] non-default args: {}",
        "(EngineCore_DP0 pid=6) INFO 08-05 09:00:30 [default_loader.py:1] Loading weights took 1.00 seconds"))
    assert (c.n_launches, c.launch, c.status) == (3, 2, "complete")
    assert val(c, "load_weights") == 5.0
    assert any("never became ready" in n for n in c.notes)


def test_no_ready_launch_parses_the_last_one_as_incomplete():
    c = col(TWO_LAUNCHES.rsplit("(EngineCore_DP0 pid=4) INFO 08-05 08:12:00", 1)[0])
    assert (c.n_launches, c.launch, c.status) == (2, 2, "incomplete")
    assert val(c, "actual_total_time") == 41  # to the last time-stamped line, flagged
    assert "readiness" in c.phases["actual_total_time"].notes[0]


def test_v0_version_line_and_sglang_server_args_start_launches():
    v0 = lines("INFO 09-13 22:00:00 api_server.py:1] vLLM API server version 0.6.1",
               "INFO 09-13 22:00:30 model_runner.py:1] Graph capturing finished in 9 secs.",
               "INFO:     Application startup complete.",
               "INFO 09-13 23:00:00 api_server.py:1] vLLM API server version 0.6.1",
               "INFO 09-13 23:00:40 model_runner.py:1] Graph capturing finished in 7 secs.",
               "INFO:     Application startup complete.")
    c = col(v0)
    assert (c.n_launches, val(c, "graph_capturing"), val(c, "actual_total_time")) == (2, 7, 40)
    sg = lines("[2025-01-23 19:34:55] server_args=ServerArgs(model_path='a', tp_size=2)",
               "[2025-01-23 19:35:27] The server is fired up and ready to roll!",
               "[2025-01-23 20:00:00] server_args=ServerArgs(model_path='a', tp_size=2)",
               "[2025-01-23 20:00:10 TP0] Capture cuda graph end. Time elapsed: 6.57 s",
               "[2025-01-23 20:00:30] INFO:     Uvicorn running on http://0.0.0.0:30000")
    c = col(sg)
    assert (c.n_launches, c.launch, c.tp) == (2, 2, 2)
    assert c.ready_marker == "'Uvicorn running on'" and val(c, "actual_total_time") == 30


def test_a_new_api_server_pid_after_readiness_starts_a_launch():
    c = col(lines(
        "(APIServer pid=1) INFO 08-05 08:00:00 [api_utils.py:1] non-default args: {}",
        "(APIServer pid=1) INFO 08-05 08:05:00 [api_server.py:1] Starting vLLM server on http://x:1",
        "(APIServer pid=7) INFO 08-05 09:00:00 [model.py:1] Resolved architecture: X",
        "(EngineCore pid=8) INFO 08-05 09:01:00 [default_loader.py:1] Loading weights took 2.00 seconds",
        "(APIServer pid=7) INFO 08-05 09:03:00 [api_server.py:1] Starting vLLM server on http://x:1"))
    assert (c.n_launches, c.launch, val(c, "actual_total_time")) == (2, 2, 180)
    assert val(c, "load_weights") == 2.0


def test_serving_after_readiness_is_not_startup():
    # a weight reload while serving prints "Loading weights took" again
    c = col(lines(
        "INFO 06-02 11:00:00 [default_loader.py:1] Loading weights took 4.00 seconds",
        "INFO 06-02 11:01:00 [api_server.py:1] Starting vLLM API server on http://x:8000",
        "INFO 06-02 12:00:00 [default_loader.py:1] Loading weights took 2.00 seconds"))
    assert val(c, "load_weights") == 4.0 and not c.notes[1:]


# ---------------------------------------------------------------------------------------------
# §3 phase messages, every version family


@pytest.mark.parametrize("msg, row, value", [
    ("Loading weights took 14.41 seconds", "load_weights", 14.41),
    ("Model loading took 24.5 GB and 14.66 seconds", "model_loading", 14.66),  # 0.8.0
    ("Model loading took 24.5 GiB and 14.66 seconds", "model_loading", 14.66),  # 0.8.5+
    ("Model loading took 24.5 GiB memory and 14.66 seconds", "model_loading", 14.66),  # 0.12+
    ("Model loading took 7.6785 GiB and 2.195456 seconds", "model_loading", 2.195456),
    ("Model runner load_model total time: 35.42 seconds", "model_loading", 35.42),  # ascend
    ("Initializing model took 0.24 seconds", "model_init", 0.24),  # 0.32+
    ("Initializing Model took 0.24 seconds", "model_init", 0.24),  # internal fork
    ("Dynamo bytecode transform time: 11.02 s", "dynamo_transform_time", 11.02),
    ("[backbone] Dynamo bytecode transform time: 11.02 s", "dynamo_transform_time", 11.02),
    ("Compiling a graph for general shape takes 36.76 s", "graph_compile_general_shape", 36.76),
    ("Compiling a graph for dynamic shape takes 20.5 s", "graph_compile_general_shape", 20.5),
    ("Compiling a graph for compile range (1, 8192) takes 8.37 s",
     "graph_compile_general_shape", 8.37),
    ("Compiling a graph for shape 8 takes 1.5 s", "graph_compile_specific", 1.5),
    ("Directly load the compiled graph(s) for dynamic shape from the cache, took 5.920 s",
     "graph_compile_cached", 5.92),
    ("Directly load the compiled graph(s) for shape 512 from the cache, took 1.2 s",
     "graph_compile_cached", 1.2),
    ("Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 4.1 s",
     "graph_compile_cached", 4.1),
    ("torch.compile takes 28.77 s in total", "torch.compile", 28.77),
    ("torch.compile took 52.05 s in total", "torch.compile", 52.05),
    ("torch.compile and initial profiling/warmup run together took 60.1 s in total",
     "compile_and_profile_run", 60.1),
    ("Memory profiling takes 34.26 seconds", "kv_cache_profiling", 34.26),
    ("Memory profiling results: duration=71.88 seconds, total_gpu_memory=79.15GiB",
     "kv_cache_profiling", 71.88),
    ("Initial profiling/warmup run took 5.85 s", "profile_run", 5.85),
    ("Graph capturing finished in 32 secs.", "graph_capturing", 32),
    ("Graph capturing finished in 37 secs, took 0.45 GiB", "graph_capturing", 37),
    ("init engine (profile, create kv cache, warmup model) took 90.84 seconds", "init_engine",
     90.84),
    ("init engine (profile, create kv cache, warmup model) took 92.87 s (compilation: 52.05 s)",
     "init_engine", 92.87),
    ("Init Tokenizer took 0.13 seconds", "tokenizer_init", 0.13),
])
def test_vllm_phase_messages(msg, row, value):
    c = col(f"INFO 06-02 11:03:11 [x.py:1] {msg}\n")
    assert val(c, row) == value
    if row == "torch.compile":
        assert "compile_and_profile_run" not in c.phases
    if "compilation" in msg:
        assert c.extras["init_engine_compilation_s"] == 52.05


def test_torch_compile_with_profiling_never_goes_into_torch_compile():
    c = col("INFO 06-02 11:03:11 [x.py:1] torch.compile and initial profiling/warmup run "
            "together took 60.1 s in total\n")
    assert "torch.compile" not in c.phases and val(c, "compile_and_profile_run") == 60.1


def test_compile_lines_without_time_set_the_cache_state_only():
    hit = col("INFO 02-01 10:00:00 backends.py:1] Directly load the compiled graph for shape 8 "
              "from the cache\n")  # 0.7.x
    miss = col("INFO 12-01 10:00:00 backends.py:1] Compiling a graph for general shapes\n")  # 0.6.3
    assert hit.compile_cache == "hit" and "graph_compile_cached" not in hit.phases
    assert miss.compile_cache == "miss" and "graph_compile_general_shape" not in miss.phases


def test_harness_print_without_header_is_the_actual_total():
    c = col(lines("INFO 05-01 10:00:00 [gpu_model_runner.py:1] Model loading took 1 GiB and "
                  "14.66 seconds",
                  "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup "
                  "model) took 27.50 seconds",
                  "initialize_engine took 57.51 seconds"))
    act = c.phases["actual_total_time"]
    assert act.value_s == 57.51 and act.decimals == 2 and "harness" in act.notes[0]
    assert val(c, "unaccounted") == pytest.approx(57.51 - 42.16)
    old = col(lines("INFO 05-01 10:00:00 model_runner.py:1] Graph capturing finished in 9 secs.",
                    "initialize_engine took 30.25 seconds"))  # offline, before init engine lines
    assert old.status == "complete" and old.ready_marker.startswith("the harness")
    assert val(old, "actual_total_time") == 30.25


@pytest.mark.parametrize("msg, value", [
    ("Load weight end. elapsed=12.34 s, type=LlamaForCausalLM", 12.34),
])
def test_sglang_model_loading_elapsed(msg, value):
    c = col(f"[2026-01-15 13:56:49 TP0] {msg}\n")
    assert val(c, "model_loading") == value and not c.phases["model_loading"].derived


@pytest.mark.parametrize("msgs, value", [
    (["Capture cuda graph end. Time elapsed: 6.57 s"], 6.57),  # <= 0.5.10
    (["Capture npu graph end. Time elapsed: 3.5 s"], 3.5),
    (["Capture graph end. Time elapsed: 2.0 s"], 2.0),
    (["Capture cuda graph end. Time elapsed: 6.5 s",
      "Capture piecewise CUDA graph end. Time elapsed: 3.25 s"], 9.75),  # 0.5.7-0.5.10: sum
    (["Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=4.0 s",
      "Capture target prefill CUDA graph end. elapsed=1.5 s"], 5.5),  # 0.5.15+
    (["Capture CUDA graph end. elapsed=7.25 s"], 7.25),
])
def test_sglang_graph_capture_kinds_add_up_per_rank(msgs, value):
    c = col("".join(f"[2026-01-15 13:56:5{i} TP0] {m}\n" for i, m in enumerate(msgs)))
    assert val(c, "graph_capturing") == value


@pytest.mark.parametrize("msg", ["Init torch distributed ends. elapsed=1.75 s",
                                 "Init parallel ends. elapsed=1.75 s"])
def test_sglang_dist_init_extra_row(msg):
    c = col(f"[2026-01-15 13:56:49 TP0] {msg}\n")
    assert val(c, "dist_init") == 1.75
    rows = build_startup_table([c]).rows
    assert rows[0] == "dist_init" and rows[1] == "load_weights"


def test_sglang_piecewise_compile_line():
    c = col("[2026-01-15 13:56:49 TP0] Compiling a graph for dynamic shape takes 12.5 s\n")
    assert val(c, "graph_compile_general_shape") == 12.5


def test_v1_at_debug_level_gives_kv_cache_profiling():
    c = col("(EngineCore_DP0 pid=5) DEBUG 09-29 09:52:20 [v1/worker/gpu_worker.py:279] Memory "
            "profiling takes 7.51 seconds\n")
    assert val(c, "kv_cache_profiling") == 7.51 and c.engine == "vLLM V1"


# ---------------------------------------------------------------------------------------------
# §4 ranks and repeats


def test_max_across_ranks_with_the_rank_count():
    c = col(lines(
        "[2025-01-01 10:00:00 TP0] Load weight end. elapsed=86.49 s",
        "[2025-01-01 10:00:00 TP2] Load weight end. elapsed=88.93 s",
        "[2025-01-01 10:00:00 TP1] Load weight end. elapsed=89.90 s"))
    v = c.phases["model_loading"]
    assert (v.value_s, v.min_s, v.n_ranks) == (89.90, 86.49, 3)
    md = render_markdown(build_startup_table([c]))
    assert "| 89.90 (max of 3) |" in md


def test_v0_driver_without_prefix_is_rank_0():
    c = col(lines(
        "INFO 12-13 02:10:28 worker.py:237] Memory profiling results: duration=72.36 seconds, x",
        "(VllmWorkerProcess pid=1587462) INFO 12-13 02:10:28 worker.py:237] Memory profiling "
        "results: duration=71.88 seconds, x"))
    assert val(c, "kv_cache_profiling") == 72.36 and c.phases["kv_cache_profiling"].n_ranks == 2
    assert c.ranks_seen == ("driver", "VllmWorkerProcess pid=1587462")


def test_dynamo_and_torch_compile_add_up_within_a_rank():
    c = col(lines(
        "INFO 07-16 20:02:46 [backends.py:1] [backbone] Dynamo bytecode transform time: 7.06 s",
        "INFO 07-16 20:03:08 [backends.py:1] [encoder] Dynamo bytecode transform time: 2.00 s",
        "INFO 07-16 20:03:40 [monitor.py:53] [backbone] torch.compile took 40.00 s in total",
        "INFO 07-16 20:03:50 [monitor.py:53] [encoder] torch.compile took 5.50 s in total"))
    assert val(c, "dynamo_transform_time") == pytest.approx(9.06)
    assert val(c, "torch.compile") == 45.5


def test_compile_ranges_018_take_the_max_per_pass_and_sum_passes():
    c = col(lines(
        "INFO 07-16 20:02:46 [backends.py:1155] Dynamo bytecode transform time: 7.06 s",
        "INFO 07-16 20:02:50 [backends.py:393] Compiling a graph for compile range (1, 1) takes 2.00 s",
        "INFO 07-16 20:03:08 [backends.py:1155] Dynamo bytecode transform time: 20.79 s",
        "INFO 07-16 20:03:18 [backends.py:393] Compiling a graph for compile range (1, 1) takes 8.27 s",
        "INFO 07-16 20:03:18 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 8.37 s",
        "INFO 07-16 20:03:40 [monitor.py:53] torch.compile took 52.05 s in total"))
    assert val(c, "graph_compile_general_shape") == pytest.approx(2.00 + 8.37)


def test_compile_ranges_018_passes_are_per_compile_unit():
    c = col(lines(
        "INFO 07-16 20:02:46 [backends.py:1] [backbone] Dynamo bytecode transform time: 7.00 s",
        "INFO 07-16 20:02:47 [backends.py:1] [encoder] Dynamo bytecode transform time: 1.00 s",
        "INFO 07-16 20:02:50 [backends.py:1] [backbone] Compiling a graph for compile range (1, 1) takes 5.00 s",
        "INFO 07-16 20:02:50 [backends.py:1] [backbone] Compiling a graph for compile range (1, 8192) takes 6.00 s",
        "INFO 07-16 20:02:55 [backends.py:1] [encoder] Compiling a graph for compile range (1, 1) takes 2.00 s",
        "INFO 07-16 20:02:55 [backends.py:1] [encoder] Compiling a graph for compile range (1, 64) takes 1.50 s",
        "INFO 07-16 20:03:40 [monitor.py:53] [backbone] torch.compile took 20.00 s in total"))
    assert val(c, "graph_compile_general_shape") == 8.0  # max 6.00 (backbone) + max 2.00 (encoder)
    assert c.compile_units == ("backbone", "encoder")
    assert "compile units: backbone, encoder" in render_markdown(build_startup_table([c]))


def test_compile_ranges_before_018_add_up():
    c = col(lines(
        "INFO 07-16 20:02:46 [backends.py:1] Dynamo bytecode transform time: 7.06 s",
        "INFO 07-16 20:03:18 [backends.py:1] Compiling a graph for compile range (1, 1) takes 8.27 s",
        "INFO 07-16 20:03:28 [backends.py:1] Compiling a graph for compile range (2, 8192) takes 8.37 s",
        "INFO 07-16 20:03:40 [monitor.py:1] torch.compile takes 30.00 s in total"))
    assert val(c, "graph_compile_general_shape") == pytest.approx(16.64)
    assert c.compile_cache == "miss"


def test_specific_shapes_go_to_their_own_row_and_add_up():
    c = col(lines(
        "INFO 01-01 10:00:00 [backends.py:1] Compiling a graph for general shape takes 10.0 s",
        "INFO 01-01 10:00:01 [backends.py:1] Compiling a graph for shape 1 takes 1.25 s",
        "INFO 01-01 10:00:02 [backends.py:1] Compiling a graph for shape 8 takes 1.50 s"))
    assert val(c, "graph_compile_general_shape") == 10.0
    assert val(c, "graph_compile_specific") == 2.75
    rows = build_startup_table([c]).rows
    assert rows.index("graph_compile_specific") == rows.index("graph_compile_general_shape") + 1


def test_graph_capturing_adds_up_within_a_rank_main_model_and_drafter():
    c = col(lines(
        "(Worker_TP0 pid=1) INFO 01-01 10:00:00 [gpu_model_runner.py:1] Graph capturing finished in 20 secs, took 1 GiB",
        "(Worker_TP0 pid=1) INFO 01-01 10:00:05 [gpu_model_runner.py:1] Graph capturing finished in 5 secs, took 1 GiB",
        "(Worker_TP1 pid=2) INFO 01-01 10:00:05 [gpu_model_runner.py:1] Graph capturing finished in 22 secs, took 1 GiB"))
    v = c.phases["graph_capturing"]
    assert (v.value_s, v.min_s, v.n_ranks, v.decimals) == (25, 22, 2, 0)


def test_single_shot_phase_twice_takes_the_last_and_warns():
    c = col(lines(
        "INFO 01-01 10:00:00 [default_loader.py:1] Loading weights took 3.00 seconds",
        "INFO 01-01 10:00:09 [default_loader.py:1] Loading weights took 4.00 seconds"))
    assert val(c, "load_weights") == 4.0
    assert any("load_weights printed 2 times" in n and "took the last" in n for n in c.notes)


# ---------------------------------------------------------------------------------------------
# §5 derived values


def test_model_init_is_derived_from_model_loading_minus_load_weights():
    c = col(lines(
        "INFO 01-01 10:00:00 [default_loader.py:1] Loading weights took 14.41 seconds",
        "INFO 01-01 10:00:01 [gpu_model_runner.py:1] Model loading took 24 GiB and 14.66 seconds"))
    mi = c.phases["model_init"]
    assert mi.value_s == pytest.approx(0.25) and mi.derived.startswith("model_loading - load_weights")
    md = render_markdown(build_startup_table([c]))
    assert re.search(r"\| ~0\.25 \[(\d)\] \|", md)
    note = re.search(r"\| ~0\.25 \[(\d)\] \|", md).group(1)
    # md_escape escapes every underscore; a viewer shows "model_init = model_loading - ..."
    assert f"{note}. model\\_init = model\\_loading - load\\_weights (includes" in md


def test_load_weights_is_derived_when_a_loader_does_not_print_it():
    c = col(lines(
        "INFO 01-01 10:00:00 [x.py:1] Initializing Model took 0.53 seconds",
        "INFO 01-01 10:00:01 [gpu_model_runner.py:1] Model loading took 24 GiB and 14.72 seconds"))
    assert val(c, "load_weights") == pytest.approx(14.19)
    assert c.phases["load_weights"].derived == "model_loading - model_init"
    assert not c.phases["model_init"].derived


def test_v0_model_loading_from_time_stamps():
    c = col(lines(
        "INFO 07-17 23:40:50 model_runner.py:1] Starting to load model meta-llama/x...",
        "(VllmWorkerProcess pid=2) INFO 07-17 23:40:51 model_runner.py:1] Starting to load model x",
        "INFO 07-17 23:41:14 model_runner.py:1] Loading model weights took 6.1138 GB",
        "(VllmWorkerProcess pid=2) INFO 07-17 23:41:16 model_runner.py:1] Loading model weights took 6.1138 GB"))
    v = c.phases["model_loading"]
    assert (v.value_s, v.decimals, v.n_ranks) == (25, 0, 2) and "time stamps" in v.derived
    assert "model_init" not in c.phases  # nothing to subtract


def test_sglang_model_loading_from_time_stamps_before_0_5_10():
    c = col(lines("[2025-01-23 19:35:15 TP0] Load weight begin. avail mem=78.81 GB",
                  "[2025-01-23 19:35:20 TP0] Load weight end. type=X, avail mem=63.72 GB"))
    v = c.phases["model_loading"]
    assert v.value_s == 5 and v.decimals == 0 and v.derived
    assert "| model_loading | ~5 [1] |" in render_markdown(build_startup_table([c]))


# ---------------------------------------------------------------------------------------------
# §6 totals


def test_total_time_adds_the_top_level_blocks():
    c = col(lines(
        "INFO 05-01 10:00:00 [gpu_model_runner.py:1] Model loading took 1 GiB and 14.66 seconds",
        "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup model) took 27.5 seconds",
        "INFO 05-01 10:00:31 [llm.py:1] Init Tokenizer took 0.13 seconds"))
    assert val(c, "total_time") == pytest.approx(42.29)
    assert c.status == "complete" and c.ready_marker.startswith("the init engine line")


def test_total_time_falls_back_to_load_weights_flagged():
    c = col(lines(
        "INFO 05-01 10:00:00 [default_loader.py:1] Loading weights took 14.41 seconds",
        "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup model) took 27.5 seconds"))
    t = c.phases["total_time"]
    assert t.value_s == pytest.approx(41.91) and "load_weights used" in t.notes[0]


def test_ready_marker_precedence_and_first_occurrence_not_max_time():
    # docker logs can be out of order: the marker's own line counts, not the largest time
    c = col(lines(
        "INFO 06-02 11:03:00 [x.py:1] vLLM API server version 0.9.0",
        "INFO 06-02 11:03:55 [core.py:1] init engine (profile, create kv cache, warmup model) took 50.0 seconds",
        "INFO 06-02 11:04:30 [x.py:1] late line printed early",
        "INFO 06-02 11:03:56 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000",
        "INFO:     Application startup complete."))
    assert c.ready_marker == "'Starting vLLM server'" and val(c, "actual_total_time") == 56


def test_year_rollover_in_year_less_vllm_stamps():
    c = col(lines("INFO 12-31 23:59:50 [x.py:1] vLLM API server version 0.9.0",
                  "INFO 01-01 00:00:10 [api_server.py:1] Starting vLLM server on http://x:1"))
    assert val(c, "actual_total_time") == 20


def test_feb_29_parses_in_year_less_stamps():
    c = col(lines("INFO 02-28 23:59:50 [x.py:1] vLLM API server version 0.9.0",
                  "INFO 02-29 00:00:10 [api_server.py:1] Starting vLLM server on http://x:1"))
    assert val(c, "actual_total_time") == 20


def test_fractional_time_stamps_show_decimals():
    c = col(lines("[2025-01-23 19:34:55.250] server_args=ServerArgs(tp_size=1)",
                  "[2025-01-23 19:35:27.500] The server is fired up and ready to roll!"))
    a = c.phases["actual_total_time"]
    assert a.value_s == pytest.approx(32.25) and a.decimals == 2


def test_sglang_ready_to_roll_beats_uvicorn():
    c = col(lines("[2025-01-23 19:34:55] server_args=ServerArgs(tp_size=1)",
                  "[2025-01-23 19:35:27] INFO:     Uvicorn running on http://0.0.0.0:30000",
                  "[2025-01-23 19:35:33] The server is fired up and ready to roll!"))
    assert val(c, "actual_total_time") == 38


def test_user_phase_regex_fills_kv_cache_init():
    rule = parse_phase_regex(r"kv_cache_init=Initializing KV cache took (\d+\.\d+) seconds")
    c = col("INFO 05-01 10:00:00 [x.py:1] Initializing KV cache took 0.01 seconds\n",
            extra_rules=[rule])
    assert val(c, "kv_cache_init") == 0.01
    new = parse_phase_regex(r"weights_download=Downloaded in (\d+) s")
    c = col("INFO 05-01 10:00:00 [x.py:1] Downloaded in 12 s\n", extra_rules=[new])
    rows = build_startup_table([c], extra_rows=["weights_download"]).rows
    assert val(c, "weights_download") == 12 and rows[rows.index("total_time") - 1] == "weights_download"


@pytest.mark.parametrize("spec", ["kv_cache_init", "kv_cache_init=(", "kv_cache_init=took",
                                  "total_time=(\\d+)", "=x(\\d)"])
def test_bad_phase_regex_is_an_input_error(spec):
    with pytest.raises(InputError, match="--phase-regex"):
        parse_phase_regex(spec)


# ---------------------------------------------------------------------------------------------
# Rendering


def test_markdown_escapes_pipes_and_backticks_in_file_names():
    c = parse_startup_log("INFO 05-01 10:00:00 [x.py:1] Loading weights took 1.00 seconds\n",
                          "a|b`c*_d_", "a|b`c*_d_.log")
    md = render_markdown(build_startup_table([c]))
    header = md.splitlines()[2]
    assert header == r"| phase | a\|b\`c\*\_d\_ |"
    assert len(re.findall(r"(?<!\\)\|", header)) == 3  # only the table's own pipes
    assert md_escape("x\ny") == "x y" and md_escape("<b>&") == "&lt;b&gt;&amp;"


def test_markdown_escapes_html_and_markup_in_log_derived_names():
    name = "run<b>&#1~[x]\n"
    c = parse_startup_log("INFO 05-01 10:00:00 [x.py:1] Loading weights took 1.00 seconds\n",
                          name, name + ".log")
    md = render_markdown(build_startup_table([c]))
    cell = r"run&lt;b&gt;&amp;\#1\~\[x\] "
    assert md.splitlines()[2] == f"| phase | {cell} |"
    assert f"- **{cell.strip()}** ({cell}.log): vLLM" in md
    assert "<b>" not in md and "\n.log" not in md


def test_number_and_p_formats():
    assert format_seconds(-0.001, 2) == "0.00" and format_seconds(math.nan, 2) == "--"
    assert format_seconds(389.427126, 2) == "389.43" and format_seconds(37.0, 0) == "37"
    assert fmt_p(0.0004) == "<0.001" and fmt_p(0.02857) == "0.029"
    assert fmt_p(math.nan) == "n/a" and fmt_p(np.float64(0.5)) == "0.500"  # the U-test's type


def test_column_names_are_stems_made_unique_by_their_folders(tmp_path):
    a, b = tmp_path / "cfgA" / "server.log", tmp_path / "cfgB" / "server.log"
    assert column_names([a, b]) == ["cfgA/server", "cfgB/server"]
    assert column_names([tmp_path / "x.log", tmp_path / "y.txt"]) == ["x", "y"]
    assert column_names(["r.log", "r.log"])[1].endswith("r (2)")


# ---------------------------------------------------------------------------------------------
# Groups and the U-test


def _run(name: str, lw: float, ready: bool = True) -> object:
    text = lines(f"INFO 05-01 10:00:00 [default_loader.py:1] Loading weights took {lw:.2f} seconds",
                 "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup "
                 "model) took 20.00 seconds" if ready else "INFO 05-01 10:00:30 [x.py:1] hello")
    return parse_startup_log(text, name, name + ".log")


def test_groups_mean_sd_and_two_group_test():
    cols = [_run(f"bs{g}_run{i}", lw) for g, lws in (("8", [4.0, 4.2, 4.4, 4.1]),
                                                     ("16", [5.0, 5.5, 5.2, 5.3]))
            for i, lw in enumerate(lws)] + [_run("bs16_run9", 9.0, ready=False)]
    t = build_startup_table(cols, group_regex=r"bs(\d+)")
    g = t.groups
    assert g.keys == ("8", "16") and g.left_out == ("bs16_run9",)
    cell = g.cells["8"]["load_weights"]
    assert cell.n == 4 and cell.mean_s == pytest.approx(4.175)
    assert cell.sd_s == pytest.approx(np.std([4.0, 4.2, 4.4, 4.1], ddof=1))
    cmp_ = g.comparison["load_weights"]
    assert cmp_.delta_s == pytest.approx(5.25 - 4.175) and cmp_.p == pytest.approx(2 / 70)
    assert g.comparison["init_engine"].p == 1.0
    assert g.comparison["init_engine"].p_note == "all values tied"
    md = render_markdown(t)
    assert "## By configuration" in md and "| load_weights | 4.17 ± 0.17 | 5.25 ± 0.21 |" in md
    assert "| 1.08 | +25.7 % | 0.029 |" in md and "Left out (never ready): bs16\\_run9." in md
    assert "| model_init | -- | -- | -- | -- | -- |" in md  # no runs show it: nothing to test


def test_groups_with_tied_integer_seconds_use_the_exact_tied_distribution():
    # graph_capturing is printed in whole seconds: ties are the rule, not the exception
    def run(name, secs):
        return parse_startup_log(lines(
            f"INFO 05-01 10:00:00 [gpu_model_runner.py:1] Graph capturing finished in {secs} secs",
            "INFO 05-01 10:00:30 [core.py:1] init engine (profile, create kv cache, warmup model) "
            "took 40.00 seconds"), name, name + ".log")
    cols = [run(f"a{i}", s) for i, s in enumerate((3, 3, 4, 4))] + \
           [run(f"b{i}", s) for i, s in enumerate((5, 5, 6, 6))]
    t = build_startup_table(cols, group_regex=r"^[ab]")
    # only one of the C(8, 4) = 70 assignments of the mid-ranks is as extreme on each side
    assert t.groups.comparison["graph_capturing"].p == pytest.approx(2 / 70)
    assert t.groups.left_out == () and t.groups.cells["a"]["graph_capturing"].mean_s == 3.5


def test_groups_too_small_for_alpha_say_so():
    cols = [_run(f"a_{i}", 4 + i) for i in range(3)] + [_run(f"b_{i}", 9 + i) for i in range(3)]
    g = build_startup_table(cols, group_regex=r"^[ab]").groups
    cmp_ = g.comparison["load_weights"]
    assert math.isnan(cmp_.p) and "cannot reach" in cmp_.p_note and g.runs_needed == 4
    assert "n/a [" in render_markdown(build_startup_table(cols, group_regex=r"^[ab]"))


def test_group_regex_that_misses_a_file_is_an_input_error():
    with pytest.raises(InputError, match="does not match"):
        build_startup_table([_run("a_1", 4), _run("zzz", 5)], group_regex=r"a_")
    with pytest.raises(InputError, match="invalid regular expression"):
        build_startup_table([_run("a_1", 4)], group_regex=r"(")


# ---------------------------------------------------------------------------------------------
# Real logs: values read off each log by hand (comments quote the lines)

EXPECTED: dict[str, dict[str, object]] = {
    "sglang-0.4.1-era_tp1_llama3.1-8b_docs-notebook": {
        # 19:35:15 Load weight begin, 19:35:20 Load weight end / Memory pool end
        "model_loading": (5, "derived"), "kv_cache_init": (0, "derived"),
        "graph_capturing": 6.57,  # Capture cuda graph end. Time elapsed: 6.57 s
        "total_time": (11.57, "derived"),
        "actual_total_time": 38,  # 19:34:55 server_args -> 19:35:33 fired up and ready to roll
        "unaccounted": 26.43,
        "_status": "complete", "_engine": "SGLang", "_tp": 1, "_ranks": ("TP0",), "_launches": 1,
        "_ready_line": 27},
    "sglang-0.4.4_tp1_gemma3_excerpt_pr4826": {
        "kv_cache_init": (1, "derived"),  # Load weight end 21:33:30, Memory pool end 21:33:31
        # no total_time: KV cache init alone is not a total
        "actual_total_time": 1,  # last SGLang record 21:33:31 (flashinfer lines have no header)
        "_status": "incomplete", "_engine": "SGLang", "_launches": 1},
    "sglang-0.5.x_dp2-tp_npu-graph_excerpt_pr17157": {
        "kv_cache_init": (0, "derived", 2),  # both ranks 13:56:49; no total from it alone
        "actual_total_time": 1,  # 13:56:49 -> 13:56:50
        "_status": "incomplete", "_engine": "SGLang", "_ranks": ("DP0 TP0", "DP1 TP1")},
    "vllm-0.10.1_v1_tp1_enginecore0_compile-cache-hit_rocm_excerpt_strixhalo5": {
        "load_weights": 1.27, "model_loading": 2.195456, "model_init": (2.195456 - 1.27, "derived"),
        "dynamo_transform_time": 3.70, "graph_compile_cached": 5.92, "torch.compile": 3.70,
        "total_time": 2.195456,  # partial: no init_engine
        "actual_total_time": 16,  # 21:47:44 -> 21:48:00, no readiness marker
        "_status": "incomplete", "_engine": "vLLM V1", "_cache": "hit",
        "_ranks": ("EngineCore_0 pid=3856547",)},
    "vllm-0.10.2-0.11dev_v1_tp4ep_per-rank-graph-capture_excerpt_issue25848": {
        "graph_capturing": 38,  # only Worker_TP3_EP3 printed it
        "actual_total_time": 2, "_status": "incomplete", "_engine": "vLLM V1", "_nranks": 4},
    "vllm-0.23.1rc1dev_v1_tp4ep_compile-miss-aot-fallback_glm52": {
        "load_weights": 364.66, "model_loading": 389.427126, "model_init": (389.427126 - 364.66, "derived"),
        "dynamo_transform_time": 7.06 + 20.79,  # two Dynamo lines: AOT load failure, recompile
        "graph_compile_general_shape": 8.37,  # (1, 1) 8.27 s and (1, 8192) 8.37 s, same window
        "torch.compile": 52.05, "profile_run": 5.85, "graph_capturing": 3, "init_engine": 92.87,
        "total_time": 389.427126 + 92.87,
        "actual_total_time": 696,  # 19:52:39 banner -> 20:04:15 Starting vLLM server
        "unaccounted": 696 - 389.427126 - 92.87,
        "_status": "complete", "_engine": "vLLM V1", "_version": "0.23.1rc1.dev1201+gd08eebad1", "_tp": 4,
        "_nranks": 4, "_cache": "miss", "_launches": 1, "_ready_line": 204},
    "vllm-0.5.x_v0_tp4_mp-workers_excerpt_pr6234": {
        "actual_total_time": 15,  # 23:41:16 -> 23:41:31; memory-only weight lines, no phases
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 4},
    "vllm-0.6.1dev_v0_tp_mp-workers_torchserve-wrapped_excerpt_serve3315": {
        "graph_capturing": (32, 2),  # driver and worker 2716901 each print 32 secs
        "actual_total_time": 42,  # 22:25:38 -> 22:26:20 (TorchServe's own stamps ignored)
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 2},
    "vllm-0.6.5dev_v0_tp2_memprof-results-duration_excerpt_pr10909": {
        "kv_cache_profiling": (72.36, 2),  # driver 72.36, worker 71.88
        "actual_total_time": 78,  # 02:09:14 -> 02:10:32
        "_status": "incomplete", "_engine": "vLLM V0", "_nranks": 2},
    "vllm-0.8.x_v0_torch-compile_k8s-tui-borders_excerpt_gaie550": {
        "kv_cache_profiling": 34.26, "actual_total_time": 2, "torch.compile": 28.77,
        "_status": "incomplete", "_engine": "vLLM V0"},
    "vllm-0.9.0_v1_tp1_compile-miss-general-shape_excerpt_runai67": {
        "graph_compile_general_shape": 36.76, "torch.compile": 45.81, "graph_capturing": 37,
        "init_engine": 90.84, "total_time": 90.84,  # partial: no model_loading in the excerpt
        "actual_total_time": 45,  # 11:03:11 -> 11:03:56 Starting vLLM API server
        "_status": "complete", "_engine": "vLLM V1", "_cache": "miss", "_ready_line": 11},
    "vllm-ascend-dev_v1_npu_multi-launch-in-one-file_qwen2.5-14b": {
        "load_weights": 19.20, "model_loading": 35.42,  # "Model runner load_model total time"
        "model_init": (35.42 - 19.20, "derived"), "dynamo_transform_time": 3.60,
        "graph_compile_general_shape": 45.04, "torch.compile": 49.49, "profile_run": 1.58,
        "graph_capturing": 147, "init_engine": 380.89, "total_time": 35.42 + 380.89,
        "actual_total_time": 490,  # launch 2: 08:10:19 banner -> 08:18:29 Starting vLLM server
        "unaccounted": 490 - 35.42 - 380.89,
        "_status": "complete", "_engine": "vLLM V1", "_version": "dev", "_launches": 2, "_launch": 2,
        "_cache": "miss", "_ready_line": 234, "_ranks": ("EngineCore pid=577444",)},
}


def _real_logs() -> list[Path]:
    if not REAL.is_dir():
        pytest.skip(f"real startup logs not found at {REAL}")
    return sorted(REAL.glob("*.log"))


@pytest.mark.real
def test_every_real_log_is_covered():
    assert sorted(p.stem for p in _real_logs()) == sorted(EXPECTED)


@pytest.mark.real
@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_real_log_values(stem):
    path = REAL / f"{stem}.log"
    if not path.exists():
        pytest.skip(f"real startup log not found: {path}")
    from perfdiff.startup import read_startup_log

    c = read_startup_log(path)
    want = EXPECTED[stem]
    rows = {k: v for k, v in want.items() if not k.startswith("_")}
    assert set(c.phases) == set(rows), f"rows differ: {sorted(c.phases)}"
    for row, spec in rows.items():
        v = c.phases[row]
        expect, *flags = spec if isinstance(spec, tuple) else (spec,)
        assert v.value_s == pytest.approx(expect, abs=1e-9), row
        assert bool(v.derived) == ("derived" in flags), row
        n_ranks = next((f for f in flags if isinstance(f, int)), 1)
        if row not in ("total_time", "actual_total_time", "unaccounted"):
            assert v.n_ranks == n_ranks, row
    assert c.status == want["_status"] and c.engine == want["_engine"]
    for key, attr in (("_tp", "tp"), ("_ranks", "ranks_seen"), ("_launches", "n_launches"),
                      ("_launch", "launch"), ("_cache", "compile_cache"), ("_version", "version"),
                      ("_ready_line", "ready_line")):
        if key in want:
            assert getattr(c, attr) == want[key], key
    if "_nranks" in want:
        assert len(c.ranks_seen) == want["_nranks"]


def _golden_check(name: str, text: str) -> None:
    check_golden(GOLDEN / name, text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfdiff")
    add_startup_parser(parser.add_subparsers(dest="command"))
    return parser


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


@pytest.mark.real
def test_golden_markdown_csv_and_json_for_the_real_logs(tmp_path):
    logs = [str(p) for p in _real_logs()]
    md, csv_path, js = tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "t.json"
    assert _main(["startup", *logs, "-o", str(md), "--csv", str(csv_path), "--json", str(js)]) == 0
    _golden_check("real_logs.md", md.read_text(encoding="utf-8"))
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
    assert len(rows) == len(logs) * len(json.loads(js.read_text())["rows"])
    glm = {r["phase"]: r for r in rows if r["log"].endswith("glm52")}
    assert float(glm["model_loading"]["value_s"]) == 389.427126
    assert glm["model_init"]["derived"] == "1" and glm["tokenizer_init"]["value_s"] == ""
    data = json.loads(js.read_text())
    assert data["format"] == "perfdiff.startup" and data["version"] == 1
    ascend = next(c for c in data["columns"] if c["name"].startswith("vllm-ascend"))
    assert ascend["n_launches"] == 2 and ascend["phases"]["graph_capturing"]["value_s"] == 147


# ---------------------------------------------------------------------------------------------
# The hand-built reference tables: same shapes from logs written with the same format strings


def _reference(path: Path) -> dict[str, dict[str, float | None]]:
    rows = [ln.strip().strip("|").split("|") for ln in path.read_text().splitlines()
            if ln.startswith("| ")]
    names = [c.strip() for c in rows[0][1:]]
    table = {n: {} for n in names}
    for r in rows[1:]:
        for n, cell in zip(names, r[1:], strict=True):
            cell = cell.strip()
            table[n][r[0].strip()] = None if cell == "--" else float(cell)
    return table


def _fork_log(v: dict[str, float | None]) -> str:
    """A log in the internal fork's format (vLLM V1 offline engine + benchmark harness)."""
    return lines(
        "INFO 05-01 10:00:00 [__init__.py:1] Automatically detected platform cuda.",
        f"INFO 05-01 10:00:05 [default_loader.py:262] Loading weights took {v['load_weights']} seconds",
        f"INFO 05-01 10:00:05 [base_loader.py:1] Initializing Model took {v['model_init']} seconds",
        f"INFO 05-01 10:00:05 [gpu_model_runner.py:1892] Model loading took 24.35 GiB and {v['model_loading']} seconds",
        f"INFO 05-01 10:00:16 [backends.py:530] Dynamo bytecode transform time: {v['dynamo_transform_time']} s",
        "INFO 05-01 10:00:26 [backends.py:161] Directly load the compiled graph(s) for dynamic "
        f"shape from the cache, took {v['graph_compile_cached']} s",
        f"INFO 05-01 10:00:27 [monitor.py:34] torch.compile takes {v['torch.compile']} s in total",
        f"DEBUG 05-01 10:00:30 [v1/worker/gpu_worker.py:1] Memory profiling takes {v['kv_cache_profiling']} seconds",
        f"INFO 05-01 10:00:31 [kv_cache.py:1] Initializing KV cache took {v['kv_cache_init']} seconds",
        f"INFO 05-01 10:00:33 [gpu_model_runner.py:2] Graph capturing finished in {v['graph_capturing']} secs, took 0.50 GiB",
        "INFO 05-01 10:00:33 [core.py:193] init engine (profile, create kv cache, warmup model) "
        f"took {v['init_engine']} seconds",
        f"INFO 05-01 10:00:34 [llm.py:1] Init Tokenizer took {v['tokenizer_init']} seconds",
        f"initialize_engine took {v['actual_total_time']} seconds")


@pytest.mark.parametrize("name", ["startup-phases-cuda-graph-sizes.txt",
                                  "startup-phases-gpu-memory-utilization.txt"])
def test_reference_table_shapes_are_reproduced(name, tmp_path):
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference table not found: {path}")
    ref = _reference(path)
    files = []
    for col_name, values in ref.items():
        f = tmp_path / col_name
        f.write_text(_fork_log(values))
        files.append(str(f))
    out = tmp_path / "table.json"
    assert _main(["startup", *files, "--json", str(out), "-o", str(tmp_path / "t.md"),
                  "--phase-regex", r"kv_cache_init=Initializing KV cache took (\d+\.\d+) seconds"]) == 0
    data = json.loads(out.read_text())
    assert data["rows"] == list(REFERENCE_ROWS) + ["unaccounted"]  # the only extra row
    for c, (col_name, values) in zip(data["columns"], ref.items(), strict=True):
        assert c["name"] == Path(col_name).stem and c["status"] == "complete"
        for row in REFERENCE_ROWS:
            want, got = values[row], c["phases"].get(row)
            if want is None:
                assert got is None, (col_name, row)
                continue
            assert round(got["value_s"], 2) == pytest.approx(want), (col_name, row)
            assert got["derived"] is None, (col_name, row)
        assert c["phases"]["unaccounted"]["value_s"] == pytest.approx(
            values["actual_total_time"] - values["total_time"], abs=0.006)


# ---------------------------------------------------------------------------------------------
# The command: user errors and documented behaviour


def test_missing_file_is_an_input_error_naming_it(tmp_path):
    missing = tmp_path / "nope.log"
    with pytest.raises(InputError, match="nope.log: no such file") as e:
        _main(["startup", str(missing)])
    assert e.value.code == 2


def test_empty_file_is_an_input_error(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("\n  \n")
    with pytest.raises(InputError, match="empty.log: empty file"):
        _main(["startup", str(empty)])


def test_not_a_server_log_is_one_clear_line(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\nApplication startup complete.\nLoading weights took 3 seconds\n")
    with pytest.raises(InputError) as e:
        _main(["startup", str(f)])
    assert str(e.value) == f"{f}: not a vLLM or SGLang server log: no log record header found"
    assert "\n" not in str(e.value) and e.value.code == 2
    with pytest.raises(InputError, match="is a directory"):
        _main(["startup", str(tmp_path)])


def test_server_log_without_startup_phases_gives_an_incomplete_dash_column(tmp_path, capsys):
    f = tmp_path / "quiet.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] nothing to see\n"
                 "INFO 06-02 11:03:12 [x.py:1] still nothing\n")
    assert _main(["startup", str(f), "-o", "-"]) == 0
    md = capsys.readouterr().out
    assert "| load_weights | -- |" in md and "| status | incomplete |" in md
    assert "no startup phase found" in md and "never ready (incomplete)" in md


def test_output_never_overwrites_an_input(tmp_path):
    f = tmp_path / "run.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] Loading weights took 1.0 seconds\n")
    with pytest.raises(InputError, match="refusing to overwrite"):
        _main(["startup", str(f), "-o", str(f)])
    assert f.read_text().startswith("INFO")


def test_unwritable_output_is_an_input_error(tmp_path):
    f = tmp_path / "run.log"
    f.write_text("INFO 06-02 11:03:11 [x.py:1] Loading weights took 1.0 seconds\n")
    with pytest.raises(InputError, match="output folder does not exist") as e:
        _main(["startup", str(f), "--csv", str(tmp_path / "no" / "such" / "dir.csv")])
    assert e.value.code == 2
    with pytest.raises(InputError, match="cannot write"):
        _main(["startup", str(f), "--csv", str(tmp_path)])  # a directory
