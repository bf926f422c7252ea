"""Compiled loops that decode tokens: a `lax.scan`, `fori_loop` or `while_loop` whose every trip
samples a token and carries it to the next.

A decoding trip ends in an argmax (greedy, or categorical sampling's argmax of logits plus noise):
in HLO a variadic `reduce` that yields integer indices beside the values, or a `sort`/top-k that
carries integer indices. The loop's state then holds the token: an integer vector, one per row.
A scan over layers or over time steps of a classifier has neither, so it is not taken for one.
"""

from __future__ import annotations

import re

from tpu_perf.analyzers.hlo import HloModule, Instruction
from tpu_perf.analyzers.loops import trip_count

_INT_VECTOR = re.compile(r"\b[su](?:8|16|32|64)\[(\d+)\]")
_INT = re.compile(r"\b[su](?:8|16|32|64)\[")


def _samples_a_token(module: HloModule, body: str) -> bool:
    """Whether `body` (through the fusions and calls it makes) picks integer indices by value."""
    seen: set[str] = set()
    todo = [body]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for inst in module.computations.get(name, []):
            if inst.opcode == "reduce" and inst.shape.startswith("(") and _INT.search(inst.shape):
                return True
            if inst.opcode == "sort" and _INT.search(inst.shape) or inst.opcode == "custom-call" and "topk" in inst.text.lower():
                return True
            if inst.opcode != "reduce":  # a reducer's own computation adds nothing
                todo += inst.called
    return False


def token_rows(loop: Instruction) -> tuple[int, ...]:
    """Lengths of the integer vectors a loop carries (its tokens, one per row, among them)."""
    return tuple(int(n) for n in _INT_VECTOR.findall(loop.shape) if int(n) > 0)


def decoding_loops(module: HloModule) -> list[tuple[Instruction, int | None]]:
    """Each loop that samples a token per trip and carries it, with its trip count where XLA proved one."""
    out = []
    for inst in module.instructions():
        if inst.opcode == "while" and token_rows(inst) and _samples_a_token(module, inst.attrs.get("body", "").lstrip("%")):
            out.append((inst, trip_count(inst)))
    return out
