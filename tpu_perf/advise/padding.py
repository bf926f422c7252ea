"""MXU tile padding the user can remove, and what removing it saves on the target's roofline.

Two questions the mxu-padding rule asks of the step program's matmuls:

- Which dimensions can the user change? Not the first layer's input features (3 RGB channels, a
  conv's kernel volume x those channels): they are the data's. Not the batch, when memory has no
  room for a bigger one. `fixed_dot_dims` finds the first layer as the dots and convolutions whose
  two operands both come straight from the program's arguments (the input batch and the first
  weights), and marks in every dot that reads that input the dimensions of that size.
- What does removing the padding save? A dimension below one tile (32 channels on a 128-wide MXU)
  cannot lose its padding: a larger one fills the tile at the same step time (more work per step,
  not a shorter step). A dimension just above a multiple of the tile (130, 300) can: trimmed to
  that multiple, the MXU does a tile fewer. `fixable_matmul_saving` prices that per matmul with
  the target's roofline, max(FLOPs / peak, bytes / bandwidth): a memory-bound matmul saves nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tpu_perf.analyzers.hlo import HloModule, Instruction
from tpu_perf.analyzers.hlo_analysis import DotInfo, HloAnalysis, shapes
from tpu_perf.hardware import Chip

PASS_THROUGH = frozenset({"convert", "bitcast", "copy", "transpose", "reshape", "broadcast", "pad", "slice"})
"""Ops that carry an argument to a matmul without making it a computed activation."""
_PARAM = re.compile(r"parameter\((\d+)\)")


def _origin(name: str, by_name: dict[str, Instruction], caller_of: dict[str, Instruction]) -> str | None:
    """The entry-computation parameter `name` is read from, through fusions and pass-through ops."""
    for _ in range(64):
        instr = by_name.get(name)
        if instr is None:
            return None
        if instr.opcode == "parameter":
            caller = caller_of.get(instr.computation)
            found = _PARAM.search(instr.text)
            if caller is None:
                return instr.name
            if found is None or int(found.group(1)) >= len(caller.operands):
                return None
            name = caller.operands[int(found.group(1))]
        elif instr.opcode in PASS_THROUGH and instr.operands:
            name = instr.operands[0]
        else:
            return None
    return None


def fixed_dot_dims(module: HloModule, batch: int | None = None) -> dict[str, frozenset[str]]:
    """Per dot/convolution name, which of m, n, k the user cannot change: sizes of the first layer's
    input features (and `batch`, when given: memory has no room for a bigger one), in dots that
    read the input batch."""
    instrs = module.instructions()
    by_name = {i.name: i for i in instrs}
    caller_of = {c: i for i in instrs if i.opcode == "fusion" for c in i.called}
    matmuls = [i for i in instrs if i.opcode in ("dot", "convolution") and len(i.operands) >= 2]
    origins = {i.name: (_origin(i.operands[0], by_name, caller_of), _origin(i.operands[1], by_name, caller_of)) for i in matmuls}
    sizes: set[int] = set()
    inputs: set[str] = set()
    for i in matmuls:
        lhs, rhs = origins[i.name]
        if lhs is None or rhs is None:
            continue
        inputs.add(lhs)  # the first layer reads the input batch as its left operand
        kernel = shapes(by_name[i.operands[1]].shape)
        dims = kernel[0][1] if kernel else ()
        if i.opcode == "convolution" and len(dims) >= 2:
            sizes |= {dims[-2], math.prod(dims[:-1])}  # input channels; kernel volume x channels
        elif dims:
            sizes.add(dims[0] if len(dims) == 2 else dims[-2])
    if batch:
        sizes.add(int(batch))
    fixed: dict[str, frozenset[str]] = {}
    for i in matmuls:
        if not inputs & {o for o in origins[i.name] if o}:
            continue
        out = shapes(i.shape)
        m = out[0][1][-2] if out and len(out[0][1]) >= 2 else None
        n = out[0][1][-1] if out and out[0][1] else None
        k = _contracting(i, by_name)
        fixed[i.name] = frozenset(name for name, size in (("m", m), ("n", n), ("k", k)) if size in sizes)
    return fixed


def _contracting(i: Instruction, by_name: dict[str, Instruction]) -> int | None:
    lhs = shapes(by_name[i.operands[0]].shape) if i.operands[0] in by_name else []
    found = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", i.text)
    if found and found.group(1) and lhs:
        return math.prod(lhs[0][1][int(d)] for d in found.group(1).split(",") if int(d) < len(lhs[0][1]))
    rhs = shapes(by_name[i.operands[1]].shape) if i.operands[1] in by_name else []
    return math.prod(rhs[0][1][:-1]) if rhs and rhs[0][1] else None


def _pad(n: int, tile: int) -> int:
    return -(-n // tile) * tile


def _trimmed(n: int, tile: int, fixed: bool) -> int:
    """The padded size after the fix: a free dimension above one tile trimmed to the multiple of the
    tile below it when that is nearer than the one above (130 -> 128; 250 stays 256)."""
    if fixed or n <= tile or n % tile == 0:
        return _pad(n, tile)
    below = (n // tile) * tile
    return below if n - below < tile / 2 else _pad(n, tile)


@dataclass(frozen=True, kw_only=True)
class PaddingSaving:
    fraction: float
    """Share of the target's matmul time (roofline) the fix removes."""
    padding_waste: float
    """Share of the MXU work that is padding, all dimensions (what the hardware pads)."""
    fixed_waste: float
    """Share of the MXU work that is padding of dimensions the user cannot change."""
    memory_bound_share: float
    """Share of the target's matmul time in memory-bound matmuls (padding costs them nothing)."""


