"""tools/adapters_check.py, the contract check of the adapters against released sources, on
small literal source snippets laid out as the releases are (no download here)."""
from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "adapters_check.py"
_spec = importlib.util.spec_from_file_location("adapters_check", TOOL)
ac = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ac
_spec.loader.exec_module(ac)


def src(files: dict[str, str]) -> "ac.Sources":
    return ac.Sources({path: textwrap.dedent(text) for path, text in files.items()})


SGLANG_0_5_23 = {
    "sglang/srt/managers/scheduler.py": """
        class Scheduler(SchedulerPPMixin):
            def __init__(self, server_args, port_args):
                self.init_request_receiver()
            def event_loop_normal(self):
                while True:
                    self.ingest_requests()
                    batch = self.get_next_batch_to_run(running_batch=None, last_batch=None).batch_to_run
                    if batch:
                        self.process_batch_result(batch, self.run_batch(batch))
            def ingest_requests(self, stop_at_pause: bool = False):
                return self.request_receiver.recv_requests(local_reqs=[])
            def get_next_batch_to_run(self, running_batch, last_batch):
                pass
            def handle_freeze_gc(self, recv_req):
                freeze_gc("Scheduler")
        """,
    "sglang/srt/managers/scheduler_pp_mixin.py": """
        class SchedulerPPMixin:
            def run_batch(self, batch, pp_proxy_tensors=None):
                pass
            def process_batch_result(self, batch, result):
                pass
        """,
    "sglang/srt/managers/scheduler_components/request_receiver.py": """
        @dataclass(kw_only=True, slots=True, frozen=True)
        class SchedulerRequestReceiver:
            max_recv_per_poll: int
            def recv_requests(self, local_reqs=None):
                return []
        """,
    "sglang/srt/runtime_context.py": "def get_parallel():\n    return None\n",
    "sglang/srt/managers/schedule_batch.py": """
        @dataclass
        class ScheduleBatch:
            reqs: list
            forward_mode: object = None
            extend_num_tokens: int = 0
            decoding_reqs: list = None
        """,
    "sglang/srt/model_executor/forward_batch_info.py": """
        class ForwardMode(IntEnum):
            def is_extend(self): ...
            def is_decode(self): ...
            def is_mixed(self): ...
            def is_idle(self): ...
        """,
    "sglang/srt/managers/tokenizer_manager.py": """
        class TokenizerManager:
            async def _handle_batch_output(self, recv_obj): ...
        """,
    "sglang/srt/managers/detokenizer_manager.py": """
        class DetokenizerManager:
            def handle_batch_token_id_out(self, recv_obj): ...
        """,
    "sglang/srt/managers/tp_worker.py": "class TpModelWorker: ...\n",
}


def test_sglang_layout_passes_and_says_which_path() -> None:
    r = ac.check_sglang(src(SGLANG_0_5_23), "0.5.23")
    assert r.ok, r.missing
    assert "iterations begin at Scheduler.ingest_requests" in r.notes
    assert "receiver frozen (wrapped through its class)" in r.notes and "heap frozen on /freeze_gc" in r.notes
    assert "ranks from runtime_context.get_parallel()" in r.notes


def test_a_planted_renamed_method_fails() -> None:
    s = src(SGLANG_0_5_23)
    s.plant("SchedulerPPMixin.run_batch=forward_batch")  # found through the mixin, renamed there
    r = ac.check_sglang(s, "0.5.23")
    assert not r.ok and r.missing == ["Scheduler.run_batch(self, batch, …)"]
    assert r.line().startswith("sglang 0.5.23: FAIL — missing: Scheduler.run_batch")


def test_a_changed_signature_fails() -> None:
    files = dict(SGLANG_0_5_23)
    files["sglang/srt/managers/scheduler.py"] = files["sglang/srt/managers/scheduler.py"].replace(
        "def ingest_requests(self, stop_at_pause: bool = False)", "def ingest_requests(self, deadline)")
    r = ac.check_sglang(src(files))
    assert r.missing == ["Scheduler.ingest_requests(self) without required arguments"]


