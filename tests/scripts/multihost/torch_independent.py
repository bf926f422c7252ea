"""Joins a gloo process group, then each rank trains alone (no collective in the loop), so one
rank can die while the other finishes. Usage: torch_independent.py PORT STEPS_RANK0 STEPS_RANK1."""

import os
import sys
import time

import torch
import torch.distributed as dist

port = sys.argv[1]
rank = int(os.environ["RANK_ID"])
steps = int(sys.argv[2 + rank])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
model = torch.nn.Linear(32, 32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(steps):
    loss = model(torch.randn(8, 32)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.1)