def fixable_matmul_saving(a: HloAnalysis, fixed: dict[str, frozenset[str]], chip: Chip) -> PaddingSaving | None:
    """What trimming the free dimensions saves of the target's matmul time (module docstring)."""
    peak, bw = (chip.peak_tflops.get("bf16") or 0.0) * 1e12, (chip.hbm_gbps or 0.0) * 1e9
    if not a.dots or not peak or not bw:
        return None
    tile = a.tile
    now = after = padded_total = fixed_pad = bound = 0.0
    for d in a.dots:
        if not (d.m and d.n and d.k):
            continue
        reps = d.flops / (2 * d.m * d.n * d.k)
        f = fixed.get(d.name, frozenset())
        if d.opcode == "convolution":  # k is kernel volume x channels, m a spatial size: the MXU tiles channels, not these
            f = f | {"m", "k"}
        work = 2 * reps * _pad(d.m, tile) * _pad(d.n, tile) * _pad(d.k, tile)
        trimmed = 2 * reps * _trimmed(d.m, tile, "m" in f) * _trimmed(d.n, tile, "n" in f) * _trimmed(d.k, tile, "k" in f)
        moved = 2.0 * reps * (d.m * d.k + d.k * d.n + d.m * d.n)
        t_now, t_after = max(work / peak, moved / bw), max(trimmed / peak, moved / bw)
        now, after, padded_total = now + t_now, after + t_after, padded_total + work
        fixed_pad += 2 * reps * (_fixed_only(d, f, tile) - d.m * d.n * d.k)
        bound += t_now if moved / bw >= work / peak else 0.0
    if not now or not padded_total:
        return None
    return PaddingSaving(fraction=1 - after / now, padding_waste=a.padding_waste or 0.0, fixed_waste=fixed_pad / padded_total, memory_bound_share=bound / now)


def _fixed_only(d: DotInfo, f: frozenset[str], tile: int) -> float:
    """MXU work if only the fixed dimensions were padded."""
    return (_pad(d.m, tile) if "m" in f else d.m) * (_pad(d.n, tile) if "n" in f else d.n) * (_pad(d.k, tile) if "k" in f else d.k)
