"""Hugging Face accelerate: Accelerator.prepare on a model, optimizer and DataLoader, then
accelerator.backward, with the loss printed through accelerator.print every 10 steps."""

import torch
from accelerate import Accelerator
from torch import nn

torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.TensorDataset(torch.randn(1920, 32), torch.randint(0, 10, (1920,)))
loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
model, opt, loader = accelerator.prepare(model, opt, loader)
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    if step % 10 == 0:
        accelerator.print(f"step {step} loss {loss.item():.4f}")
