from . import optimizer  # noqa: F401
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD"]
