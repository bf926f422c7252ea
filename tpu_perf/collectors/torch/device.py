"""Which device a PyTorch script trains on, and how to wait for it.

The device is read from the optimizer's parameters when one steps (the script's own choice), else
from `torch.accelerator`. `torch.tpu.is_available()` is never called: it raises in torch-tpu.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def accelerator_type(torch: Any) -> str | None:
    """`cuda`, `tpu`, ... when an accelerator is attached, else None (CPU only)."""
    accel = getattr(torch, "accelerator", None)
    try:
        if accel is None or not accel.is_available():
            return None
        device = accel.current_accelerator()
    except Exception:  # a backend that fails to initialise is no accelerator for us
        return None
    return device.type if device is not None else None


def param_device_type(optimizer: Any) -> str | None:
    """The device type of an optimizer's first parameter (`cpu`, `cuda`, `tpu`...)."""
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            device = getattr(param, "device", None)
            if device is not None:
                return str(device.type)
    return None


def sync_for(torch: Any, device_type: str | None) -> Callable[[], None] | None:
    """A function that waits for queued device work; None where work is synchronous (CPU)."""
    if device_type in (None, "cpu", "meta"):
        return None
    if device_type == "cuda":
        return torch.cuda.synchronize
    return torch.accelerator.synchronize


def hardware(torch: Any, device_type: str | None) -> dict[str, Any]:
    """The manifest's `hardware` for a torch run (one process: its local devices)."""
    if device_type in (None, "cpu"):
        return {"platform": "cpu", "device_kind": "cpu", "device_count": 1, "local_device_count": 1, "framework": "torch"}
    kind = device_type
    count = 1
    try:
        count = int(torch.accelerator.device_count())
        if device_type == "cuda":
            kind = torch.cuda.get_device_name(0)
        else:
            props = getattr(getattr(torch, device_type, None), "get_device_properties", None)
            name = getattr(props(0), "name", None) if props else None
            kind = str(name or device_type)
    except Exception:
        pass
    rank = _rank(torch)
    return {"platform": device_type, "device_kind": kind, "device_count": count, "local_device_count": count, "process_index": rank, "framework": "torch"}


def _rank(torch: Any) -> int:
    dist = getattr(torch, "distributed", None)
    try:
        return int(dist.get_rank()) if dist is not None and dist.is_available() and dist.is_initialized() else 0
    except Exception:
        return 0
