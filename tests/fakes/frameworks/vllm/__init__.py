"""A stand-in for vLLM V1 (tests only): the module paths, class and method names, signatures
and attribute names the perfdiff adapters use, with sleeps for the GPU.

$FAKE_VLLM_VERSION picks the layout, as vLLM's source has it:

* "0.6.4" (0.6.4 to 0.7.0): the busy loop calls ``EngineCore.step`` itself, which returns the
  outputs; a blocking ``execute_model``; no batch queue; the API server processes outputs in
  ``vllm.v1.engine.detokenizer.Detokenizer.step`` (0.6.x);
* "0.8.5" (0.7.3 to 0.11.0): the busy loop calls ``step_fn``, bound to ``step`` or
  ``step_with_batch_queue``; a blocking ``execute_model``, no ``sample_tokens``;
  ``OutputProcessor.process_outputs``;
* "0.11.2" (default; 0.11.1 on): a Future from a non-blocking ``execute_model``, a separate
  ``sample_tokens``, ``step`` returns (outputs, executed).

The heap is frozen at engine start as vLLM does it (``gc.freeze()`` at the end of
``EngineCoreProc.__init__`` in 0.10.2 to 0.11.0, ``vllm.utils.gc_utils.freeze_gc_heap()`` at
the end of ``EngineCore.__init__`` from 0.11.1): ``gc.get_referrers`` finds no engine then.

$FAKE_VLLM_RENAME=1 renames EngineCore.step (an unknown version); $FAKE_IDLE_STEPS=N makes the
busy loop step N more times with no requests, as an idle data-parallel rank does;
$FAKE_DP_RANK sets the engine's data-parallel rank.
"""
import os

__version__ = os.environ.get("FAKE_VLLM_VERSION", "0.11.2")
VERSION = tuple(int(p) for p in __version__.split(".")[:3])
