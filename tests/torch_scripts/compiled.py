"""torch.compile with a graph break (a print) and input shapes that change after 6 steps."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def forward(x):
    h = model[0](x)
    print("graph break here")
    return model[2](model[1](h))


compiled = torch.compile(forward, backend="eager")
for step in range(10):
    batch = 8 if step < 6 else 13
    x, y = torch.randn(batch, 32), torch.randint(0, 4, (batch,))
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
