"""vLLM used as a library (``from vllm import LLM``-style): the engine core is started with
fork unless $VLLM_WORKER_MULTIPROC_METHOD says spawn.  Usage: llm_vllm.py REQUESTS."""
import sys

from vllm.entrypoints.llm import LLM

if __name__ == "__main__":
    print(f"engine steps {LLM().generate(int(sys.argv[1]))}", file=sys.stderr)
