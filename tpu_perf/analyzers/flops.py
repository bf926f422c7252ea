"""FLOPs per step and utilisation of the chip's peak.

`flops.per_step` is what runs per step on all devices: the user's `--flops-per-step`, else XLA's
cost analysis of the step program (per-device program FLOPs x devices it runs on), or for PyTorch
the FLOP counter over one step (`flops_source` in the programs row says which). The utilisation
computed from it counts every FLOP XLA executes (hardware FLOPs); model-FLOPs MFU with named
conventions comes from `tpu_perf.analyzers.mfu` when the model is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from tpu_perf.analyzers.iteration import run_iteration_flops
from tpu_perf.analyzers.programs import step_program
from tpu_perf.analyzers.steps import StepStats
from tpu_perf.hardware import Chip, lookup_chip
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class Peak:
    """The denominator of a utilisation: which chip, how fast, and where the number comes from."""

    chip: str | None
    precision: str
    devices_per_chip: int
    per_device_tflops: float | None
    per_chip_tflops: float | None
    source: str | None
    """`catalogue` (published, linked in catalogue.toml), `measured` (`tpu-perf calibrate`), or None."""


@dataclass(frozen=True, kw_only=True)
class FlopsStats:
    per_step: float | None
    source: str | None
    """`user`, `xla_cost_analysis`, `flop_counter` (torch), `flop_counter+analytic` (torch, with
    attention FLOPs the counter misses added by formula), or None when unknown."""
    per_device_step: float | None
    devices: int
    chips: float
    """devices / devices per chip (an Ironwood chip is 2 devices)."""
    devices_per_chip: int
    achieved_tflops: float | None
    """All devices together, at the step time (`StepStats.step_s`)."""
    achieved_tflops_per_device: float | None
    achieved_tflops_per_chip: float | None
    chip: str | None
    peak_tflops_per_device: float | None
    peak_tflops_per_chip: float | None
    peak_source: str | None
    precision: str
    utilization: float | None
    """achieved / peak, both per device (the same per chip): a fraction of hardware FLOPs."""
    loop_extra_flops: float | None = None
    """Per device step: loop-body matmuls beyond the once XLA's cost analysis counts (scanned layers)."""
    unknown_trip_loops: int = 0
    """Loops whose trip count neither XLA proved nor the trace window measured: counted once, so
    `per_step` may be low."""
    measured_trips: dict[str, float] = field(default_factory=dict)
    """Loops XLA did not prove (a decoder that stops at EOS), counted by the mean trips per entry
    measured in the trace window, by `function/while`."""
    programs_per_step: int | None = None
    """Programs summed into one step (2 with gradient accumulation: micro-batch x N + update)."""


def run_chip(run: Run) -> Chip | None:
    """The chip named by `--chip`, else the one an import matched to the trace's own device (its
    name and memory: `hardware.chip`), else the one the device kind names."""
    config = run.manifest.get("config") or {}
    hardware = run.manifest.get("hardware") or {}
    return lookup_chip(config.get("chip")) or lookup_chip(hardware.get("chip")) or lookup_chip(hardware.get("device_kind"))


def chip_mismatch(run: Run) -> str | None:
    """A warning when `--chip` names another chip than the device the run detected (its peak, and so
    its utilisation, are then the declared chip's, not the hardware's); None when they agree or
    either is unknown."""
    declared = (run.manifest.get("config") or {}).get("chip")
    kind = (run.manifest.get("hardware") or {}).get("device_kind")
    if not declared or not kind:
        return None
    chip, detected = lookup_chip(declared), lookup_chip(kind)
    if chip is not None and detected is not None and chip.name == detected.name:
        return None
    return (f"--chip {declared} does not match the detected device ({kind}): utilisation and MFU use "
            f"{chip.name if chip else declared}'s peak, not this hardware's; drop --chip, or record on a {declared}")


def step_flops(run: Run) -> tuple[float | None, str | None, int]:
    """(FLOPs per step on all devices, where from, devices the step runs on)."""
    config = run.manifest.get("config") or {}
    hardware = run.manifest.get("hardware") or {}
    devices = int(hardware.get("device_count") or 1)
    step = step_program(run.programs)
    if step is not None and "devices" in step and pd.notna(step["devices"]) and step["devices"]:
        devices = int(step["devices"])
    if config.get("flops_per_step"):
        return float(config["flops_per_step"]), "user", devices
    iteration = run_iteration_flops(run)
    if step is None or iteration is None:
        return None, None, devices
    source = step.get("flops_source")
    return iteration.flops * devices, str(source) if isinstance(source, str) else "xla_cost_analysis", devices


def run_peak(run: Run, precision: str = "bf16") -> Peak:
    """The catalogue's peak for the run's chip, else a calibration stored with the run (measured)."""
    from tpu_perf.hardware.calibrate import calibrated_peak

    chip = run_chip(run)
    config = run.manifest.get("config") or {}
    kind = (run.manifest.get("hardware") or {}).get("device_kind")
    per_chip_dev = chip.devices_per_chip if chip else 1
    peak = chip.peak_tflops_per_device(precision) if chip else None
    source = "catalogue" if peak is not None else None
    if peak is None:
        calibrations = config.get("calibration") or {}
        peak = calibrated_peak(calibrations, chip.name if chip else kind, precision) or calibrated_peak(calibrations, kind, precision)
        source = "measured" if peak is not None else None
    return Peak(
        chip=chip.name if chip else kind,
        precision=precision,
        devices_per_chip=per_chip_dev,
        per_device_tflops=peak,
        per_chip_tflops=peak * per_chip_dev if peak is not None else None,
        source=source,
    )


def analyze_flops(run: Run, steps: StepStats, *, precision: str = "bf16") -> FlopsStats:
    per_step, source, devices = step_flops(run)
    iteration = run_iteration_flops(run) if source not in (None, "user") else None
    peak = run_peak(run, precision)
    step = steps.step_s
    achieved = per_step / step / 1e12 if (per_step and step) else None
    per_device = achieved / devices if achieved is not None else None
    return FlopsStats(
        per_step=per_step,
        source=source,
        per_device_step=per_step / devices if per_step else None,
        devices=devices,
        chips=devices / peak.devices_per_chip,
        devices_per_chip=peak.devices_per_chip,
        achieved_tflops=achieved,
        achieved_tflops_per_device=per_device,
        achieved_tflops_per_chip=per_device * peak.devices_per_chip if per_device is not None else None,
        chip=peak.chip,
        peak_tflops_per_device=peak.per_device_tflops,
        peak_tflops_per_chip=peak.per_chip_tflops,
        peak_source=peak.source,
        precision=precision,
        utilization=per_device / peak.per_device_tflops if (per_device is not None and peak.per_device_tflops) else None,
        loop_extra_flops=iteration.loop_extra_flops if (iteration and source != "user") else None,
        unknown_trip_loops=iteration.unknown_trip_loops if iteration else 0,
        measured_trips=dict(iteration.measured_trips) if (iteration and source != "user") else {},
        programs_per_step=iteration.programs if (iteration and source != "user") else None,
    )
