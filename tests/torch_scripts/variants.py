"""Step sources and faults. argv: MODE STEPS, MODE one of profiler | explicit | manual | by_hand | lbfgs | raise | sigint | slow.

manual: an optimizer made but never stepped (updates by hand); by_hand: no optimizer at all;
lbfgs: torch.optim.LBFGS, whose step(closure) runs the closure's backward() several times."""

import sys
import time

import torch
from torch import nn

import tpu_perf

mode, steps = sys.argv[1], int(sys.argv[2])
model = nn.Linear(64, 64)
opt = None if mode == "by_hand" else torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4) if mode == "lbfgs" else torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)


def train_step():
    if mode == "lbfgs":
        def closure():
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            return loss

        opt.step(closure)
        return
    loss = model(x).square().mean()
    model.zero_grad() if opt is None else opt.zero_grad()
    loss.backward()
    if mode in ("manual", "by_hand"):  # plain tensor updates, no torch.optim step
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
    else:
        opt.step()


if mode == "profiler":
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=torch.profiler.schedule(wait=100, warmup=1, active=1)) as prof:
        for _ in range(steps):
            train_step()
            prof.step()
elif mode == "explicit":
    for i in range(steps):
        with tpu_perf.step(i):
            train_step()
else:
    for i in range(steps):
        train_step()
        if mode == "raise" and i == steps // 2:
            raise RuntimeError("boom in the training loop")
        if mode == "sigint" and i == steps // 2:
            raise KeyboardInterrupt
        if mode == "slow":
            time.sleep(0.05)
