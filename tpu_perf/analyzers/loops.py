"""Matmul FLOPs that XLA's cost analysis misses in loops.

`compiled.cost_analysis()` counts a while loop's body once, so a step that scans 8 layers reports
1/8 of their matmuls. XLA records the trip count it proved in the while instruction's backend
config (`known_trip_count`); the loop body's dot and convolution FLOPs (`hlo_analysis.dot_flops`,
through fusions, calls and nested loops) are counted again here and multiplied by it. What is
added is the difference between the counted-with-trips and counted-once matmul FLOPs. Loops
without a known trip count are counted once, and reported as such.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tpu_perf.analyzers.hlo import HloModule, Instruction
from tpu_perf.analyzers.hlo_analysis import dot_flops

_TRIPS = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')


@dataclass(frozen=True, kw_only=True)
class LoopFlops:
    extra_flops: float
    """Matmul FLOPs to add to XLA's count: loop bodies beyond their first trip."""
    loops: int
    unknown_trip_loops: int
    """While loops whose trip count XLA did not prove: their bodies are counted once."""


def trip_count(inst: Instruction) -> int | None:
    m = _TRIPS.search(inst.text)
    if m:
        return int(m.group(1))
    config = inst.text.split("backend_config=", 1)[-1] if "backend_config=" in inst.text else ""
    try:  # a backend_config that is plain JSON to the end of the line
        n = json.loads(config).get("known_trip_count", {}).get("n")
        return int(n) if n is not None else None
    except (ValueError, AttributeError):
        return None


def loop_flops(module: HloModule) -> LoopFlops:
    """Matmul FLOPs that loops add beyond XLA's count-once, for one optimized HLO module."""
    shapes = {i.name: i.shape for i in module.instructions()}
    memo: dict[tuple[str, bool], float] = {}
    whiles = [i for i in module.instructions() if i.opcode == "while"]

    def flops(comp: str, with_trips: bool, depth: int = 0) -> float:
        key = (comp, with_trips)
        if key in memo or depth > 64:
            return memo.get(key, 0.0)
        total = 0.0
        for inst in module.computations.get(comp, []):
            if inst.opcode in ("dot", "convolution"):
                total += dot_flops(inst, shapes)
            if inst.opcode == "while":
                body = inst.attrs.get("body", "").lstrip("%")
                trips = (trip_count(inst) or 1) if with_trips else 1
                total += trips * flops(body, with_trips, depth + 1)
            elif inst.opcode != "while":
                for called in inst.called:
                    total += flops(called, with_trips, depth + 1)
        memo[key] = total
        return total

    extra = flops(module.entry, True) - flops(module.entry, False) if module.entry else 0.0
    return LoopFlops(extra_flops=max(0.0, extra), loops=len(whiles), unknown_trip_loops=sum(1 for w in whiles if trip_count(w) is None))
