"""SGLang's request receiver (0.5.13 on), as its source has it: a frozen, slotted dataclass,
so no attribute can be set on an instance (``dataclasses.FrozenInstanceError``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from sglang.srt.managers.scheduler import VERSION


@dataclass(kw_only=True, slots=True, frozen=True)
class SchedulerRequestReceiver:
    recv_from_tokenizer: Callable[[], List[Any]]  # a zmq socket in SGLang; here the fake's queue
    recv_from_rpc: Optional[Any]
    max_recv_per_poll: int
    get_last_batch: Callable[[], Any]

    if VERSION >= (0, 5, 20):
        def recv_requests(self, local_reqs: Optional[List[Any]] = None) -> List[Any]:
            """Receive results at tp_rank = 0 and broadcast it to all other TP ranks."""
            return self.recv_from_tokenizer() + list(local_reqs or [])
    else:
        def recv_requests(self) -> List[Any]:
            """Receive results at tp_rank = 0 and broadcast it to all other TP ranks."""
            return self.recv_from_tokenizer()
