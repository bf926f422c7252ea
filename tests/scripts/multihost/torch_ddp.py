"""DistributedDataParallel on gloo, launched the torchrun way (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE in the environment). Usage: torch_ddp.py STEPS SLOW_RANK SLOW_S."""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps, slow_rank, slow_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group(backend="gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(steps):
    x, y = torch.randn(16, 64), torch.randint(0, 8, (16,))
    if rank == slow_rank:
        time.sleep(slow_s)  # a slower data loader on this rank
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
