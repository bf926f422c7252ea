"""Data parallel by hand: an explicit all_reduce of each gradient, a tcp:// rendezvous with the rank
in RANK_ID (no torchrun variables). Usage: torch_allreduce.py PORT STEPS SLOW_RANK SLOW_S."""

import os
import sys
import time

import torch
import torch.distributed as dist

port, steps, slow_rank, slow_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rank = int(os.environ["RANK_ID"])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(steps):
    if rank == slow_rank:
        time.sleep(slow_s)
    loss = model(torch.randn(32, 64)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2
    optimizer.step()
dist.barrier()
dist.destroy_process_group()
