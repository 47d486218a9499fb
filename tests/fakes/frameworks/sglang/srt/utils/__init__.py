from sglang.srt.utils.common import freeze_gc

__all__ = ["freeze_gc"]
