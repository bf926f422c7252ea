"""Fallback device memory from the frameworks' own allocators (torch.accelerator).

JAX's `Device.memory_stats()` source is added by the JAX collector once a step ran; this module
adds the torch one when the script imports torch. Both are sampled only while no better source
(libtpu, NVML) delivers device rows: see `DEVICE_SOURCE_PRIORITY` in the sampler.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

Rows = list[dict[str, Any]]


class TorchAcceleratorSource:
    name = "torch"

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch

    def sample(self) -> Rows:
        accel = self._torch.accelerator
        if not accel.is_available():
            return []
        kind = accel.current_accelerator().type
        rows: Rows = []
        for index in range(accel.device_count()):
            stats = accel.memory_stats(index)
            try:
                _free, total = accel.get_memory_info(index)
            except Exception:  # not every backend reports it
                total = None
            rows.append({
                "_table": "memory",
                "device": f"{kind}:{index}",
                "bytes_in_use": stats.get("allocated_bytes.all.current"),
                "peak_bytes": stats.get("allocated_bytes.all.peak"),
                "limit_bytes": int(total) if total else None,
                "source": "torch.accelerator",
            })
        return rows
