"""A small language model trained with an optimizer, and evaluated every 5 steps under
`torch.no_grad()` on token ids, one model call per batch: the calls an eager token loop is made of,
in a run that trains. Its evaluations are not generation requests."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(500, 64), nn.Flatten(), nn.Linear(64 * 16, 500))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(15):
    ids, target = torch.randint(0, 500, (8, 16)), torch.randint(0, 500, (8,))
    loss = nn.functional.cross_entropy(model(ids), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 4:
        with torch.no_grad():
            held = [nn.functional.cross_entropy(model(torch.randint(0, 500, (8, 16))), target).item() for _ in range(4)]
        print("step", step, "eval loss", sum(held) / len(held))
