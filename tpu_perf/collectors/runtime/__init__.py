"""Runtime sources for the sampler: libtpu's metric service, NVML, torch's allocator, the host.

Chosen automatically: each source that can run here is added; a source that cannot (no driver,
no service) is skipped and says so once. Every row names its source.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from tpu_perf.collectors.runtime.host import HostSource
from tpu_perf.collectors.runtime.libtpu import LibtpuSource, resolve_address
from tpu_perf.collectors.runtime.nvml import NvmlSource, NvmlUnavailable

__all__ = ["HostSource", "LibtpuSource", "NvmlSource", "default_sources", "torch_source"]


def default_sources(*, tpu_metrics_addr: str | None, interval_s: float, log: Callable[[str], None], note: Callable[[str, str, str], None]) -> list[Any]:
    """The sources that apply on this machine; `note(source, event, detail)` records a skipped one."""
    sources: list[Any] = [HostSource()]
    addr, origin = resolve_address(tpu_metrics_addr)
    try:
        sources.append(LibtpuSource(addr, interval_s=interval_s, origin=origin, log=log))
    except ImportError as exc:  # tpu-info or grpcio missing: the `tpu` extra is not installed
        note("libtpu", "skipped", f"{exc}; install tpu-perf[tpu] for TPU runtime metrics")
    try:
        sources.append(NvmlSource())
    except NvmlUnavailable as exc:
        note("nvml", "skipped", str(exc))
    return sources


def torch_source(torch: ModuleType) -> Any:
    from tpu_perf.collectors.runtime.accelerators import TorchAcceleratorSource

    return TorchAcceleratorSource(torch)
