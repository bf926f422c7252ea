"""Model-FLOPs MFU of a recorded run, when its model is known (`record --model` / `--hf-config`).

Model FLOPs per token come from a named convention (`tpu_perf.modelflops.conventions`) and the
shapes stored in the run at record time; tokens/s from the step time (`StepStats.step_s`) and
`--tokens-per-step`; the peak from `flops.run_peak` (catalogue, else the run's calibration).
The hardware-FLOPs utilisation (what XLA counts) stays in `flops.utilization`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tpu_perf.analyzers.flops import FlopsStats, run_peak
from tpu_perf.analyzers.layout import Layout, reshaped
from tpu_perf.analyzers.steps import StepStats
from tpu_perf.errors import TpuPerfError
from tpu_perf.modelflops.arch import Architecture
from tpu_perf.modelflops.conventions import DEFAULT_CONVENTION, get_convention
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class ModelMfu:
    model: str | None
    convention: str
    flops_per_token: float | None
    params: float | None
    tokens_per_s: float | None
    model_flops_per_step: float | None
    devices: int
    chips: float
    devices_per_chip: int
    chip: str | None
    precision: str
    peak_tflops_per_device: float | None
    peak_tflops_per_chip: float | None
    peak_source: str | None
    tflops_per_device: float | None
    tflops_per_chip: float | None
    mfu_per_device: float | None
    mfu_per_chip: float | None
    """Equal to mfu_per_device: throughput and peak are both taken at one granularity."""
    reason: str | None
    """Why model-FLOPs MFU is unknown (None when it is known)."""


def run_architecture(run: Run) -> tuple[Architecture | None, str | None]:
    """(shapes, None) from the run's config, or (None, why not)."""
    from tpu_perf.modelflops.calculator import resolve_architecture

    config = run.manifest.get("config") or {}
    try:
        if config.get("architecture"):
            return Architecture.from_dict(config["architecture"]), None
        if config.get("model") or config.get("hf_config"):
            return resolve_architecture(model=config.get("model"), hf_config=config.get("hf_config")), None
    except TpuPerfError as exc:
        return None, f"model shapes unreadable: {exc}"
    return None, "model unknown: record with --model PRESET or --hf-config PATH"


def analyze_model_mfu(run: Run, steps: StepStats, flops: FlopsStats, *, convention: str | None = None, precision: str = "bf16") -> ModelMfu:
    arch, reason = run_architecture(run)
    conv = get_convention(convention or DEFAULT_CONVENTION)
    peak = run_peak(run, precision)
    fpt = None
    if arch is not None:
        try:
            fpt = conv.fn(arch).flops_per_token
        except TpuPerfError as exc:
            reason = str(exc)
    tps = steps.tokens_per_s
    if fpt is not None and tps is None:
        reason = "tokens/s unknown: record with --tokens-per-step"
    if fpt is not None and tps is not None and peak.per_device_tflops is None:
        reason = "peak unknown: pass --chip, or run `tpu-perf calibrate --save` before recording"
    per_device = fpt * tps / flops.devices / 1e12 if (fpt is not None and tps) else None
    value = per_device / peak.per_device_tflops if (per_device is not None and peak.per_device_tflops) else None
    return ModelMfu(
        model=(arch.name if arch else None),
        convention=conv.name,
        flops_per_token=fpt,
        params=arch.total_params if arch else None,
        tokens_per_s=tps,
        model_flops_per_step=fpt * steps.tokens_per_step if (fpt is not None and steps.tokens_per_step) else None,
        devices=flops.devices,
        chips=flops.chips,
        devices_per_chip=peak.devices_per_chip,
        chip=peak.chip,
        precision=precision,
        peak_tflops_per_device=peak.per_device_tflops,
        peak_tflops_per_chip=peak.per_chip_tflops,
        peak_source=peak.source,
        tflops_per_device=per_device,
        tflops_per_chip=per_device * peak.devices_per_chip if per_device is not None else None,
        mfu_per_device=value,
        mfu_per_chip=value,
        reason=None if value is not None else reason,
    )


@dataclass(frozen=True, kw_only=True)
class MfuSummary:
    """The one MFU a run is quoted by, and what it divides: model FLOPs when the model is known,
    else the FLOPs XLA counts (hardware utilisation), else None."""

    value: float | None
    basis: str | None
    """`model_flops`, `hardware_flops`, or None when neither is known."""
    model: ModelMfu
    hardware_utilization: float | None

    def to_dict(self) -> dict[str, object]:
        """The report's published keys: `mfu`, `mfu_basis`, `mfu_detail` (`MFU_LAYOUT`)."""
        return reshaped(self, MFU_LAYOUT)


MFU_LAYOUT: Layout = {
    "mfu": "value", "mfu_basis": "basis",
    "mfu_detail": {**{f.name: f"model.{f.name}" for f in fields(ModelMfu)}, "basis": "basis", "hardware_utilization": "hardware_utilization"},
}
"""`MfuSummary`'s keys in the report (top level): what `to_dict` writes and the schema describes."""


def summarize_mfu(model: ModelMfu, flops: FlopsStats) -> MfuSummary:
    if model.mfu_per_device is not None:
        return MfuSummary(value=model.mfu_per_device, basis="model_flops", model=model, hardware_utilization=flops.utilization)
    basis = "hardware_flops" if flops.utilization is not None else None
    return MfuSummary(value=flops.utilization, basis=basis, model=model, hardware_utilization=flops.utilization)
