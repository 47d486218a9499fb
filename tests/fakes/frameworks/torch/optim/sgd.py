import time

from .optimizer import Optimizer


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        time.sleep(0.0005)
