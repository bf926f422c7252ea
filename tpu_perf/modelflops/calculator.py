"""`tpu_perf.mfu(...)`: model FLOPs utilisation from an architecture, a chip and a throughput.

The same calculation as `tpu-perf mfu`: every keyword is one of its flags. The answer says which
convention and which peak it used, per chip and per device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tpu_perf.errors import UsageError
from tpu_perf.hardware import PRECISIONS, Chip, lookup_chip, unknown_chip_message
from tpu_perf.modelflops.arch import FLAG_NAMES, Architecture
from tpu_perf.modelflops.conventions import DEFAULT_CONVENTION, get_convention, hfu_factor
from tpu_perf.modelflops.hf import architecture_from_hf, read_hf_config
from tpu_perf.modelflops.presets import preset

REQUIRED_FIELDS = ("layers", "d_model", "heads", "vocab")


@dataclass(frozen=True, kw_only=True)
class MfuResult:
    convention: str
    precision: str
    chip: str
    chips: float
    devices_per_chip: int
    flops_per_token: float
    params: float
    """Total parameters (the user's N, else counted from the shapes)."""
    active_params: float
    params_counted: float | None
    """The N the convention's formula used (None for matmul-sum conventions)."""
    tokens_per_second: float
    tokens_per_second_per_chip: float
    tflops_per_chip: float
    tflops_per_device: float
    peak_tflops_per_chip: float
    peak_tflops_per_device: float
    peak_source: str
    """`catalogue` (published, with a link) or `measured` (`tpu-perf calibrate`)."""
    mfu: float
    """tflops_per_chip / peak_tflops_per_chip, a fraction (the same per device)."""
    hfu: float | None
    recompute: float | None
    architecture: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_architecture(*, model: str | None = None, hf_config: str | None = None, tied_embeddings: bool | None = None, **fields: Any) -> Architecture:
    """Shapes from a preset or a config.json, with any given field overriding; or from fields alone."""
    if model and hf_config:
        raise UsageError("--model and --hf-config: give one of them")
    given = {k: v for k, v in fields.items() if v is not None}
    unknown = set(given) - set(FLAG_NAMES)
    if unknown:
        raise UsageError(f"unknown architecture field(s): {', '.join(sorted(unknown))}")
    if tied_embeddings:
        given["tied_embeddings"] = True
    if model:
        base = preset(model)
    elif hf_config:
        base = architecture_from_hf(read_hf_config(hf_config))
    else:
        missing = [FLAG_NAMES[k] for k in REQUIRED_FIELDS if k not in given]
        if missing:
            raise UsageError(f"{missing[0]}: required (give {', '.join(missing)}, or --model PRESET, or --hf-config PATH)")
        return Architecture(**given)
    return base.with_overrides(**given) if given else base


def tokens_per_second_of(*, chips: float, tokens_per_second: float | None = None, tokens_per_second_per_chip: float | None = None, step_time: float | None = None, global_batch_tokens: float | None = None) -> float:
    """Whole-job tokens/s from exactly one of the three ways to give a throughput."""
    ways = [tokens_per_second is not None, tokens_per_second_per_chip is not None, step_time is not None or global_batch_tokens is not None]
    if sum(ways) == 0:
        raise UsageError("--tokens-per-second: a throughput is required (or --tokens-per-second-per-chip, or --step-time with --global-batch-tokens)")
    if sum(ways) > 1:
        raise UsageError("--tokens-per-second: give one throughput (--tokens-per-second, --tokens-per-second-per-chip, or --step-time with --global-batch-tokens)")
    for flag, value in (("--tokens-per-second", tokens_per_second), ("--tokens-per-second-per-chip", tokens_per_second_per_chip), ("--step-time", step_time), ("--global-batch-tokens", global_batch_tokens)):
        if value is not None and value <= 0:
            raise UsageError(f"{flag} {value}: must be positive")
    if tokens_per_second is not None:
        return float(tokens_per_second)
    if tokens_per_second_per_chip is not None:
        return float(tokens_per_second_per_chip) * chips
    if step_time is None or global_batch_tokens is None:
        raise UsageError(f"{'--global-batch-tokens' if step_time is not None else '--step-time'}: needed with {'--step-time' if step_time is not None else '--global-batch-tokens'}")
    return float(global_batch_tokens) / float(step_time)


def chip_peak(chip_name: str, precision: str, *, flag: str = "--chip", store: str | None = None) -> tuple[Chip, float, str]:
    """(chip, dense peak TFLOP/s per chip, `catalogue` | `measured`) or a one-line UsageError."""
    chip = lookup_chip(chip_name)
    if chip is None:
        raise UsageError(unknown_chip_message(flag, chip_name))
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    peak = chip.peak_tflops.get(precision)
    if peak is not None:
        return chip, peak, "catalogue"
    from tpu_perf.hardware.calibrate import calibrated_peak, load_calibrations

    measured = calibrated_peak(load_calibrations(store), chip.name, precision)
    if measured is not None:
        return chip, measured * chip.devices_per_chip, "measured"
    if chip.measured:
        raise UsageError(f"{flag} {chip_name}: no published peak; measure one with `tpu-perf calibrate --save`")
    have = ", ".join(chip.peak_tflops) or "none"
    raise UsageError(f"--precision {precision}: {chip.name} has no published {precision} peak (has {have})")


def mfu(
    *,
    chip: str,
    chips: float = 1,
    precision: str = "bf16",
    convention: str = DEFAULT_CONVENTION,
    tokens_per_second: float | None = None,
    tokens_per_second_per_chip: float | None = None,
    step_time: float | None = None,
    global_batch_tokens: float | None = None,
    model: str | None = None,
    hf_config: str | None = None,
    tied_embeddings: bool | None = None,
    recompute: float | None = None,
    **architecture: Any,
) -> MfuResult:
    """Model FLOPs utilisation of a training job; keywords are `tpu-perf mfu`'s flags.

    Architecture keywords: layers, d_model, heads, kv_heads, head_dim, d_ff, mlp_mats, vocab,
    seq_len, params, experts, top_k, moe_d_ff (or model= / hf_config=, which they override).
    `chips` counts physical chips (an Ironwood chip is 2 devices).
    """
    if chips is None or chips <= 0:
        raise UsageError(f"--chips {chips}: must be positive")
    conv = get_convention(convention)
    arch = resolve_architecture(model=model, hf_config=hf_config, tied_embeddings=tied_embeddings, **architecture)
    found, peak_chip, peak_source = chip_peak(chip, precision)
    tps = tokens_per_second_of(chips=chips, tokens_per_second=tokens_per_second, tokens_per_second_per_chip=tokens_per_second_per_chip, step_time=step_time, global_batch_tokens=global_batch_tokens)
    flops = conv.fn(arch)
    tflops_chip = flops.flops_per_token * tps / chips / 1e12
    value = tflops_chip / peak_chip
    return MfuResult(
        convention=conv.name,
        precision=precision,
        chip=found.name,
        chips=chips,
        devices_per_chip=found.devices_per_chip,
        flops_per_token=flops.flops_per_token,
        params=arch.total_params,
        active_params=arch.active_params,
        params_counted=flops.params_counted,
        tokens_per_second=tps,
        tokens_per_second_per_chip=tps / chips,
        tflops_per_chip=tflops_chip,
        tflops_per_device=tflops_chip / found.devices_per_chip,
        peak_tflops_per_chip=peak_chip,
        peak_tflops_per_device=peak_chip / found.devices_per_chip,
        peak_source=peak_source,
        mfu=value,
        hfu=value * hfu_factor(recompute) if recompute is not None else None,
        recompute=recompute,
        architecture=arch.to_dict(),
    )
