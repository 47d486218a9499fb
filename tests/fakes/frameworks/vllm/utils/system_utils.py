import multiprocessing

from vllm import envs


def get_mp_context():
    """As vLLM's (0.11.1 on; ``vllm.utils.get_mp_context`` before): the method
    $VLLM_WORKER_MULTIPROC_METHOD names, fork by default.  (vLLM forces spawn where CUDA was
    initialised already; ``vllm serve`` sets spawn for its whole process tree.)"""
    return multiprocessing.get_context(envs.VLLM_WORKER_MULTIPROC_METHOD)
