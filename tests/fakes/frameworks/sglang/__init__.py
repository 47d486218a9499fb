"""A stand-in for SGLang (tests only): the module paths, class and method names, signatures and
attribute names the perfdiff adapters use, with sleeps for the GPU.

$FAKE_SGLANG_VERSION picks the shape: "0.5.4" (default: Scheduler.request_receiver.recv_requests)
or "0.4.6" (Scheduler.recv_requests).  $FAKE_SGLANG_RENAME=1 renames Scheduler.run_batch (an
unknown version).
"""
import os

__version__ = os.environ.get("FAKE_SGLANG_VERSION", "0.5.4")
