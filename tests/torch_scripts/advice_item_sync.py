"""A PyTorch loop the way many are written: the loss read with .item() every step for a running
average, the accuracy with .cpu().tolist(), and a tensor printed every 5 steps (`--mode fixed`:
the loss kept on the device and read once at the end; `--mode eval`: that, and every 8 steps an
evaluation of 6 batches whose accuracy is read with .item() per batch, as Trainers do)."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["defective", "fixed", "eval"], required=True)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
running, total = 0.0, torch.zeros(())
for step in range(20):
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.mode == "defective":
        running += loss.item()
        correct = (logits.argmax(-1) == y).cpu().tolist()
        if step % 5 == 0:
            print("step", step, "loss", loss, "acc", sum(correct) / len(correct))
    else:
        total += loss.detach()
    if args.mode == "eval" and step % 8 == 7:
        with torch.no_grad():
            accuracy = [(model(torch.randn(64, 32)).argmax(-1) == torch.randint(0, 10, (64,))).float().mean().item() for _ in range(6)]
        print("step", step, "eval accuracy", sum(accuracy) / 6)
print(f"mean loss {(running / 20) if args.mode == 'defective' else (total / 20).item():.4f}")
