"""Compute rules judged against a target chip: f32 matmuls on a bf16 MXU, MXU tile padding, and
matmuls too small (per-device batch) to reach the chip's ridge point."""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.finding import (
    Evidence,
    Finding,
    Fix,
    Gain,
    Rule,
    ev,
    fired,
    not_evaluable,
    passed,
)
from tpu_perf.advise.padding import fixable_matmul_saving
from tpu_perf.advise.signals import SOURCES, Signals, src

FP32_MATMUL = Rule(
    id="fp32-matmul", title="Matmuls run in f32 where the target's MXU multiplies bf16", family="compute", severity="medium",
    fix=Fix(
        summary="Keep f32 master weights, but run matmuls (and activations) in bfloat16.",
        jax="logits = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)\n# Flax: nn.Dense(..., dtype=jnp.bfloat16, param_dtype=jnp.float32)",
        pytorch="with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n    loss = model(x)",
    ),
    docs=("https://cloud.google.com/tpu/docs/bfloat16", "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.matmul.html", "https://docs.pytorch.org/docs/stable/amp.html"),
)

MXU_PADDING = Rule(
    id="mxu-padding", title="Matmul dimensions are not multiples of the MXU tile", family="compute", severity="low",
    fix=Fix(
        summary="Trim model dimensions just above a multiple of the tile (128; 256 on v6e) down to it: hidden, d_ff, heads x head_dim, vocab; dimensions below one tile gain nothing in step time.",
        jax="d_ff = (d_ff // 256) * 256  # e.g. 2100 -> 2048 on v6e; d_model, head_dim likewise",
    ),
    docs=("https://cloud.google.com/tpu/docs/performance-guide", "https://jax-ml.github.io/scaling-book/tpus/"),
)

SMALL_BATCH = Rule(
    id="small-batch", title="Matmuls are far below the target's ridge point and HBM has room for a bigger batch", family="compute", severity="medium",
    fix=Fix(
        summary="Grow the per-device batch (and scale the learning rate), or accumulate fewer, larger micro-batches.",
        jax="batch_size *= 4  # check `tpu-perf report` memory.max_batch_size first",
        pytorch="loader = DataLoader(ds, batch_size=4 * batch_size)",
    ),
    docs=("https://jax-ml.github.io/scaling-book/roofline/", "https://cloud.google.com/tpu/docs/performance-guide"),
)


def target_missing(s: Signals) -> str | None:
    """Why a hardware rule cannot judge this run, or None."""
    if s.target is None:
        return f"this run is on {s.platform or 'an unknown device'}, not a TPU: pass --target CHIP (e.g. --target v6e) to judge it for one"
    return None


def _target_evidence(s: Signals) -> Evidence:
    return ev("target_chip", s.target.name if s.target else None, "chip", f"{s.target_from}: hardware/catalogue.toml")


def fp32_matmul(s: Signals) -> Finding:
    if (why := target_missing(s)) is not None:
        return not_evaluable(FP32_MATMUL, why)
    share = s.dot_source_dtype_share.get("f32", 0.0)
    if s.hlo is not None and s.hlo.dots:
        evidence = [src("f32_dot_share", share), ev("dot_flops", sum(s.hlo.dot_flops_by_dtype.values()), "hlo", "sum(hlo.analysis.dot_flops_by_dtype)"), _target_evidence(s)]
    elif s.framework == "torch" and s.dot_source_dtype_share:  # no HLO: the dtypes the counted step's matmuls ran in
        evidence = [ev("f32_dot_share", share, "programs", "programs.parquet: the step row's dot_flops_by_dtype (FlopCounterMode's counted step, after autocast)"), _target_evidence(s)]
    else:
        return not_evaluable(FP32_MATMUL, "no matmuls in a saved step-program HLO (JAX runs with a jitted step save it) nor in a PyTorch step's FLOP count")
    if share <= T.FP32_MATMUL_SHARE:
        return passed(FP32_MATMUL, f"{share:.0%} of matmul FLOPs in f32", evidence)
    return fired(FP32_MATMUL, f"{share:.0%} of matmul FLOPs run in f32 on a bf16 MXU ({s.target.name})", evidence,
                 Gain(factor=None, basis="at default precision XLA already feeds f32 matmuls to the MXU in bf16; the gain is halved memory traffic and up to 3-6x where HIGH/HIGHEST precision is set", kind="none"))


