"""A stand-in for PyTorch (tests only): ``torch.optim.Optimizer`` with the global step hooks of
PyTorch ≥ 2.0 (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``…_post_hook``,
called around every optimizer's ``step``), and ``torch.profiler.profile.step``."""
__version__ = "2.5.1"
from . import optim, profiler  # noqa: E402,F401


def zeros(n, requires_grad=False):
    return [0.0] * n

