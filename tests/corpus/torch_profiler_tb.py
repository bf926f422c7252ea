"""The PyTorch profiler tutorial's loop: `torch.profiler.profile` with a `schedule`, the
`tensorboard_trace_handler` writing the trace for TensorBoard, and `prof.step()` at each
iteration's end, around a small CNN trained with SGD: 20 updates, steps 1 to 3 profiled."""

import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_truth import update_flops
from truth import Clock, write

UPDATES = 20
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)
LOG_DIR = os.environ.get("PROFILER_LOG_DIR") or tempfile.mkdtemp(prefix="log-")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs, labels = torch.randn(UPDATES, 32, 3, 32, 32), torch.randint(0, 10, (UPDATES, 32))

    def train(data):
        images, targets = data
        loss = criterion(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    clock = Clock()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOG_DIR),
        record_shapes=True,
    ) as prof:
        for step in range(UPDATES):
            train((inputs[step], labels[step]))
            clock.tick()
            prof.step()  # Need to call this at each step to notify profiler of steps' boundary.
    written = sorted(f for f in os.listdir(LOG_DIR) if f.endswith(".pt.trace.json"))
    print("handler wrote", written)
    write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, handler_files=len(written),
          flops=update_flops(model, [(inputs[0], labels[0])], lambda m, d: criterion(m(d[0]), d[1])))


if __name__ == "__main__":
    main()
