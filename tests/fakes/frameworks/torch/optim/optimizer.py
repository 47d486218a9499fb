from __future__ import annotations

import functools
import os
from collections import OrderedDict
from itertools import chain

_global_optimizer_pre_hooks: dict = OrderedDict()
_global_optimizer_post_hooks: dict = OrderedDict()


class RemovableHandle:
    def __init__(self, hooks: dict, key: int):
        self.hooks, self.key = hooks, key

    def remove(self) -> None:
        self.hooks.pop(self.key, None)


def register_optimizer_step_pre_hook(hook) -> RemovableHandle:
    key = id(hook)
    _global_optimizer_pre_hooks[key] = hook
    return RemovableHandle(_global_optimizer_pre_hooks, key)


def register_optimizer_step_post_hook(hook) -> RemovableHandle:
    key = id(hook)
    _global_optimizer_post_hooks[key] = hook
    return RemovableHandle(_global_optimizer_post_hooks, key)


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.param_groups = [{"params": list(params), **defaults}]
        self._patch_step_function()

    @staticmethod
    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self, *_ = args
            for pre_hook in chain(_global_optimizer_pre_hooks.values()):
                pre_hook(self, args, kwargs)
            out = func(*args, **kwargs)
            for post_hook in chain(_global_optimizer_post_hooks.values()):
                post_hook(self, args, kwargs)
            return out

        wrapper.hooked = True
        return wrapper

    def _patch_step_function(self) -> None:
        hooked = getattr(self.__class__.step, "hooked", None)
        if not hooked:
            self.__class__.step = self.profile_hook_step(self.__class__.step)

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def step(self, closure=None):
        raise NotImplementedError


if os.environ.get("FAKE_TORCH_OLD"):  # PyTorch 1.x: no global step hooks
    del register_optimizer_step_pre_hook
