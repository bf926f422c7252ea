"""A PyTorch loop that profiles some of its own steps: MODE 'handler' uses on_trace_ready with a
schedule (mid-run, overlapping tpu-perf's default window), MODE 'events' reads prof.events()."""

import sys
from pathlib import Path

import torch

if __name__ == "__main__":
    steps, mode, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 32), torch.randn(8, 1)

    def train_step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(4):
        train_step()
    if mode == "handler":
        handler = torch.profiler.tensorboard_trace_handler(str(out))
        with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=2), on_trace_ready=handler) as prof:
            for _ in range(3):
                train_step()
                prof.step()
        ok = any(out.glob("*.pt.trace.json*"))
    else:
        with torch.profiler.profile() as prof:
            for _ in range(3):
                train_step()
        names = {e.name for e in prof.events()}
        out.write_text("\n".join(sorted(names)))
        ok = any("addmm" in n for n in names)
    for _ in range(steps - 7):
        train_step()
    print("own profile ok", ok)
    sys.exit(0 if ok else 7)
