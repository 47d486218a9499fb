from __future__ import annotations

from vllm.v1.engine.detokenizer import IncrementalDetokenizer  # noqa: F401 - as vLLM imports it


class OutputProcessor:
    """Process EngineCoreOutputs into RequestOutputs (the API server process)."""

    def __init__(self, tokenizer=None, log_stats: bool = False):
        self.seen = 0

    def process_outputs(self, engine_core_outputs, engine_core_timestamp=None, iteration_stats=None):
        self.seen += 1
        return engine_core_outputs
