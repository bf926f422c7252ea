"""An unchanged training script (no tpu-perf marks) that also times its own steps independently.

argv: OUT.json STEPS ATTENTION(sdpa|manual) OPTIMIZER(adamw|sgd)
"""

import json
import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples"))
from torch_transformer import DecoderLM  # noqa: E402

out, steps, attention, optimizer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
B, S, D, H, L, V = 4, 64, 64, 4, 2, 256
torch.manual_seed(0)
model = DecoderLM(V, D, H, L, S, attention)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if optimizer == "adamw" else torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randint(0, V, (B, S + 1))
durations = []
for _ in range(steps):
    t0 = time.perf_counter()
    logits = model(data[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), data[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    durations.append(time.perf_counter() - t0)
json.dump({"durations": durations, "shape": [B, S, D, H, L, V]}, open(out, "w"))
