from .profiler import profile

__all__ = ["profile"]
