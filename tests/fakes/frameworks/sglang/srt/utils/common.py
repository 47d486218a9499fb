import gc


def freeze_gc(context: str):
    """As SGLang's: every object the collector tracks moves to the permanent generation, where
    ``gc.get_referrers`` no longer looks."""
    gc.freeze()
