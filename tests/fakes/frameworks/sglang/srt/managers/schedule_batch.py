from __future__ import annotations

from dataclasses import dataclass

from sglang.srt.model_executor.forward_batch_info import ForwardMode


@dataclass
class Req:
    rid: str
    origin_input_ids: list[int]
    extend_input_len: int = 0
    remaining: int = 0


@dataclass
class ScheduleBatch:
    reqs: list[Req]
    forward_mode: ForwardMode
    extend_num_tokens: int | None = None
    decoding_reqs: list[Req] | None = None  # a MIXED batch: its running decodes

    def batch_size(self) -> int:
        return len(self.reqs)

    def copy(self) -> "ScheduleBatch":
        return ScheduleBatch(list(self.reqs), self.forward_mode, self.extend_num_tokens, self.decoding_reqs)
