from __future__ import annotations

import gc
import os
from collections import deque
from types import SimpleNamespace

from vllm import VERSION
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: F401 - as vLLM imports it
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.executor.abstract import UniProcExecutor

STEP_FN = VERSION >= (0, 7, 3)  # the busy loop calls step_fn: step or step_with_batch_queue
NON_BLOCK = VERSION >= (0, 11, 1)  # execute_model(non_block=True) → Future, then sample_tokens
TUPLE = VERSION >= (0, 9, 0)  # step returns (outputs, model executed)
FREEZE_PROC = (0, 10, 2) <= VERSION < (0, 11, 1)  # gc.freeze() at the end of EngineCoreProc.__init__
FREEZE_CORE = VERSION >= (0, 11, 1)  # freeze_gc_heap() at the end of EngineCore.__init__


class EngineCore:
    """Inner loop of vLLM's Engine."""

    def __init__(self, vllm_config=None, executor_class=UniProcExecutor, log_stats: bool = False,
                 executor_fail_callback=None):
        if VERSION >= (0, 9, 0):
            self.vllm_config = vllm_config  # before: on the executor only
        self.model_executor = executor_class(vllm_config)
        self.scheduler = Scheduler(vllm_config=vllm_config)
        if STEP_FN:
            self.batch_queue_size = int(os.environ.get("FAKE_BATCH_QUEUE", "1"))
            self.batch_queue = deque(maxlen=self.batch_queue_size) if self.batch_queue_size > 1 else None
            step = "step" if not os.environ.get("FAKE_VLLM_RENAME") else "execute_step"
            self.step_fn = getattr(self, step) if self.batch_queue is None else self.step_with_batch_queue
        if FREEZE_CORE:
            # Mark the startup heap as static so that it's ignored by GC.
            from vllm.utils.gc_utils import freeze_gc_heap

            freeze_gc_heap()

    def add_request(self, req_id: str) -> None:
        self.scheduler.add_request(req_id)

    def step(self):
        if not self.scheduler.has_requests():
            return ({}, False) if TUPLE else {}
        scheduler_output = self.scheduler.schedule()
        if NON_BLOCK:
            future = self.model_executor.execute_model(scheduler_output, non_block=True)
            model_output = future.result()
            if model_output is None:
                model_output = self.model_executor.sample_tokens(None)
        else:
            model_output = self.model_executor.execute_model(scheduler_output)
        outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        return (outputs, scheduler_output.total_num_scheduled_tokens > 0) if TUPLE else outputs

    if STEP_FN:
        def step_with_batch_queue(self):
            batch_queue = self.batch_queue
            if self.scheduler.has_requests() and len(batch_queue) < self.batch_queue_size:
                scheduler_output = self.scheduler.schedule()
                exec_future = self.model_executor.execute_model(scheduler_output, non_block=True)
                future = self.model_executor.sample_tokens(None, non_block=True)
                batch_queue.appendleft((future, scheduler_output, exec_future))
                if len(batch_queue) < self.batch_queue_size:
                    return None, True
            elif not batch_queue:
                return None, False
            future, scheduler_output, _ = batch_queue.pop()
            model_output = future.result()
            return self.scheduler.update_from_output(scheduler_output, model_output), True


if os.environ.get("FAKE_VLLM_RENAME"):
    EngineCore.execute_step = EngineCore.step
    del EngineCore.step


class EngineCoreProc(EngineCore):
    """The engine core in its own process: a busy loop over the input queue and the steps."""

    def __init__(self, conn, requests: int, **kwargs):
        super().__init__(**kwargs)
        self.conn = conn
        for i in range(requests):
            self.add_request(f"req-{i}")
        if FREEZE_PROC:
            # Mark the startup heap as static so that it's ignored by GC.
            gc.collect()
            gc.freeze()

    @staticmethod
    def run_engine_core(conn, requests: int) -> None:
        rank = int(os.environ.get("FAKE_DP_RANK", "0"))
        config = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_rank=rank))
        engine = EngineCoreProc(conn, requests, vllm_config=config)
        engine.run_busy_loop()

    def run_busy_loop(self) -> None:
        step = self.step_fn if STEP_FN else (self.execute_step if os.environ.get("FAKE_VLLM_RENAME") else self.step)
        while self.scheduler.has_requests() or getattr(self, "batch_queue", None):
            outputs = step()
            self.conn.send(outputs)
        for _ in range(int(os.environ.get("FAKE_IDLE_STEPS", "0"))):
            step()  # nothing to schedule: no outputs to send
        self.conn.send("done")
