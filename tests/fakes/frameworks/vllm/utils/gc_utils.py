import gc


def freeze_gc_heap() -> None:
    """As vLLM's (0.11.1 on, called at the end of ``EngineCore.__init__``): every object the
    collector tracks moves to the permanent generation, where ``gc.get_referrers`` no longer
    looks."""
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    gc.freeze()
