"""The TPU compiler's view of the step for slices the run was not on (`record --topology`).

Read from the raw compile facts the JAX collector saved (`aot/<topology>.json` and the optimized
HLO): FLOPs, bytes, the compiler's roofline time (`optimal_seconds`), peak HBM per device against
the chip's capacity, fusions and collectives. These are compile-time estimates, identical from run
to run, not measurements (docs/aot.md): they are meant to be compared exactly, run against run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from tpu_perf.analyzers.at_peak import AtPeak, at_peak_of
from tpu_perf.analyzers.hlo import HloModule, fusion_summary, run_hlo
from tpu_perf.analyzers.hlo_analysis import COLLECTIVES, nbytes, shapes
from tpu_perf.errors import DataError
from tpu_perf.hardware import Chip, lookup_chip
from tpu_perf.store import Run, layout

PRECISION = "bf16"
"""The peak the roofline MFU divides by (the catalogue's dense bf16 TFLOP/s per chip)."""


@dataclass(frozen=True, kw_only=True)
class Collective:
    count: int
    bytes: int
    """Bytes of the collective's results (per device), summed over its instructions."""


@dataclass(frozen=True, kw_only=True)
class AotStats:
    """One slice's compile numbers. Flat, named fields: `tpu-perf check` compares them exactly."""

    topology: str
    function: str
    chip: str | None
    """Catalogue name (`tpu-v6e`), else the compiler's device kind."""
    chips: int
    devices: int
    flops_per_step: float | None
    """All devices: the per-device program's FLOPs x devices."""
    flops_per_device_step: float | None
    bytes_accessed: float | None
    """HBM bytes the per-device program reads and writes, by the compiler's cost model."""
    optimal_step_s: float | None
    """The compiler's roofline time for one step (`optimal_seconds`); None when it gave none."""
    optimal_step_reason: str | None
    peak_tflops_per_chip: float | None
    roofline_mfu: float | None
    """flops_per_step / optimal_step_s / (peak per chip x chips): hardware FLOPs at the roofline time."""
    model_roofline_mfu: float | None
    """The same with the model's FLOPs per step (record --model/--hf-config and --tokens-per-step)."""
    roofline_reason: str | None
    peak_hbm_bytes: int | None
    """Per device: XLA's peak of live buffers for the step program."""
    hbm_capacity_bytes: int | None
    """Per device: the catalogue's HBM per chip x chips / devices."""
    fits: bool | None
    fusions: dict[str, int]
    """Top-level fusions by kind (kLoop, kInput, kOutput, kCustom)."""
    collectives: dict[str, Collective]
    hlo_file: str | None
    out_of_memory: str | None = None
    """The TPU compiler's error when the step does not fit the slice (fits is then false)."""
    at_peak: AtPeak | None = None
    """What fills one device's HBM at the peak on the slice, by the TPU compiler's liveness."""
    at_peak_headroom_bytes: int | None = None
    """hbm_capacity_bytes - at_peak.peak_bytes (negative: it does not fit; `fits` is decided by the
    same numbers); after an out-of-memory compile, against the HBM the compiler said was available."""


def collectives(module: HloModule) -> dict[str, Collective]:
    """Collectives by kind: synchronous ones by their result, async ones by their `-done` result."""
    counts: dict[str, list[int]] = {}
    for instr in module.instructions():
        if instr.opcode.endswith("-start"):
            continue  # counted at its -done, whose shape is the result alone
        base = instr.opcode.removesuffix("-done")
        if base in COLLECTIVES:
            entry = counts.setdefault(base, [0, 0])
            entry[0] += 1
            entry[1] += int(sum(nbytes(s) for s in shapes(instr.shape)))
    return {k: Collective(count=c, bytes=b) for k, (c, b) in sorted(counts.items())}


def _optimal(cost: dict[str, float], chip: str | None) -> tuple[float | None, str | None]:
    value = cost.get("optimal_seconds")
    if value is None:
        return None, "the TPU compiler reported no optimal_seconds"
    if value <= 0:
        return None, f"the TPU compiler left optimal_seconds unset for {chip or 'this chip'} (it reported {value:g})"
    return float(value), None


def _capacity(chip: Chip | None, chips: int, devices: int) -> int | None:
    if chip is None or chip.hbm_bytes is None or not devices:
        return None
    return chip.hbm_bytes * chips // devices


def _stats(raw: dict, module: HloModule | None, model_flops_per_step: float | None) -> AotStats:
    topology = str(raw["topology"])
    chip = lookup_chip(topology.rsplit(":", 1)[0]) or lookup_chip(raw.get("device_kind"))
    chip_name = chip.name if chip else raw.get("device_kind")
    cost, memory = raw.get("cost") or {}, raw.get("memory") or {}
    devices, chips = int(raw["devices"]), int(raw["chips"])
    per_device = cost.get("flops")
    per_step = per_device * devices if per_device is not None else None
    optimal, reason = _optimal(cost, chip_name)
    peak = chip.peak_tflops.get(PRECISION) if chip else None
    denominator = optimal * peak * 1e12 * chips if (optimal is not None and peak) else None
    roof_reason = reason if optimal is None else (None if peak else f"no {PRECISION} peak for {chip_name} in the catalogue")
    capacity = _capacity(chip, chips, devices)
    peak_hbm = memory.get("peak_memory_in_bytes")
    return AotStats(
        topology=topology,
        function=str(raw.get("function")),
        chip=chip_name,
        chips=chips,
        devices=devices,
        flops_per_step=per_step,
        flops_per_device_step=per_device,
        bytes_accessed=cost.get("bytes accessed"),
        optimal_step_s=optimal,
        optimal_step_reason=reason,
        peak_tflops_per_chip=peak,
        roofline_mfu=per_step / denominator if (per_step is not None and denominator) else None,
        model_roofline_mfu=model_flops_per_step / denominator if (model_flops_per_step and denominator) else None,
        roofline_reason=roof_reason,
        peak_hbm_bytes=peak_hbm,
        hbm_capacity_bytes=capacity,
        fits=False if raw.get("out_of_memory") else (peak_hbm <= capacity) if (peak_hbm is not None and capacity is not None) else None,
        fusions=fusion_summary(module).fusions_by_kind if module else {},
        collectives=collectives(module) if module else {},
        hlo_file=raw.get("hlo_file"),
        out_of_memory=raw.get("out_of_memory"),
    )


def _read(run: Run, relpath: str) -> dict:
    try:
        raw = json.loads(run.read_text(relpath))
    except (OSError, ValueError) as exc:
        raise DataError(f"{run.file_path(relpath)}: not a readable TPU compile record ({exc})") from None
    if not isinstance(raw, dict) or not {"topology", "devices", "chips"} <= raw.keys():
        raise DataError(f"{run.file_path(relpath)}: not a TPU compile record (needs topology, devices, chips)")
    return raw


def analyze_aot(run: Run, *, model_flops_per_step: float | None = None) -> tuple[AotStats, ...]:
    """One entry per slice the step was compiled for, in the order `record --topology` named them."""
    files = [f for f in run.list_files(layout.AOT_DIR) if f.endswith(".json")]
    wanted = list((run.manifest.get("config") or {}).get("topologies") or [])
    order = {layout.aot_json(t): i for i, t in enumerate(wanted)}
    out = []
    for relpath in sorted(files, key=lambda f: (order.get(f, len(order)), f)):
        raw = _read(run, relpath)
        hlo = raw.get("hlo_file")
        module = run_hlo(run, hlo) if isinstance(hlo, str) and run.exists(hlo) else None
        stats = _stats(raw, module, model_flops_per_step)
        found = at_peak_of(run, hlo.removesuffix(".hlo.txt"), stats.function) if isinstance(hlo, str) else None
        out.append(_with_at_peak(stats, found))
    return tuple(out)


_AVAILABLE = re.compile(r"available HBM \((?P<size>[\d.]+)(?P<unit>[KMGT])\)")


def compiler_available_bytes(message: str | None) -> int | None:
    """The HBM the TPU compiler said was available, from its out-of-memory error ("exceeds
    available HBM (15.75G)": binary units, as its "required (21.14G)" matches the buffer
    assignment's bytes), else None."""
    m = _AVAILABLE.search(message or "")
    return int(float(m.group("size")) * 1024 ** "KMGT".index(m.group("unit")) * 1024) if m else None


def _with_at_peak(stats: AotStats, found: AtPeak | None) -> AotStats:
    """`fits` and the headroom from one number: the at-peak's main-memory bytes (the compiler's own
    total of its HBM allocations) against the capacity; an out-of-memory compile does not fit, and
    its headroom is taken against the HBM the compiler said it had."""
    if found is None or found.basis != "buffer assignment":
        headroom = stats.hbm_capacity_bytes - found.peak_bytes if (found is not None and stats.hbm_capacity_bytes is not None) else None
        return dataclasses.replace(stats, at_peak=found, at_peak_headroom_bytes=headroom)
    capacity = (compiler_available_bytes(stats.out_of_memory) if stats.out_of_memory else None) or stats.hbm_capacity_bytes
    headroom = capacity - found.peak_bytes if capacity is not None else None
    fits = False if stats.out_of_memory else (headroom >= 0 if headroom is not None else stats.fits)
    return dataclasses.replace(stats, at_peak=found, at_peak_headroom_bytes=headroom, fits=fits)
