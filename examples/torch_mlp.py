"""A small PyTorch MLP trained with SGD on synthetic data. No tpu-perf marks: record it as it is.

    python examples/torch_mlp.py --steps 50
    tpu-perf record examples/torch_mlp.py --steps 50
"""

import argparse

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, 10))
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    x = torch.randn(args.batch, 512)
    y = torch.randint(0, 10, (args.batch,))
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
