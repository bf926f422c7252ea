"""A PyTorch loop with host input work before each step and `loss.item()` after it; it times its
own iterations (one optimizer step to the next) with a wall clock.

Usage: hostwork.py OUT_JSON [--steps N] [--host-ms MS]
"""

import argparse
import json
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--host-ms", type=float, default=50.0)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
ends = []
for step in range(args.steps):
    time.sleep(args.host_ms / 1e3)  # reading and collating the next batch
    x = torch.randn(32, 256)
    loss = nn.functional.mse_loss(model(x), x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ends.append(time.perf_counter())  # the iteration's clock: one optimizer step to the next
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
    else:
        loss.item()
with open(args.out, "w") as f:
    json.dump({"iteration_s": [b - a for a, b in zip(ends, ends[1:], strict=False)], "steps": args.steps}, f)
