from __future__ import annotations

import os
import sys
import time
from collections import deque

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

NEW_STYLE = not os.environ.get("FAKE_SGLANG_VERSION", "").startswith("0.4")
RUN = "forward_batch" if os.environ.get("FAKE_SGLANG_RENAME") else "run_batch"


class _Receiver:
    def __init__(self, scheduler: "Scheduler"):
        self.scheduler = scheduler

    def recv_requests(self):
        return self.scheduler._recv()


class Scheduler:
    """FAKE_REQUESTS requests of FAKE_PROMPT tokens and FAKE_OUTPUT outputs, FAKE_BATCH at once;
    a prefill batch whenever requests wait, else a decode batch.  Exits once all are done."""

    def __init__(self, server_args=None, port_args=None, gpu_id=0, tp_rank=0, moe_ep_rank=0, pp_rank=0,
                 dp_rank=None, conn=None):
        self.tp_rank, self.pp_rank, self.dp_rank = tp_rank, pp_rank, dp_rank
        self.conn = conn
        self.prompt = int(os.environ.get("FAKE_PROMPT", "32"))
        self.output = int(os.environ.get("FAKE_OUTPUT", "8"))
        self.max_batch = int(os.environ.get("FAKE_BATCH", "4"))
        self.exec_s = float(os.environ.get("FAKE_EXEC_MS", "2")) / 1e3
        self.slow = float(os.environ.get("FAKE_SLOW", "1"))
        self.waiting = [Req(f"r{i}", [0] * self.prompt) for i in range(int(os.environ.get("FAKE_REQUESTS", "8")))]
        self.running: list[Req] = []
        self.last_batch = None
        self.idle_left = 3  # idle iterations once everything is done, then exit
        if NEW_STYLE:
            self.request_receiver = _Receiver(self)

    def _recv(self):
        if not self.waiting and not self.running and self.last_batch is None:
            self.idle_left -= 1
            if self.idle_left < 0:
                if self.conn is not None:
                    self.conn.send("done")
                sys.exit(0)
        return []

    if not NEW_STYLE:
        def recv_requests(self):
            return self._recv()

    def process_input_requests(self, recv_reqs) -> None:
        pass

    def get_next_batch_to_run(self):
        if self.waiting and len(self.running) < self.max_batch:
            new = []
            while self.waiting and len(self.running) + len(new) < self.max_batch:
                r = self.waiting.pop(0)
                r.extend_input_len, r.remaining = self.prompt, self.output
                new.append(r)
            self.running += new
            return ScheduleBatch(new, ForwardMode.EXTEND, sum(r.extend_input_len for r in new))
        if self.running:
            return ScheduleBatch(list(self.running), ForwardMode.DECODE)
        return None

    def run_batch(self, batch: ScheduleBatch):
        tokens = batch.extend_num_tokens if batch.forward_mode.is_extend() else len(batch.reqs)
        time.sleep((self.exec_s + 10e-6 * tokens) * self.slow)
        return {"next_token_ids": [0] * len(batch.reqs)}

    def process_batch_result(self, batch: ScheduleBatch, result) -> None:
        if batch.forward_mode.is_decode():
            for r in batch.reqs:
                r.remaining -= 1
            self.running = [r for r in self.running if r.remaining > 0]
        if self.conn is not None:
            self.conn.send({"rids": [r.rid for r in batch.reqs]})

    def self_check_during_idle(self) -> None:
        pass

    def event_loop_normal(self):
        """A normal scheduler loop."""
        while True:
            recv_reqs = self.request_receiver.recv_requests() if NEW_STYLE else self.recv_requests()
            self.process_input_requests(recv_reqs)
            batch = self.get_next_batch_to_run()
            self.cur_batch = batch
            if batch:
                result = getattr(self, RUN)(batch)
                self.process_batch_result(batch, result)
            else:
                self.self_check_during_idle()
            self.last_batch = batch

    def event_loop_overlap(self):
        """A scheduler loop that overlaps the CPU processing and GPU computation."""
        self.result_queue = deque()
        while True:
            recv_reqs = self.request_receiver.recv_requests() if NEW_STYLE else self.recv_requests()
            self.process_input_requests(recv_reqs)
            batch = self.get_next_batch_to_run()
            self.cur_batch = batch
            if batch:
                batch_result = getattr(self, RUN)(batch)
                self.result_queue.append((batch.copy(), batch_result))
            if self.last_batch:
                tmp_batch, tmp_result = self.result_queue.popleft()
                self.process_batch_result(tmp_batch, tmp_result)
            elif batch is None:
                self.self_check_during_idle()
            self.last_batch = batch


if os.environ.get("FAKE_SGLANG_RENAME"):
    Scheduler.forward_batch = Scheduler.run_batch
    del Scheduler.run_batch


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank, pipe_writer):
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank, conn=pipe_writer)
    if os.environ.get("FAKE_SGLANG_OVERLAP"):
        scheduler.event_loop_overlap()
    else:
        scheduler.event_loop_normal()
