"""torch.compile'd model (aot_eager backend), bf16 autocast, a DataLoader with 2 worker processes: 20 updates."""

import torch
from torch_truth import update_flops
from truth import Clock, write

UPDATES = 20
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)


def main():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    compiled = torch.compile(model, backend="aot_eager")  # Dynamo + AOTAutograd; inductor would spend minutes in g++ on a small CPU machine
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(UPDATES * 64, 256))
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=2)

    def loss_of(m, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (m(x).float() ** 2).mean()

    clock = Clock()
    for (x,) in loader:
        loss_of(compiled, x).backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.tick()
    write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=update_flops(model, [torch.randn(64, 256)], loss_of))


if __name__ == "__main__":  # DataLoader workers may be spawned: they import this module
    main()
