"""The dtype a matmul was written in, seen through the converts a backend adds.

XLA's CPU backend upcasts bf16 x bf16 dots to f32 (`wrapped_convert` fusions feeding an f32 dot),
so the optimized HLO of a bf16 model recorded on a CPU shows f32 dots. Judging for a TPU, the
question is what the program asked for: follow each dot operand back through fusion parameters to
a convert, and take the dtype it converted from when that is narrower.
"""

from __future__ import annotations

from tpu_perf.analyzers.hlo import HloModule, Instruction
from tpu_perf.analyzers.hlo_analysis import HloAnalysis, shapes

NARROW = ("bf16", "f16", "f8e4m3fn", "f8e5m2")


def _callers(module: HloModule) -> dict[str, Instruction]:
    return {c: i for i in module.instructions() if i.opcode == "fusion" for c in i.called}


def _source_dtype(module: HloModule, instr: Instruction, operand: int, by_name: dict[str, Instruction], callers: dict[str, Instruction]) -> str | None:
    """Dtype of the value feeding `instr`'s operand, looking through converts and fusion boundaries."""
    name = instr.operands[operand] if operand < len(instr.operands) else None
    for _ in range(8):  # a few hops at most: parameter -> caller operand -> convert fusion root
        producer = by_name.get((instr.computation, name)) if name else None
        if producer is None:
            return None
        if producer.opcode == "convert" and producer.operands:
            inner = by_name.get((producer.computation, producer.operands[0]))
            found = shapes(inner.shape) if inner else []
            return found[0][0] if found else None
        if producer.opcode == "parameter" and producer.computation in callers:
            caller = callers[producer.computation]
            index = int(producer.text.split("parameter(")[1].split(")")[0])
            instr, name = caller, caller.operands[index] if index < len(caller.operands) else None
            continue
        if producer.opcode == "fusion":
            body = module.computations.get(producer.called[0], []) if producer.called else []
            root = next((i for i in body if i.text.startswith("ROOT")), None)
            if root is not None and root.opcode == "convert":
                instr, name = root, root.name
                continue
        found = shapes(producer.shape)
        return found[0][0] if found else None
    return None


def dot_flops_share_by_source_dtype(module: HloModule, analysis: HloAnalysis) -> dict[str, float]:
    """Matmul FLOP shares by the dtype the operands had before a backend widened them."""
    by_name = {(i.computation, i.name): i for i in module.instructions()}
    callers = _callers(module)
    dots = {i.name: i for i in module.instructions() if i.opcode in ("dot", "convolution")}
    flops: dict[str, float] = {}
    for d in analysis.dots:
        dtype = d.dtype
        instr = dots.get(d.name)
        if instr is not None and dtype not in NARROW:
            narrow = [t for t in (_source_dtype(module, instr, k, by_name, callers) for k in (0, 1)) if t in NARROW]
            dtype = narrow[0] if len(narrow) == 2 else dtype
        flops[dtype] = flops.get(dtype, 0.0) + d.flops
    total = sum(flops.values())
    return {k: v / total for k, v in flops.items()} if total else {}
