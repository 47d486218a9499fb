from __future__ import annotations

import os
import time
from concurrent.futures import Future

from vllm import VERSION


def _gpu(seconds: float) -> None:
    """The forward pass: a sleep, or with $FAKE_CUPTI_KERNELS (and the fake cupti-python on the
    path) one kernel of that length launched and waited for, as the GPU workers would."""
    name = os.environ.get("FAKE_CUPTI_KERNELS")
    if not name:
        time.sleep(seconds)
        return
    from cupti import cupti

    cupti._fake.launch(name, int(seconds * 1e9))
    cupti._fake.synchronize()


class Executor:
    """The GPU as sleeps: FAKE_EXEC_MS per step plus FAKE_TOKEN_US per token, times FAKE_SLOW."""

    def __init__(self, vllm_config=None):
        self.vllm_config = vllm_config
        self.parallel_config = getattr(vllm_config, "parallel_config", None)
        self.exec_s = float(os.environ.get("FAKE_EXEC_MS", "2")) / 1e3
        self.token_s = float(os.environ.get("FAKE_TOKEN_US", "10")) / 1e6
        self.slow = float(os.environ.get("FAKE_SLOW", "1"))
        self.new_style = VERSION >= (0, 11, 1)
        self.worker = None
        if os.environ.get("VLLM_TORCH_PROFILER_DIR"):  # vLLM's own torch profiler, in the worker
            from vllm.v1.worker.gpu_worker import Worker

            self.worker = Worker(vllm_config)

    def execute_model(self, scheduler_output, non_block: bool = False):
        if self.worker is not None:
            self.worker.execute_model(scheduler_output)
        _gpu((self.exec_s + self.token_s * scheduler_output.total_num_scheduled_tokens) * self.slow)
        if not self.new_style:
            return {"sampled": scheduler_output.total_num_scheduled_tokens}
        fut: Future = Future()
        fut.set_result(None)  # as vLLM: None until sample_tokens
        return fut if non_block else None

    def sample_tokens(self, grammar_output, non_block: bool = False):
        _gpu(0.0002)
        fut: Future = Future()
        fut.set_result({"sampled": True})
        return fut if non_block else fut.result()


class UniProcExecutor(Executor):
    pass