def test_sglang_receiving_in_the_loop_must_be_found() -> None:
    files = dict(SGLANG_0_5_23)
    files["sglang/srt/managers/scheduler.py"] = files["sglang/srt/managers/scheduler.py"].replace(
        "self.ingest_requests()", "self.pull_requests()")
    r = ac.check_sglang(src(files))
    assert len(r.missing) == 1 and r.missing[0].startswith("where an iteration receives")


VLLM_0_11_1 = {
    "vllm/v1/engine/core.py": """
        class EngineCore:
            def __init__(self, vllm_config, executor_class, log_stats):
                self.model_executor = executor_class(vllm_config)
                self.scheduler = Scheduler(vllm_config=vllm_config)
                self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue
                freeze_gc_heap()
            def step(self):
                pass
            def step_with_batch_queue(self):
                pass
        class EngineCoreProc(EngineCore):
            def run_busy_loop(self):
                while True:
                    self._process_engine_step()
        """,
    "vllm/v1/core/sched/scheduler.py": """
        class Scheduler(SchedulerInterface):
            def schedule(self):
                pass
            def update_from_output(self, scheduler_output, model_runner_output):
                pass
        """,
    "vllm/v1/core/sched/output.py": """
        @dataclass
        class NewRequestData:
            req_id: str
        @dataclass
        class SchedulerOutput:
            scheduled_new_reqs: list
            num_scheduled_tokens: dict
            total_num_scheduled_tokens: int
            scheduled_spec_decode_tokens: dict
        """,
    "vllm/v1/executor/abstract.py": """
        class Executor:
            def execute_model(self, scheduler_output, non_block=False):
                pass
            def sample_tokens(self, grammar_output, non_block=False):
                pass
        """,
    "vllm/v1/engine/output_processor.py": """
        class OutputProcessor:
            def process_outputs(self, engine_core_outputs, engine_core_timestamp=None, iteration_stats=None):
                pass
        """,
    "vllm/envs.py": """
        environment_variables = {
            "VLLM_WORKER_MULTIPROC_METHOD": env_with_choices("VLLM_WORKER_MULTIPROC_METHOD", "fork", ["spawn", "fork"]),
        }
        """,
    "vllm/v1/worker/gpu_worker.py": "class Worker: ...\n",
}


def test_vllm_layout_passes_and_says_what_it_must_cope_with() -> None:
    r = ac.check_vllm(src(VLLM_0_11_1), "0.11.1")
    assert r.ok, r.missing
    assert r.notes[0] == "cycles: EngineCore.step, step_with_batch_queue (step_fn bound in EngineCore.__init__)"
    assert any(n.startswith("heap frozen in EngineCore.__init__") for n in r.notes)
    assert any(n.startswith("library engine core started with fork") for n in r.notes)


def test_vllm_planted_rename_and_missing_field_fail() -> None:
    s = src(VLLM_0_11_1)
    s.plant("EngineCore.step=execute_step")
    assert ac.check_vllm(s).missing == ["EngineCore.step(self)"]
    files = dict(VLLM_0_11_1)
    files["vllm/v1/core/sched/output.py"] = files["vllm/v1/core/sched/output.py"].replace(
        "total_num_scheduled_tokens", "num_tokens")
    assert ac.check_vllm(src(files)).missing == ["SchedulerOutput.total_num_scheduled_tokens"]


def test_torch_hooks() -> None:
    files = {"torch/optim/optimizer.py": "def register_optimizer_step_pre_hook(hook): ...\n"
                                         "def register_optimizer_step_post_hook(hook): ...\n",
             "torch/profiler/profiler.py": "class profile:\n    def step(self): ...\n"}
    assert ac.check_torch(src(files)).ok
    files["torch/optim/optimizer.py"] = "def register_optimizer_step_pre_hook(hook): ...\n"
    assert ac.check_torch(src(files)).missing == [
        "torch/optim/optimizer.py: register_optimizer_step_post_hook(hook)"]


def test_fetch_uses_the_cache_without_the_index(tmp_path: Path) -> None:
    (tmp_path / "sglang-0.5.23" / "sglang").mkdir(parents=True)
    assert ac.fetch("sglang", "0.5.23", tmp_path) == tmp_path / "sglang-0.5.23"
