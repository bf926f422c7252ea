"""A PyTorch loop that forks a bare os.fork() child (it ends with sys.exit) and a fork-started
multiprocessing pool, then trains on a DataLoader with worker processes."""

import multiprocessing as mp
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    steps = int(sys.argv[1])
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 16), torch.randn(4, 1)
    done = 0
    for i in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        done += 1
        if i == 3:
            pid = os.fork()
            if pid == 0:
                sys.exit(0)
            os.waitpid(pid, 0)
        if i == 4:  # inside the trace window
            with mp.get_context("fork").Pool(2) as pool:
                assert pool.map(square, range(4)) == [0, 1, 4, 9]
    loader = DataLoader(TensorDataset(torch.randn(steps * 4, 16), torch.randn(steps * 4, 1)), batch_size=4, num_workers=2)
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
        done += 1
    print("done", done)