def mxu_padding(s: Signals) -> Finding:
    if (why := target_missing(s)) is not None:
        return not_evaluable(MXU_PADDING, why)
    a = s.hlo_target
    if a is None and s.framework == "torch":
        return not_evaluable(MXU_PADDING, "PyTorch runs save no step-program HLO: which matmul dimensions are the data's (the first layer's input "
                                          "features), and so which padding a fix could remove, is read from it; judge it on a JAX or torch-tpu recording")
    if a is None or a.padding_waste is None:
        return not_evaluable(MXU_PADDING, "no matmuls in a saved step-program HLO (JAX runs with a jitted step save it)")
    saving = fixable_matmul_saving(a, s.fixed_dims, s.target)
    evidence = [ev("padding_waste_fraction", a.padding_waste, *SOURCES["padding_waste"]), ev("mxu_tile", a.tile, "chip", "hlo_analysis.tile_for_chip(target)"), _target_evidence(s)]
    if saving is None:
        return not_evaluable(MXU_PADDING, f"no bf16 peak or HBM bandwidth for {s.target.name} in the catalogue: no roofline to price the padding on")
    evidence += [ev("fixable_matmul_time_fraction", saving.fraction, "hlo", "advise/padding.py: 1 - roofline time of the step's matmuls with free dims trimmed to the tile / as they are"),
                 ev("fixed_padding_fraction", saving.fixed_waste, "hlo", "advise/padding.py: MXU work padding dims the user cannot change (first layer's input features; a batch memory cannot grow)")]
    if saving.fraction < T.MXU_PADDING_SHARE:
        why = "" if a.padding_waste < T.MXU_PADDING_SHARE else (
            f": the rest is of dimensions below one tile (a larger model fills it at the same step time), of the data "
            f"({saving.fixed_waste:.0%} of the MXU work: the first layer's input channels, a batch memory cannot grow), "
            f"or in memory-bound matmuls ({saving.memory_bound_share:.0%} of the matmul time on the roofline)")
        return passed(MXU_PADDING, f"{a.padding_waste:.0%} of the MXU work is padding; trimming free dimensions to the tile would save {saving.fraction:.0%} of the matmul time on {s.target.name}{why}", evidence)
    worst = sorted(a.dots, key=lambda d: -d.padding_waste * d.flops)[:3]
    shapes = ", ".join(f"{d.name} {d.m}x{d.k}x{d.n}" for d in worst)
    matmul = s.breakdown.get("matmul")
    if matmul:
        evidence.append(ev("trace_matmul_fraction", matmul, "trace", "breakdown.matmul"))
        gain = Gain(factor=1 / (1 - matmul * saving.fraction), kind="estimate",
                    basis=f"trimming the free dimensions to the {a.tile}-wide tile saves {saving.fraction:.0%} of the matmul time on {s.target.name}'s roofline; matmuls are {matmul:.0%} of the measured step (Amdahl)")
    else:
        gain = Gain(factor=1 / (1 - saving.fraction), kind="upper_bound",
                    basis=f"trimming the free dimensions to the {a.tile}-wide tile saves {saving.fraction:.0%} of the matmul time on {s.target.name}'s roofline; the matmul share of the step is unknown (no trace), so as if the step were all matmuls")
    return fired(MXU_PADDING, f"{a.padding_waste:.0%} of the MXU work on {s.target.name} ({a.tile}x{a.tile} tiles) is padding, {saving.fraction:.0%} of the matmul time removable; worst: {shapes}", evidence, gain)


def small_batch(s: Signals) -> Finding:
    if (why := target_missing(s)) is not None:
        return not_evaluable(SMALL_BATCH, why)
    ridge, intensity = s.ridge_flops_per_byte, s.dot_intensity_bf16
    if ridge is None or intensity is None:
        return not_evaluable(SMALL_BATCH, "no matmuls in a saved step-program HLO, or no peak/bandwidth for the target")
    if s.peak_bytes is None or not s.capacity_bytes:
        return not_evaluable(SMALL_BATCH, "device memory peak or capacity unknown: no headroom to judge")
    headroom = 1 - s.peak_bytes / s.capacity_bytes
    evidence = [src("dot_intensity_bf16", intensity), ev("ridge_flops_per_byte", ridge, *SOURCES["ridge_flops_per_byte"]), src("peak_bytes", s.peak_bytes), ev("capacity_bytes", s.capacity_bytes, "chip" if (s.capacity_from or "").startswith("catalogue") else "memory", s.capacity_from or "memory.capacity_bytes"), _target_evidence(s)]
    if intensity >= T.SMALL_BATCH_RIDGE_FRACTION * ridge or headroom < T.SMALL_BATCH_MIN_HEADROOM:
        return passed(SMALL_BATCH, f"matmul intensity {intensity:.0f} FLOPs/byte vs ridge {ridge:.0f}; HBM headroom {headroom:.0%}", evidence)
    return fired(SMALL_BATCH, f"matmuls reach {intensity:.0f} FLOPs/byte, {intensity / ridge:.0%} of {s.target.name}'s ridge point, with {headroom:.0%} of HBM free", evidence,
                 Gain(factor=None, basis="a bigger batch raises throughput per sample, not the step time; measure tokens/s after the change", kind="none", benefit="throughput"))
