"""`perfdiff startup`, the rows (docs/STARTUP.md): phase lines of every version family,
ranks and repeated lines, derived values, readiness and totals, `--phase-regex`."""
from __future__ import annotations

import re

import pytest
from startup_helpers import col, lines, val

from perfdiff.errors import InputError
from perfdiff.startup import build_startup_table, parse_phase_regex, render_markdown


# ---------------------------------------------------------------------------------------------
# Phase lines, every version family


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
# Ranks and repeated lines


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
# Derived values


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
# Readiness and totals


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


def test_cache_loads_that_overlap_count_the_wall_time_they_cover():
    """Two compile ranges loaded from the cache at once: lines ending 1 s apart (the stamps'
    resolution), each ~10.5 s long, cover ~10.7 s of wall time, not 21.2 s."""
    c = col(lines(
        "INFO 05-01 10:00:10 [backends.py:549] Dynamo bytecode transform time: 3.70 s",
        "INFO 05-01 10:00:26 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(1, 2048) from the cache, took 10.512 s",
        "INFO 05-01 10:00:27 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(2049, 8192) from the cache, took 10.697 s"))
    cell = c.phases["graph_compile_cached"]
    assert cell.value_s == pytest.approx(10.697)
    assert cell.notes == ("2 lines overlap in time (21.209 s added up): the wall time they cover",)
    assert "lines overlap in time" in render_markdown(build_startup_table([c]))


def test_cache_loads_that_follow_each_other_add_up():
    c = col(lines(
        "INFO 05-01 10:00:26 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(1, 2048) from the cache, took 10.5 s",
        "INFO 05-01 10:00:40 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(2049, 8192) from the cache, took 10.5 s"))
    assert val(c, "graph_compile_cached") == pytest.approx(21.0)
    assert c.phases["graph_compile_cached"].notes == ()


def test_cache_loads_partly_overlapping_count_their_union():
    c = col(lines(
        "INFO 05-01 10:00:26 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(1, 2048) from the cache, took 10.0 s",
        "INFO 05-01 10:00:32 [backends.py:161] Directly load the compiled graph(s) for compile range "
        "(2049, 8192) from the cache, took 10.0 s"))
    # [17, 27] and [22, 32]: the first ends within its second, at most at 27
    assert val(c, "graph_compile_cached") == pytest.approx(15.0)
