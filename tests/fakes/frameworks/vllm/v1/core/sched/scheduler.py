from __future__ import annotations

import os

from vllm import VERSION
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput


class Scheduler:
    """Requests of FAKE_PROMPT prompt tokens and FAKE_OUTPUT output tokens, at most
    FAKE_BATCH running: a new request is prefilled whole, then decodes one token per step."""

    def __init__(self, vllm_config=None, kv_cache_config=None, structured_output_manager=None,
                 include_finished_set=False, log_stats=False, block_size=16, hash_block_size=16):
        self.prompt = int(os.environ.get("FAKE_PROMPT", "32"))
        self.output = int(os.environ.get("FAKE_OUTPUT", "8"))
        self.max_batch = int(os.environ.get("FAKE_BATCH", "4"))
        self.waiting: list[str] = []
        self.running: dict[str, int] = {}  # request → tokens still to produce
        self.cached_object = VERSION >= (0, 9, 2)  # one CachedRequestData (a list of them before)

    def add_request(self, req_id: str) -> None:
        self.waiting.append(req_id)

    def has_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        cached = list(self.running)
        new = []
        while self.waiting and len(self.running) < self.max_batch:
            rid = self.waiting.pop(0)
            self.running[rid] = self.output
            new.append(rid)
        n = {rid: 1 for rid in cached} | {rid: self.prompt for rid in new}
        cached_data = (CachedRequestData(cached, [False] * len(cached), [[]] * len(cached), [0] * len(cached))
                       if self.cached_object else [])
        new_data = [NewRequestData(r, [0] * self.prompt) for r in new]
        if VERSION < (0, 7, 3):
            return SchedulerOutput(new_data, [], [], n, sum(n.values()))
        return SchedulerOutput(new_data, cached_data, n, sum(n.values()))

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output) -> dict:
        done = []
        for rid in scheduler_output.num_scheduled_tokens:
            if rid not in self.running:
                continue  # finished while this batch was queued (pipelined batches)
            self.running[rid] -= 1
            if self.running[rid] <= 0:
                done.append(rid)
        for rid in done:
            del self.running[rid]
        return {0: {"finished": done, "tokens": scheduler_output.total_num_scheduled_tokens}}
