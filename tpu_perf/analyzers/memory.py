"""Device memory: the peak seen, the capacity, and XLA's own estimate of the step program."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_perf.analyzers.flops import run_chip
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class MemoryStats:
    peak_bytes: int | None
    """Highest device memory in use (max over devices), from runtime samples, else XLA's estimate."""
    peak_source: str | None
    capacity_bytes: int | None
    """Per device: the runtime's limit, else the chip catalogue's HBM."""
    headroom_fraction: float | None
    xla_peak_bytes: int | None
    """The step program's peak by XLA's memory analysis (arguments, outputs, temporaries)."""
    host_rss_peak_bytes: int | None


def analyze_memory(run: Run) -> MemoryStats:
    memory = run.memory
    device = memory[memory["device"] != "host"] if not memory.empty else memory
    host = memory[memory["device"] == "host"] if not memory.empty else memory
    peak = source = capacity = None
    if not device.empty:
        peaks = device[["bytes_in_use", "peak_bytes"]].max(axis=1)
        peak = int(peaks.max())
        source = str(device.loc[peaks.idxmax(), "source"])
        if "limit_bytes" in device and device["limit_bytes"].notna().any():
            capacity = int(device["limit_bytes"].max())
    xla_peak = None
    programs = run.programs
    if not programs.empty:
        step_rows = programs[programs["is_step"].astype(bool)]
        rows = step_rows if not step_rows.empty else programs
        sizes = rows[["argument_bytes", "output_bytes", "temp_bytes"]].fillna(0).sum(axis=1) - rows["alias_bytes"].fillna(0)
        if "peak_bytes" in rows and rows["peak_bytes"].notna().any():
            sizes = rows["peak_bytes"].fillna(sizes)
        xla_peak = int(sizes.max())
    if peak is None and xla_peak is not None:
        peak, source = xla_peak, "xla_memory_analysis"
    if capacity is None:
        chip = run_chip(run)
        capacity = chip.hbm_bytes_per_device if chip else None
    return MemoryStats(
        peak_bytes=peak,
        peak_source=source,
        capacity_bytes=capacity,
        headroom_fraction=1 - peak / capacity if (peak is not None and capacity) else None,
        xla_peak_bytes=xla_peak,
        host_rss_peak_bytes=int(host["bytes_in_use"].max()) if not host.empty else None,
    )
