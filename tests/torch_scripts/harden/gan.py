"""A small GAN: each iteration steps the discriminator's optimizer, then the generator's.
Counts one iteration's FLOPs itself (FlopCounterMode over iteration 0) for the test."""

import json
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

if __name__ == "__main__":
    steps, out = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
    D = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4)
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4)
    bce = nn.BCEWithLogitsLoss()
    real = torch.randn(32, 32)

    def iteration() -> None:
        z = torch.randn(32, 16)
        fake = G(z)
        opt_d.zero_grad()
        d_loss = bce(D(real), torch.ones(32, 1)) + bce(D(fake.detach()), torch.zeros(32, 1))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = bce(D(fake), torch.ones(32, 1))
        g_loss.backward()
        opt_g.step()

    counted = None
    for i in range(steps):
        if i == steps - 1:
            with FlopCounterMode(display=False) as mode:
                iteration()
            counted = mode.get_total_flops()
        else:
            iteration()
    json.dump({"iterations": steps, "flops_per_iteration": counted}, open(out, "w"))
