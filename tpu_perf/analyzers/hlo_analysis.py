"""Deeper reads of optimized HLO: dots and their dtypes and tile padding, collectives and whether
async pairs overlap compute, while loops, and elementwise ops left unfused with the bytes they move.

Optimized HLO text lists instructions in schedule order, so "something runs between a `*-start`
and its `*-done`" is read from positions in the computation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpu_perf.analyzers.dot_chains import longest_chains
from tpu_perf.analyzers.hlo import HloModule, Instruction, parse_hlo

_SHAPE = re.compile(r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f8e4m3fn|f8e5m2|f8\w*|bf16|f16|f32|f64|c64|c128)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
ELEMENTWISE = frozenset("add subtract multiply divide maximum minimum exponential exp log tanh logistic negate abs sqrt rsqrt power convert select compare and or xor not clamp sign floor ceil round-nearest-even cosine sine erf".split())
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "send", "recv", "collective-broadcast", "ragged-all-to-all")
_BOOKKEEPING = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}


def shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims in _SHAPE.findall(text)]


def nbytes(shape: tuple[str, tuple[int, ...]]) -> float:
    return _BYTES.get(shape[0], 1) * math.prod(shape[1])


def _pad(n: int, tile: int) -> int:
    return -(-n // tile) * tile


@dataclass(frozen=True, kw_only=True)
class DotInfo:
    name: str
    opcode: str
    dtype: str
    m: int
    n: int
    k: int
    flops: float
    padding_waste: float
    """Share of the padded tile work that is padding: 1 - MNK / (pad(M) pad(N) pad(K))."""
    dims: str = ""
    """Its dimension numbers (batch and contracting dims; a convolution's dim_labels): the role a
    dot plays. A layer's forward, weight-gradient and input-gradient dots of one square shape differ
    here; L unrolled copies of a layer repeat each of them L times."""
    chain: int = 1
    """The most dots of its kind (dtype, m, n, k, dims) on one data path through the program
    (dot_chains.longest_chains): L for an unrolled L-layer stack, 1 for side-by-side matmuls such
    as a recurrent cell's gates, however many there are."""


@dataclass(frozen=True, kw_only=True)
class HloAnalysis:
    dots: list[DotInfo]
    dot_flops_by_dtype: dict[str, float]
    dot_flops_share_by_dtype: dict[str, float]
    padding_waste: float | None
    """Padding share of all dot work, FLOP-weighted; None with no dots."""
    collectives: dict[str, int]
    async_pairs: int
    async_overlapped: int
    while_loops: int
    unfused_elementwise: dict[str, int]
    unfused_elementwise_bytes: float
    tile: int = 128
    notes: list[str] = field(default_factory=list)


_DIM_LABELS = re.compile(r"dim_labels=\w+_(\w+)->")
_DIM_NUMBERS = re.compile(r"(?:lhs|rhs)_(?:batch|contracting)_dims=\{[\d,]*\}|dim_labels=[\w>-]+")


def _contracted(instr: Instruction, lhs: tuple[int, ...], rhs: tuple[int, ...]) -> int:
    """Multiply-adds per output element: a dot's contracted size (lhs contracting dims), a
    convolution's kernel volume x input features (the kernel's dims less its output-feature dim)."""
    contract = LHS_CONTRACTING.search(instr.text)
    if contract and contract.group(1):
        return math.prod(lhs[int(d)] for d in contract.group(1).split(",") if int(d) < len(lhs))
    if instr.opcode != "convolution" or not rhs:
        return 1
    labels = _DIM_LABELS.search(instr.text)
    out_dim = labels.group(1).find("o") if labels and len(labels.group(1)) == len(rhs) else len(rhs) - 1
    return math.prod(d for i, d in enumerate(rhs) if i != out_dim)


def dot_flops(instr: Instruction, shape_of: dict[str, str]) -> float:
    """FLOPs of one dot or convolution: 2 x output elements x multiply-adds per element (0 when
    its shapes are unknown). The one counter for the HLO analysis and the loop FLOPs."""
    out_s = shapes(instr.shape)
    ops = [shapes(shape_of.get(o, "")) for o in instr.operands[:2]]
    if instr.opcode not in ("dot", "convolution") or not out_s or len(ops) < 2 or not ops[0] or not ops[1]:
        return 0.0
    return 2.0 * math.prod(out_s[0][1]) * _contracted(instr, ops[0][0][1], ops[1][0][1])


def _dot(instr: Instruction, tile: int, shape_of: dict[str, str]) -> DotInfo | None:
    """Operand shapes come from the operands' own definitions (newer HLO text omits them inline)."""
    out_s = shapes(instr.shape)
    ops = [shapes(shape_of.get(o, "")) for o in instr.operands[:2]]
    if not out_s or len(ops) < 2 or not ops[0] or not ops[1]:
        return None
    out, lhs, rhs = out_s[0][1], ops[0][0], ops[1][0]
    k = _contracted(instr, lhs[1], rhs[1])
    m = out[-2] if len(out) >= 2 else 1
    n = out[-1] if out else 1
    flops = dot_flops(instr, shape_of)
    padded = _pad(m, tile) * _pad(n, tile) * _pad(k, tile)
    waste = 1.0 - (m * n * k) / padded if padded else 0.0
    dims = " ".join(_DIM_NUMBERS.findall(instr.text))
    return DotInfo(name=instr.name, opcode=instr.opcode, dtype=lhs[0], m=m, n=n, k=k, flops=flops, padding_waste=waste, dims=dims)


def _kind(d: DotInfo) -> tuple[str, int, int, int, str]:
    return (d.dtype, d.m, d.n, d.k, d.dims)


def _async_overlap(module: HloModule) -> tuple[int, int]:
    pairs = overlapped = 0
    for body in module.computations.values():
        position = {i.name: p for p, i in enumerate(body)}
        for p, instr in enumerate(body):
            if instr.opcode.endswith("-done") and instr.operands and instr.operands[0] in position:
                start = position[instr.operands[0]]
                pairs += 1
                between = [b for b in body[start + 1 : p] if b.opcode not in _BOOKKEEPING and not b.opcode.endswith(("-start", "-done"))]
                overlapped += bool(between)
    return pairs, overlapped


def analyze_hlo(module: HloModule, *, tile: int = 128) -> HloAnalysis:
    """Dots, collectives, loops and unfused elementwise work of one optimized HLO module."""
    shape_of = {i.name: i.shape for i in module.instructions()}
    dots = [d for i in module.instructions() if i.opcode in ("dot", "convolution") if (d := _dot(i, tile, shape_of))]
    chains = longest_chains(module, {d.name: _kind(d) for d in dots})
    dots = [replace(d, chain=chains.get(_kind(d), 1)) for d in dots]
    by_dtype: dict[str, float] = {}
    for d in dots:
        by_dtype[d.dtype] = by_dtype.get(d.dtype, 0.0) + d.flops
    total = sum(by_dtype.values())
    top = module.top_level()
    colls: dict[str, int] = {}
    for i in module.instructions():
        base = i.opcode.removesuffix("-start").removesuffix("-done")
        if base in COLLECTIVES and not i.opcode.endswith("-done"):
            colls[base] = colls.get(base, 0) + 1
    pairs, overlapped = _async_overlap(module)
    unfused = [i for i in top if i.opcode in ELEMENTWISE]
    moved = sum(sum(nbytes(s) for s in shapes(" ".join([i.shape, *(shape_of.get(o, "") for o in i.operands)]))) for i in unfused)
    counts: dict[str, int] = {}
    for i in unfused:
        counts[i.opcode] = counts.get(i.opcode, 0) + 1
    return HloAnalysis(
        dots=dots, dot_flops_by_dtype=by_dtype, dot_flops_share_by_dtype={k: v / total for k, v in by_dtype.items()} if total else {},
        padding_waste=(sum(d.padding_waste * d.flops for d in dots) / total) if total else None,
        collectives=colls, async_pairs=pairs, async_overlapped=overlapped,
        while_loops=sum(1 for i in module.instructions() if i.opcode == "while"),
        unfused_elementwise=dict(sorted(counts.items(), key=lambda kv: -kv[1])), unfused_elementwise_bytes=float(moved), tile=tile,
    )


def tile_for_chip(chip: str | None) -> int:
    """MXU tile edge: 256 on v6e (Trillium), 128 on earlier TPUs (FACTS.md)."""
    return 256 if chip and "v6e" in chip else 128


def read_dump(folder: Path) -> dict[str, HloModule]:
    """Optimized modules of an `XLA_FLAGS=--xla_dump_to=DIR` folder, keyed by file name."""
    files = sorted(Path(folder).glob("*after_optimizations.txt"))
    return {f.name: parse_hlo(f.read_text(errors="replace")) for f in files}
