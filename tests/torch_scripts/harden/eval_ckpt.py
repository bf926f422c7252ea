"""A PyTorch loop that evaluates (model.eval() + no_grad) and saves a checkpoint every EVERY steps."""

import json
import sys

import torch
from torch import nn

if __name__ == "__main__":
    steps, every, out, ckpt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y, held_out = torch.randn(8, 32), torch.randn(8, 1), torch.randn(256, 32)
    flagged = []
    for i in range(steps):
        model.train()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if i % every == every - 1 and i < steps - 1:
            model.eval()
            with torch.no_grad():
                model(held_out).mean().item()
            torch.save(model.state_dict(), ckpt)
            flagged.append(i + 1)  # the eval runs in the next step's iteration (it ends at the next optimizer step)
    json.dump({"iterations": steps, "interleaved_steps": flagged}, open(out, "w"))
