"""`perfdiff startup`, reading lines (docs/STARTUP.md): cleaning, record headers and ranks,
and launches, on small literal logs."""
from __future__ import annotations

import pytest
from startup_helpers import col, lines, val

from perfdiff.startup.scan import clean_text


# ---------------------------------------------------------------------------------------------
# Cleaning lines


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
# Record headers and ranks


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
    # "Available routes are:" ranks below "Application startup complete" (Readiness)
    assert c.status == "complete" and c.ready_marker == "'Application startup complete'"
    assert val(c, "actual_total_time") == 490 and c.ready_line == 4


# ---------------------------------------------------------------------------------------------
# Launches

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
