from sglang.srt.managers.scheduler import VERSION


class DetokenizerManager:
    """DetokenizerManager is a process that detokenizes the token ids; a method per batch from
    0.4.3 (before: inline in ``event_loop``)."""

    if VERSION >= (0, 4, 3):
        def handle_batch_token_id_out(self, recv_obj):
            return recv_obj
    else:
        def event_loop_once(self, recv_obj):  # the body of event_loop's `while True`
            return recv_obj
