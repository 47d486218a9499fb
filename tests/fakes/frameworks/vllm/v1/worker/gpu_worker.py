"""A GPU worker as vLLM's: with $VLLM_TORCH_PROFILER_DIR set it runs vLLM's own torch profiler
and steps it once per ``execute_model`` (the worker's torch.profiler.profile.step)."""
from __future__ import annotations

import os

import torch


class Worker:
    def __init__(self, vllm_config=None):
        self.vllm_config = vllm_config
        self.profiler = torch.profiler.profile() if os.environ.get("VLLM_TORCH_PROFILER_DIR") else None
        if self.profiler is not None:
            self.profiler.__enter__()

    def execute_model(self, scheduler_output):
        if self.profiler is not None:
            self.profiler.step()
        return None
