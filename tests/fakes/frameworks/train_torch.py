"""A training loop as the tests need it: STEPS iterations of (work, optimizer.step()), with a
torch.profiler.profile stepped each iteration when PROFILE is given.  Usage: train_torch.py STEPS [PROFILE]."""
import sys
import time

import torch

steps, profile = int(sys.argv[1]), len(sys.argv) > 2
opt = torch.optim.SGD([torch.zeros(4, requires_grad=True)], lr=0.1)
prof = torch.profiler.profile() if profile else None
for _ in range(steps):
    time.sleep(0.002)  # forward and backward
    opt.zero_grad()
    opt.step()
    if prof is not None:
        prof.step()
