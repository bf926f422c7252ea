"""How many times a JAX decode step passes over its KV cache: read from the compiled step program.

A decode step must read each cache array once. Attention written as einsum-softmax-einsum over a
(batch, length, heads, head_dim) cache makes XLA copy the cache into the layout its matmul reads
(a transposed copy: one read and one write of the whole array), then run the matmul on the copy
(another read): three passes where a fused attention kernel (Pallas ragged paged attention on
TPU, cuDNN/flash on GPU) makes one. The cache arrays are the step's donated arguments (the state
it carries); a pass is a top-level op's operand or result of a cache array's size, other than the
in-place write of the new position (a dynamic-update-slice). What those ops cost is their share of
the step program's op time in the trace window. XLA:CPU lays out and fuses differently from a TPU:
the count is this backend's program, and on the CPU backend no bandwidth gain is promised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpu_perf.analyzers.hlo import HloModule, Instruction, run_hlo
from tpu_perf.analyzers.hlo_analysis import shapes
from tpu_perf.analyzers.programs import step_program
from tpu_perf.store import Run
from tpu_perf.store.layout import SIGNATURE_SUFFIX

_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64", "s8": "int8", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
"""HLO element types under the names the signature (numpy) gives them."""
_BOOKKEEPING = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast"})
_NESTED = frozenset({"while", "call", "conditional"})
"""Ops whose work on an operand is in another computation."""


@dataclass(frozen=True, kw_only=True)
class CacheReads:
    arrays: int
    """Cache arrays the decode step carries (its donated arguments)."""
    cache_bytes: float
    passes: float | None
    """Reads and writes of a whole cache array per array per step (1: read once); None where the
    cache goes into a loop, call or conditional (`ops` names it), whose passes are not counted."""
    ops: tuple[str, ...]
    """The top-level ops that pass over a cache array (HLO instruction names)."""
    op_share: float | None
    """Those ops' share of the step program's op time in the trace; None when not traced."""


def cache_reads(run: Run) -> CacheReads | None:
    """The decode step's passes over its KV cache; None without a step program that carries one."""
    step = step_program(run.programs)
    hlo = None if step is None else step.get("hlo_file")
    if not isinstance(hlo, str) or not run.exists(hlo.removesuffix(".hlo.txt") + SIGNATURE_SUFFIX):
        return None
    signature = json.loads(run.read_text(hlo.removesuffix(".hlo.txt") + SIGNATURE_SUFFIX))
    donated = [row for row in signature.get("inputs") or () if row.get("donated") and row.get("shape")]
    if not donated:
        return None
    module = run_hlo(run, hlo)
    passes, ops = cache_passes(module, donated)
    if not ops:
        return None
    cache_bytes = float(sum(math.prod(row["shape"]) * _itemsize(row.get("dtype")) for row in donated))
    return CacheReads(arrays=len(donated), cache_bytes=cache_bytes, passes=passes, ops=ops, op_share=_op_share(module, run.table("ops"), set(ops)) if passes is not None else None)


def _itemsize(dtype: str | None) -> int:
    digits = "".join(c for c in str(dtype) if c.isdigit())
    return int(digits) // 8 if digits else 4


def _elements(text: str) -> list[int]:
    return [math.prod(dims) for _, dims in shapes(text)]


def _in_place(module: HloModule, inst: Instruction) -> bool:
    """A write of a slice into the cache (XLA updates the buffer in place): no pass over it."""
    if inst.opcode == "dynamic-update-slice":
        return True
    return inst.opcode == "fusion" and any(i.opcode == "dynamic-update-slice" and i.text.startswith("ROOT") for c in inst.called for i in module.computations.get(c, []))


def cache_passes(module: HloModule, donated: Sequence[Mapping[str, Any]]) -> tuple[float | None, tuple[str, ...]]:
    """(whole-array reads and writes per cache array, the ops making them) by the entry's top-level
    ops, of the cache: the parameters of a `donated` argument's shape (`dtype`, `shape`), and what
    the ops make of them at their size (copies, updates). None where the cache goes into a loop, a
    call or a conditional (layers scanned over a stacked cache): the passes are inside, uncounted."""
    body = module.computations.get(module.entry, [])
    wanted = {(str(row.get("dtype")), tuple(row["shape"])) for row in donated}
    sizes = {math.prod(dims) for _, dims in wanted}
    cache = {i.name for i in body if i.opcode == "parameter" and any((_DTYPES.get(dt, dt), dims) in wanted for dt, dims in shapes(i.shape))}
    total, ops, tuples = 0, [], set()
    for inst in body:
        reads = sum(1 for o in inst.operands if o in cache)
        if inst.opcode in _NESTED and (reads or not tuples.isdisjoint(inst.operands)):
            return None, (inst.name,)
        if not reads:
            continue
        if inst.opcode == "tuple":
            tuples.add(inst.name)  # a loop's state holding the cache
        elif any(n in sizes for n in _elements(inst.shape)):
            cache.add(inst.name)  # the cache still, in another layout or updated
        if inst.opcode in _BOOKKEEPING or _in_place(module, inst):
            continue
        total += reads + (1 if inst.name in cache else 0)
        ops.append(inst.name)
    return (total / len(donated) if ops and donated else None), tuple(ops)


def _op_share(module: HloModule, ops: pd.DataFrame, names: set[str]) -> float | None:
    """Time of `names` over all op time of the module's program in the trace (the program whose op
    names overlap the module's most, as `loops.measured_trips` finds it)."""
    if ops.empty or not {"program", "name", "total_time_s"} <= set(ops.columns):
        return None
    mine = {i.name for i in module.computations.get(module.entry, []) if i.opcode not in _BOOKKEEPING}
    seen = ops[ops["name"].astype(str).isin(mine)]
    if seen.empty:
        return None
    program = seen.groupby(seen["program"].astype(str), observed=True)["name"].nunique().idxmax()
    rows = seen[seen["program"].astype(str) == program]
    total = float(rows["total_time_s"].sum())
    return float(rows[rows["name"].astype(str).isin(names)]["total_time_s"].sum()) / total if total > 0 else None
