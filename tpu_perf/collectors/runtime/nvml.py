"""NVIDIA GPUs through NVML (nvidia-ml-py): memory used and total, and GPU utilisation per device.

NVML's utilisation is the percent of the last sample period in which a kernel ran: the GPU
counterpart of a TPU's TensorCore duty cycle, so it goes to the same `duty_cycle_pct` column.
"""

from __future__ import annotations

from typing import Any

Rows = list[dict[str, Any]]


class NvmlUnavailable(RuntimeError):
    """No NVML here (no driver, no library, no GPU): the source is skipped."""


class NvmlSource:
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable("nvidia-ml-py is not installed") from exc
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded without a driver
            raise NvmlUnavailable(str(exc)) from exc
        if count == 0:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("NVML sees no GPU")
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def sample(self) -> Rows:
        rows: Rows = []
        for index, handle in enumerate(self._handles):
            memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            utilisation = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            device = f"cuda:{index}"
            rows.append({"_table": "memory", "device": device, "bytes_in_use": int(memory.used), "peak_bytes": None, "limit_bytes": int(memory.total), "source": self.name})
            rows.append({"_table": "runtime", "device": device, "source": self.name, "duty_cycle_pct": float(utilisation.gpu)})
        return rows

    def finish(self) -> Rows:
        self._nvml.nvmlShutdown()
        return []
