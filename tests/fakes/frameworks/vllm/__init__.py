"""A stand-in for vLLM V1 (tests only): the module paths, class and method names, signatures
and attribute names the perfdiff adapters use, with sleeps for the GPU.

$FAKE_VLLM_VERSION picks the shape: "0.11.2" (default: Future from a non-blocking
execute_model, separate sample_tokens, step returns (outputs, executed)) or "0.8.5" (a blocking
execute_model, no sample_tokens, step returns the outputs).  $FAKE_VLLM_RENAME=1 renames
EngineCore.step (an unknown version).
"""
import os

__version__ = os.environ.get("FAKE_VLLM_VERSION", "0.11.2")
