from sglang.srt.managers.scheduler import VERSION


class TokenizerManager:
    """TokenizerManager is a process that tokenizes the text (the API server side).  Its batch
    output handler is a method from 0.4.1 (before: inline in ``handle_loop``), a coroutine from
    0.5.11."""

    def __init__(self, server_args=None, port_args=None):
        self.rid_to_state = {}

    def _count(self, recv_obj):
        for rid in recv_obj["rids"]:
            self.rid_to_state[rid] = self.rid_to_state.get(rid, 0) + 1

    if VERSION >= (0, 5, 11):
        async def _handle_batch_output(self, recv_obj):
            self._count(recv_obj)
    elif VERSION >= (0, 4, 1):
        def _handle_batch_output(self, recv_obj):
            self._count(recv_obj)
    else:
        def handle_loop_once(self, recv_obj):  # the body of handle_loop's `while True`
            self._count(recv_obj)


