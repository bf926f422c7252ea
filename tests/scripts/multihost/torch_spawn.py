"""PyTorch's DDP tutorial shape: one command, torch.multiprocessing.spawn starts the ranks.
Usage: torch_spawn.py PORT STEPS SLOW_RANK SLOW_S."""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world_size: int, port: str, steps: int, slow_rank: int, slow_s: float) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        if rank == slow_rank:
            time.sleep(slow_s)
        loss = model(torch.randn(8, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])), nprocs=2, join=True)
