"""A torch MLP with AdamW that times its own steps (for bench/torch_record_overhead.py).

argv: OUT.json --steps N --width W
"""

import argparse
import json
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--width", type=int, default=512)
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
times = []
for _ in range(args.steps):
    t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
json.dump({"step_times_s": times}, open(args.out, "w"))
