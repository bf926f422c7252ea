"""Matmul FLOPs that XLA's cost analysis misses in loops.

`compiled.cost_analysis()` counts a while loop's body once, so a step that scans 8 layers reports
1/8 of their matmuls. XLA records the trip count it proved in the while instruction's backend
config (`known_trip_count`); the loop body's dot and convolution FLOPs (`hlo_analysis.dot_flops`,
through fusions, calls and nested loops) are counted again here and multiplied by it. What is
added is the difference between the counted-with-trips and counted-once matmul FLOPs.

A loop that stops on data (a `lax.while_loop` decoder that ends at EOS) has no proven trip count.
Where the run's trace window saw the program, its trips are measured there: the trace lists each
execution of the body's ops, so ops per entry of the `while` instruction is the mean trip count
(`measured_trips`). Loops neither proved nor traced are counted once, and reported as such.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from tpu_perf.analyzers.hlo import HloModule, Instruction
from tpu_perf.analyzers.hlo_analysis import dot_flops

_TRIPS = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')


@dataclass(frozen=True, kw_only=True)
class LoopFlops:
    extra_flops: float
    """Matmul FLOPs to add to XLA's count: loop bodies beyond their first trip."""
    loops: int
    unknown_trip_loops: int
    """While loops whose trip count neither XLA proved nor the trace measured: counted once."""
    measured_trips: dict[str, float] = field(default_factory=dict)
    """Mean trips per entry of each loop XLA did not prove, measured in the trace window (by `while` name)."""


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


_NOT_EXECUTED = frozenset({"parameter", "tuple", "get-tuple-element", "constant", "bitcast"})


def measured_trips(module: HloModule, ops: pd.DataFrame) -> dict[str, float]:
    """Mean trips per entry of each loop XLA did not prove, from the trace's ops table (`program`,
    `name`, `occurrences`): how often the body's ops ran over how often the `while` itself did.

    The trace names ops by HLO instruction name; the program whose op names overlap the module's
    most is this module's. Loops whose `while` or body ops the trace did not see are left out."""
    unknown = [i for i in module.instructions() if i.opcode == "while" and trip_count(i) is None]
    if not unknown or ops.empty or not {"program", "name", "occurrences"} <= set(ops.columns):
        return {}
    names = {i.name for i in module.instructions() if i.opcode not in _NOT_EXECUTED}
    seen = ops[ops["name"].astype(str).isin(names)]
    if seen.empty:
        return {}
    program = seen.groupby(seen["program"].astype(str), observed=True)["name"].nunique().idxmax()
    counts = seen[seen["program"].astype(str) == program].groupby("name", observed=True)["occurrences"].sum()
    out: dict[str, float] = {}
    for w in unknown:
        body = [i.name for i in module.computations.get(w.attrs.get("body", "").lstrip("%"), []) if i.opcode not in _NOT_EXECUTED]
        ran = counts.reindex(body).dropna()
        beside = [i.name for i in module.computations.get(w.computation, []) if i.opcode not in _NOT_EXECUTED and i.opcode != "while"]
        entries = counts.get(w.name) or counts.reindex(beside).dropna().median()  # a trace without the while's own event
        if entries and entries == entries and len(ran):
            out[w.name] = float(ran.median()) / float(entries)
    return out


def loop_flops(module: HloModule, measured: Mapping[str, float] | None = None) -> LoopFlops:
    """Matmul FLOPs that loops add beyond XLA's count-once, for one optimized HLO module; `measured`
    gives trips for loops XLA did not prove (`measured_trips`)."""
    measured = measured or {}
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
                trips = (trip_count(inst) or measured.get(inst.name) or 1) if with_trips else 1
                total += trips * flops(body, with_trips, depth + 1)
            elif inst.opcode != "while":
                for called in inst.called:
                    total += flops(called, with_trips, depth + 1)
        memo[key] = total
        return total

    extra = flops(module.entry, True) - flops(module.entry, False) if module.entry else 0.0
    unknown = [w for w in whiles if trip_count(w) is None]
    return LoopFlops(extra_flops=max(0.0, extra), loops=len(whiles), unknown_trip_loops=sum(1 for w in unknown if w.name not in measured),
                     measured_trips={w.name: measured[w.name] for w in unknown if w.name in measured})
