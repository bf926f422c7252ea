"""torch.compile for the advisor's tests: `--mode defective` has a graph break (a print in the
compiled function) and a batch size that changes every step after step 4; `--mode fixed` has neither."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["defective", "fixed"], required=True)
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
defective = args.mode == "defective"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def forward(x):
    h = model[0](x)
    if defective:
        print("activation mean", float(h.mean()))  # Python I/O inside the compiled region: a graph break
    return model[2](model[1](h))


compiled = torch.compile(forward, backend="eager")
for step in range(args.steps):
    batch = 16 if not defective or step < 4 else 16 + step  # defective: a new shape every step
    x, y = torch.randn(batch, 64), torch.randint(0, 4, (batch,))
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")
