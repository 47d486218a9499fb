"""vLLM's environment variables, the ones the stand-in reads."""
import os


def __getattr__(name: str):
    if name == "VLLM_WORKER_MULTIPROC_METHOD":
        return os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork")  # vLLM's default: fork
    raise AttributeError(name)
