class DetokenizerManager:
    """DetokenizerManager is a process that detokenizes the token ids."""

    def handle_batch_token_id_out(self, recv_obj):
        return recv_obj
