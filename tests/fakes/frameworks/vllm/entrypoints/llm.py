"""vLLM used as a library: ``LLM(...)`` starts its engine core in a child process with the
multiprocessing method of ``get_mp_context()`` — fork, unless $VLLM_WORKER_MULTIPROC_METHOD
says spawn (the CLI sets it; the library does not)."""
from __future__ import annotations

from vllm.utils.system_utils import get_mp_context
from vllm.v1.engine.core import EngineCoreProc


class LLM:
    def __init__(self, model: str = "fake", **kwargs):
        self.model = model

    def generate(self, requests: int) -> int:
        """Run `requests` requests through an engine core in a child process; its steps."""
        ctx = get_mp_context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=EngineCoreProc.run_engine_core, args=(child, requests), name="EngineCore_0")
        proc.start()
        steps = 0
        while True:
            out = parent.recv()
            if out == "done":
                break
            steps += 1
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"engine core died ({proc.exitcode})")
        return steps
