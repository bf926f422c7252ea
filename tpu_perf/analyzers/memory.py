"""Device memory: peak and capacity per device, headroom, XLA's estimate, and the largest batch.

The largest-batch number is an estimate, made with a linear model: the step's peak memory is a
fixed part (parameters, optimizer state: the step program's arguments by XLA's memory analysis,
else the lowest device memory sampled during the steps) plus a part proportional to the batch
(activations, temporaries). The batch can grow by (usable - fixed) / (peak - fixed), where usable
keeps RESERVE_FRACTION of the capacity free for fragmentation and the runtime. Compilers change
their plans with shape (rematerialisation, fusion), so treat it as a starting point to try.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpu_perf.analyzers.at_peak import AtPeak
from tpu_perf.analyzers.flops import run_chip
from tpu_perf.analyzers.out_of_memory import OutOfMemory
from tpu_perf.analyzers.programs import step_program
from tpu_perf.analyzers.timeline import best_positions, best_rows, rows_in, steady_window
from tpu_perf.analyzers.torch_state import TorchState
from tpu_perf.store import Run

RESERVE_FRACTION = 0.05
"""Capacity kept free in the batch estimate: allocators fragment and the runtime holds some HBM
(XLA's TPU client reserves a few percent by default, `XLA_PYTHON_CLIENT_MEM_FRACTION`-style)."""


@dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    device: str
    peak_bytes: int
    capacity_bytes: int | None
    source: str
    peak_time_s: float


@dataclass(frozen=True, kw_only=True)
class MemoryStats:
    peak_bytes: int | None
    """The run's one peak device memory (`headline_peak`): the highest device's sampled peak, else
    the bytes live at the step program's peak (XLA's liveness), else XLA's memory analysis."""
    peak_source: str | None
    capacity_bytes: int | None
    """Per device: the runtime's limit, else the chip catalogue's HBM."""
    headroom_fraction: float | None
    """1 - peak / capacity on the device that peaked highest."""
    headroom_bytes: int | None
    xla_peak_bytes: int | None
    """The step program's peak by XLA's memory analysis (arguments, outputs, temporaries)."""
    host_rss_peak_bytes: int | None
    per_device: list[DeviceMemory]
    fixed_bytes: int | None
    """The part of the peak assumed not to scale with the batch (see the module docstring)."""
    fixed_basis: str | None
    """`xla_arguments` or `sampled_minimum`."""
    max_batch_multiplier: float | None
    """Estimate: how many times the current batch would fit (>= 1 when there is headroom)."""
    batch_size: int | None
    max_batch_size: int | None
    """Estimate: floor(batch_size x max_batch_multiplier), when the batch size is known."""
    at_peak: AtPeak | None = None
    """What fills memory at the step program's peak, by XLA's liveness (`analyzers/at_peak.py`)."""
    torch_state: TorchState | None = None
    """PyTorch: bytes of parameters, gradients and optimizer state, from the tensors (full report only)."""
    out_of_memory: OutOfMemory | None = None
    """The script died out of device memory: where, and the allocation that failed (full report only)."""


def _capacity(run: Run) -> int | None:
    chip = run_chip(run)
    return chip.hbm_bytes_per_device if chip else None


def per_device_memory(run: Run) -> list[DeviceMemory]:
    """Peak and capacity for each device, from its best source (libtpu > NVML > JAX > torch)."""
    best = best_positions(run, "memory")
    if best is None or not best.positions.size:
        return []
    table, rows = run.memory, best.positions  # the best-source rows, in time order, as positions in the table
    usage = np.fmax(*(table[c].to_numpy(dtype=float, na_value=np.nan)[rows] for c in ("bytes_in_use", "peak_bytes")))  # NaN only when both are
    limits = table["limit_bytes"].to_numpy(dtype=float, na_value=np.nan)[rows] if "limit_bytes" in table else np.full(len(rows), np.nan)
    catalogue = _capacity(run)
    codes = best.device_codes[rows]
    out = []
    for code in np.unique(codes):
        device, where = best.devices[code], np.flatnonzero(codes == code)  # the device's rows, in time order
        if np.isnan(usage[where]).all():
            raise ValueError(f"{run.url}: device {device} has memory rows without a value")
        at = where[np.nanargmax(usage[where])]  # the first sample at the peak
        device_limits = limits[where][~np.isnan(limits[where])]
        out.append(DeviceMemory(
            device=str(device),
            peak_bytes=int(usage[at]),
            capacity_bytes=int(device_limits.max()) if device_limits.size else catalogue,
            source=str(table["source"].iloc[rows[at]]),
            peak_time_s=float(table["time_s"].iloc[rows[at]]),
        ))
    return sorted(out, key=lambda d: d.device)


def _xla_step(run: Run) -> tuple[int | None, int | None]:
    """(peak, argument bytes) of the step program by XLA's memory analysis."""
    programs = run.programs
    size_columns = ["argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "peak_bytes"]
    if programs.empty or not programs.reindex(columns=size_columns).notna().any().any():
        return None, None  # no XLA program (PyTorch runs' rows carry FLOPs only)
    programs = programs.reindex(columns=[*programs.columns, *(c for c in size_columns if c not in programs)])
    step = step_program(programs)
    rows = programs.loc[[step.name]] if step is not None else programs  # no step known: the largest program
    sizes = rows[["argument_bytes", "output_bytes", "temp_bytes"]].fillna(0).sum(axis=1) - rows["alias_bytes"].fillna(0)
    if "peak_bytes" in rows and rows["peak_bytes"].notna().any():
        sizes = rows["peak_bytes"].fillna(sizes)
    args = rows["argument_bytes"].dropna()
    return int(sizes.max()), int(args.max()) if not args.empty else None


def _fixed(run: Run, device: str, xla_args: int | None) -> tuple[int | None, str | None]:
    if xla_args:
        return xla_args, "xla_arguments"
    rows = best_rows(run, "memory")
    if rows.empty:
        return None, None
    rows, span = rows_in(rows[rows["device"] == device], steady_window(run))
    if rows.empty:
        return None, None
    basis = "sampled_minimum" if span == "the steps" else f"sampled_minimum over {span}"
    return int(rows["bytes_in_use"].astype(float).min()), basis


LIVENESS_SOURCE = "xla_liveness"
"""`MemoryStats.peak_source` when the peak is the bytes live at the step program's peak (`at_peak`)."""


def headline_peak(devices: list[DeviceMemory], at_peak: AtPeak | None, xla_peak: int | None) -> tuple[int | None, str | None]:
    """The run's one peak device memory and its source: the highest device's measured peak (libtpu,
    NVML, the framework's allocator) when the run sampled one, else the bytes live at the step
    program's peak by XLA's liveness, else XLA's memory analysis of the step (whose
    `peak_memory_in_bytes` leaves out temporaries on XLA:CPU: the last resort). Every surface (the
    report, `ls`, the dashboard, `check`'s memory metric, the notebook) shows this one."""
    if devices:
        top = max(devices, key=lambda d: d.peak_bytes)
        return top.peak_bytes, top.source
    if at_peak is not None:
        return at_peak.peak_bytes, LIVENESS_SOURCE
    return xla_peak, "xla_memory_analysis" if xla_peak is not None else None


def analyze_memory(run: Run, *, at_peak: AtPeak | None = None) -> MemoryStats:
    """Device memory of `run`; `at_peak` (the step program's liveness, `step_at_peak`) is the peak
    where no device memory was sampled."""
    devices = per_device_memory(run)
    host = run.memory["bytes_in_use"][run.memory["device"] == "host"] if not run.memory.empty else run.memory
    xla_peak, xla_args = _xla_step(run)
    top = max(devices, key=lambda d: d.peak_bytes) if devices else None
    peak, source = headline_peak(devices, at_peak, xla_peak)
    capacity = top.capacity_bytes if top and top.capacity_bytes else _capacity(run)
    fixed, basis = _fixed(run, top.device, xla_args) if top else (None, None)
    multiplier = None
    if top and capacity and fixed is not None and top.peak_bytes > fixed:
        multiplier = (capacity * (1 - RESERVE_FRACTION) - fixed) / (top.peak_bytes - fixed)
    batch = (run.manifest.get("config") or {}).get("batch_size")
    return MemoryStats(
        peak_bytes=peak,
        peak_source=source,
        capacity_bytes=capacity,
        headroom_fraction=1 - peak / capacity if (peak is not None and capacity) else None,
        headroom_bytes=capacity - peak if (peak is not None and capacity) else None,
        xla_peak_bytes=xla_peak,
        host_rss_peak_bytes=int(host.max()) if not host.empty else None,
        per_device=devices,
        fixed_bytes=fixed,
        fixed_basis=basis,
        max_batch_multiplier=multiplier,
        batch_size=batch,
        max_batch_size=math.floor(batch * multiplier) if (batch and multiplier is not None and multiplier > 0) else None,
        at_peak=at_peak,
    )
