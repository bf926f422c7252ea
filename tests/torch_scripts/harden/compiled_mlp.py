"""A torch.compile'd model (inductor) trained with AdamW; MODE eager runs the same model uncompiled.
Counts one eager step's FLOPs itself (FlopCounterMode on an uncompiled copy) for the test."""

import json
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

if __name__ == "__main__":
    steps, out = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)
    x, y = torch.randn(32, 64), torch.randn(32, 8)

    def step(net) -> None:
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    for _ in range(steps):
        step(compiled)
    with FlopCounterMode(display=False) as mode:
        step(model)
    json.dump({"iterations": steps, "eager_flops": mode.get_total_flops()}, open(out, "w"))
