"""An input-bound PyTorch loop on a CPU, with no DataLoader: each batch is made by a plain generator,
augmented in numpy (`--mode numpy`) or waited for from storage (`--mode sleep`), about 20 ms a batch,
before a ~15 ms MLP update. Writes its own truth (tests/corpus/truth.py): the input's share of each
iteration, timed around the generator."""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))
from truth import write  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("numpy", "sleep"), default="numpy")
parser.add_argument("--steps", type=int, default=14)
args = parser.parse_args()

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)
rng = np.random.default_rng(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = rng.random((64, 512), dtype=np.float32)


def augment(x):
    """Noise and shifts until 20 ms have passed: a host-side augmentation pipeline."""
    t = time.perf_counter()
    while time.perf_counter() - t < 0.02:
        x = np.roll(x, 1, axis=1) * 0.999 + rng.normal(0, 0.01, x.shape).astype(np.float32)
    return x


def batches():
    while True:
        if args.mode == "sleep":
            time.sleep(0.02)  # a read from slow storage
            x = images.copy()
        else:
            x = augment(images)
        yield torch.from_numpy(x), torch.from_numpy(rng.integers(0, 10, 64))


it, inputs, iterations = batches(), [], []
last = time.perf_counter()
for _ in range(args.steps):
    t = time.perf_counter()
    x, y = next(it)
    inputs.append(time.perf_counter() - t)
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    now = time.perf_counter()
    iterations.append(now - last)
    last = now
write(updates=args.steps, input_share=float(np.median(np.array(inputs[2:]) / np.array(iterations[2:]))), times=iterations)
