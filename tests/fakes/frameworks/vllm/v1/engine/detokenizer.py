"""The API server's detokenizer: a ``Detokenizer`` with ``step`` in 0.6.x; later versions keep
only the per-request ``IncrementalDetokenizer`` here (``OutputProcessor`` processes outputs)."""
from __future__ import annotations

from vllm import VERSION


class IncrementalDetokenizer:
    def __init__(self, request=None):
        self.tokens: list[int] = []


if VERSION < (0, 7, 0):
    class Detokenizer:
        def __init__(self, tokenizer_name: str = "", tokenizer_mode: str = "auto"):
            self.seen = 0

        def step(self, encore_core_outputs):
            self.seen += 1
            return encore_core_outputs, []
