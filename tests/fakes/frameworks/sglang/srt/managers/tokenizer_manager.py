class TokenizerManager:
    """TokenizerManager is a process that tokenizes the text (the API server side)."""

    def __init__(self, server_args=None, port_args=None):
        self.rid_to_state = {}

    def _handle_batch_output(self, recv_obj):
        for rid in recv_obj["rids"]:
            self.rid_to_state[rid] = self.rid_to_state.get(rid, 0) + 1
