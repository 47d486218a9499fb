from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import dataclass

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import freeze_gc

VERSION = tuple(int(p) for p in os.environ.get("FAKE_SGLANG_VERSION", "0.5.23").split(".")[:3])
RECEIVER = VERSION >= (0, 5, 13)  # request_receiver.recv_requests, ranks on Scheduler.ps
INGEST = VERSION >= (0, 5, 20)  # ingest_requests, a plan from get_next_batch_to_run, get_parallel()
RUN = "forward_batch" if os.environ.get("FAKE_SGLANG_RENAME") else "run_batch"


@dataclass
class ParallelState:
    tp_rank: int
    pp_rank: int
    dp_rank: int | None


@dataclass
class NextBatchPlan:
    batch_to_run: ScheduleBatch | None
    running_batch: ScheduleBatch | None


@dataclass
class FreezeGCReq:
    """What the server's warm-up sends from 0.5.20 (``/freeze_gc``)."""
    gc_threshold: int | None = None


class Scheduler:
    """FAKE_REQUESTS requests of FAKE_PROMPT tokens and FAKE_OUTPUT outputs, FAKE_BATCH at once;
    a prefill batch whenever requests wait (under FAKE_MIXED one request at a time, mixed with
    the running decodes), else a decode batch.  Exits once all are done."""

    def __init__(self, server_args=None, port_args=None, gpu_id=0, tp_rank=0, moe_ep_rank=0, pp_rank=0,
                 dp_rank=None, conn=None):
        if INGEST:
            get_parallel().publish(tp_rank=tp_rank, pp_rank=pp_rank)  # dp_rank unpublished: reading it raises
        elif RECEIVER:
            self.ps = ParallelState(tp_rank, pp_rank, dp_rank)
        else:
            self.tp_rank, self.pp_rank, self.dp_rank = tp_rank, pp_rank, dp_rank
        self.conn = conn
        self.prompt = int(os.environ.get("FAKE_PROMPT", "32"))
        self.output = int(os.environ.get("FAKE_OUTPUT", "8"))
        self.max_batch = int(os.environ.get("FAKE_BATCH", "4"))
        self.exec_s = float(os.environ.get("FAKE_EXEC_MS", "2")) / 1e3
        self.slow = float(os.environ.get("FAKE_SLOW", "1"))
        self.mixed = bool(os.environ.get("FAKE_MIXED"))
        self.waiting = [Req(f"r{i}", [0] * self.prompt) for i in range(int(os.environ.get("FAKE_REQUESTS", "8")))]
        self.running: list[Req] = []
        self.running_batch = None
        self.last_batch = None
        self.idle_left = 3  # idle iterations once everything is done, then exit
        self._deferred_input_requests = []
        self.warmed_up = not INGEST  # 0.5.20 on: the warm-up's /freeze_gc arrives first
        if RECEIVER:
            self.init_request_receiver()

    def init_request_receiver(self) -> None:
        from sglang.srt.managers.scheduler_components.request_receiver import SchedulerRequestReceiver

        self.request_receiver = SchedulerRequestReceiver(recv_from_tokenizer=self._recv, recv_from_rpc=None,
                                                         max_recv_per_poll=-1, get_last_batch=lambda: self.last_batch)

    def _recv(self):
        if not self.warmed_up:
            self.warmed_up = True
            return [FreezeGCReq()]
        if not self.waiting and not self.running and self.last_batch is None:
            self.idle_left -= 1
            if self.idle_left < 0:
                if self.conn is not None:
                    self.conn.send("done")
                sys.exit(0)
        return []

    if not RECEIVER:
        def recv_requests(self):
            return self._recv()

    if INGEST:
        def ingest_requests(self, stop_at_pause: bool = False):
            self._deferred_input_requests.extend(self.request_receiver.recv_requests(local_reqs=[]))
            recv_reqs = self._deferred_input_requests[:]
            del self._deferred_input_requests[:]
            self.process_input_requests(recv_reqs)
            return recv_reqs

    def process_input_requests(self, recv_reqs) -> None:
        for recv_req in recv_reqs:
            if isinstance(recv_req, FreezeGCReq):
                self.handle_freeze_gc(recv_req)

    def handle_freeze_gc(self, recv_req: FreezeGCReq):
        """Handle freeze_gc request: freeze scheduler's GC and forward to detokenizer."""
        freeze_gc("Scheduler")

    def _next_batch(self):
        if self.waiting and len(self.running) < self.max_batch:
            new = []
            while self.waiting and len(self.running) + len(new) < self.max_batch and not (self.mixed and new):
                r = self.waiting.pop(0)
                r.extend_input_len, r.remaining = self.prompt, self.output
                new.append(r)
            tokens = sum(r.extend_input_len for r in new)
            if self.mixed and self.running:
                decoding = list(self.running)
                self.running += new
                return ScheduleBatch(new + decoding, ForwardMode.MIXED, tokens + len(decoding), decoding)
            self.running += new
            return ScheduleBatch(new, ForwardMode.EXTEND, tokens)
        if self.running:
            return ScheduleBatch(list(self.running), ForwardMode.DECODE)
        return None

    if INGEST:
        def get_next_batch_to_run(self, running_batch=None, last_batch=None) -> NextBatchPlan:
            return NextBatchPlan(self._next_batch(), running_batch)
    else:
        def get_next_batch_to_run(self):
            return self._next_batch()

    def run_batch(self, batch: ScheduleBatch, pp_proxy_tensors=None):
        tokens = batch.extend_num_tokens if batch.forward_mode.is_extend() else len(batch.reqs)
        time.sleep((self.exec_s + 10e-6 * tokens) * self.slow)
        return {"next_token_ids": [0] * len(batch.reqs)}

    def process_batch_result(self, batch: ScheduleBatch, result) -> None:
        decoded = batch.reqs if batch.forward_mode.is_decode() else batch.decoding_reqs or []
        for r in decoded:
            r.remaining -= 1
        self.running = [r for r in self.running if r.remaining > 0]
        if self.conn is not None:
            self.conn.send({"rids": [r.rid for r in batch.reqs]})

    def self_check_during_idle(self) -> None:
        pass

    def _receive(self) -> None:
        if INGEST:
            self.ingest_requests()
        elif RECEIVER:
            self.process_input_requests(self.request_receiver.recv_requests())
        else:
            self.process_input_requests(self.recv_requests())

    def _get_next(self):
        if not INGEST:
            return self.get_next_batch_to_run()
        plan = self.get_next_batch_to_run(running_batch=self.running_batch, last_batch=self.last_batch)
        self.running_batch = plan.running_batch
        return plan.batch_to_run

    def event_loop_normal(self):
        """A normal scheduler loop."""
        while True:
            self._receive()
            batch = self._get_next()
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
            self._receive()
            batch = self._get_next()
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
    tp_rank = int(os.environ.get("FAKE_TP_RANK", tp_rank))
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank, conn=pipe_writer)
    if os.environ.get("FAKE_SGLANG_OVERLAP"):
        scheduler.event_loop_overlap()
    else:
        scheduler.event_loop_normal()
