from __future__ import annotations

from dataclasses import dataclass, field

from vllm import VERSION


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int]
    num_computed_tokens: int = 0


@dataclass
class CachedRequestData:
    req_ids: list[str]
    resumed_from_preemption: list[bool]
    new_token_ids: list[list[int]]
    num_computed_tokens: list[int]


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData | list
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    finished_req_ids: set[str] = field(default_factory=set)


if VERSION < (0, 7, 3):
    @dataclass
    class SchedulerOutput:  # type: ignore[no-redef] - 0.6.4 to 0.7.0: no speculative tokens
        scheduled_new_reqs: list[NewRequestData]
        scheduled_resumed_reqs: list
        scheduled_running_reqs: list
        num_scheduled_tokens: dict[str, int]
        total_num_scheduled_tokens: int
        finished_req_ids: set[str] = field(default_factory=set)
