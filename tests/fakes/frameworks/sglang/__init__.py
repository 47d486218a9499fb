"""A stand-in for SGLang (tests only): the module paths, class and method names, signatures and
attribute names the perfdiff adapters use, with sleeps for the GPU.

$FAKE_SGLANG_VERSION picks the layout of the scheduler, as SGLang's source has it:

* "0.4.6" (0.3.6 to 0.5.12): ``Scheduler.recv_requests``, the ranks as ``Scheduler.tp_rank`` …,
  ``get_next_batch_to_run()`` returns the batch;
* "0.5.13" (0.5.13 to 0.5.19): ``Scheduler.request_receiver.recv_requests`` — the receiver a
  ``@dataclass(kw_only=True, slots=True, frozen=True)`` in
  ``sglang.srt.managers.scheduler_components.request_receiver``, so nothing can be set on it —, the ranks on
  ``Scheduler.ps`` (0.5.16 on: ``get_next_batch_to_run`` returns a plan, as in "0.5.23");
* "0.5.23" (default; 0.5.20 on): ``Scheduler.ingest_requests`` calls
  ``request_receiver.recv_requests(local_reqs=…)``, ``get_next_batch_to_run(running_batch=…,
  last_batch=…)`` returns a plan, the ranks come from ``sglang.srt.runtime_context.get_parallel()``;
  the first thing received is the warm-up's ``FreezeGCReq`` (``/freeze_gc``), and
  ``Scheduler.handle_freeze_gc`` freezes the process's heap (``gc.freeze()``, through
  ``sglang.srt.utils.freeze_gc``).

$FAKE_SGLANG_RENAME=1 renames Scheduler.run_batch (an unknown version); $FAKE_MIXED=1 mixes
new prefills with the running decodes (ForwardMode.MIXED); $FAKE_TP_RANK sets the scheduler's
tensor-parallel rank.
"""
import os

__version__ = os.environ.get("FAKE_SGLANG_VERSION", "0.5.23")
