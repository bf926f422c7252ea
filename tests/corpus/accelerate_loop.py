"""accelerate: a plain PyTorch loop through Accelerator, gradient accumulation 4 with
`accelerator.accumulate(model)`: 80 micro-batches, 20 optimizer updates."""

import torch
from accelerate import Accelerator
from torch_truth import update_flops
from truth import Clock, write

ACCUM, UPDATES = 4, 20  # 20 updates: after warm-up and the trace window, a dozen steady ones to take a median of
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.TensorDataset(torch.randn(ACCUM * UPDATES * 64, 256))
loader = torch.utils.data.DataLoader(data, batch_size=64)
accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)


def loss_of(m, x):
    return (m(x) ** 2).mean()


clock = Clock()
for (x,) in loader:
    with accelerator.accumulate(model):
        accelerator.backward(loss_of(model, x))
        optimizer.step()
        optimizer.zero_grad()
    if accelerator.sync_gradients:
        clock.tick()
x = torch.randn(64, 256)
write(iterations=ACCUM * UPDATES, updates=UPDATES, micro_batches=ACCUM, times=clock.times, flops=update_flops(model, [x] * ACCUM, loss_of))
