"""The optimizer step itself is torch.compile'd: tpu-perf's hooks must not break its graph."""

import json
import sys

import torch
from torch import nn

model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.compile(backend="eager")
def opt_step():
    opt.step()


for _ in range(4):
    model(torch.randn(8, 16)).sum().backward()
    opt_step()
from torch._dynamo.utils import counters  # noqa: E402

json.dump({"graph_breaks": sum(counters["graph_break"].values()), "reasons": list(counters["graph_break"])}, open(sys.argv[1], "w"))
