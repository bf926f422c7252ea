"""Training written as TorchTPU documents it: `device="tpu"` when a TPU is attached, CPU otherwise.

torch-tpu registers the `tpu` device when `import torch` auto-loads it (TORCH_DEVICE_BACKEND_AUTOLOAD,
on by default). Availability is asked through `torch.accelerator` (`torch.tpu.is_available()`
raises by design). No tpu-perf marks: record it as it is.

    python examples/torch_tpu_train.py --steps 30
    tpu-perf record examples/torch_tpu_train.py --steps 30
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def training_device() -> torch.device:
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is not None and accelerator.type == "tpu":
        return torch.device("tpu")
    return torch.device("cpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()

    device = training_device()
    dtype = torch.bfloat16 if device.type == "tpu" else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, 16)).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 256, device=device, dtype=dtype)
    y = torch.randint(0, 16, (args.batch,), device=device)
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} on {device}")
    print(f"final loss {loss.item():.4f} on {device}")


if __name__ == "__main__":
    main()
