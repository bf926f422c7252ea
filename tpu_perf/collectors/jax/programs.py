"""XLA's own view of the step program: cost analysis, memory analysis and optimized HLO.

Taken after the script ended, from abstract arguments (shapes, dtypes, shardings) captured when the
function last compiled, so no timed step pays for it. The price is one more lower-and-compile per
program at the end of `record` (XLA's in-memory caches usually make it cheaper than the first).
An ahead-of-time compiled program the script called (`jit(f).lower(...).compile()`) is analysed as
it is. Cost analysis is per device (a pmap's too); `devices` scales it to the whole step.
"""

from __future__ import annotations

import re
import time
from typing import Any

from tpu_perf.collectors.jax import at_peak
from tpu_perf.collectors.jax.jit import FunctionState
from tpu_perf.collectors.session import Recorder
from tpu_perf.store import layout

MAX_PROGRAMS = 8
"""Programs analysed at the end of a run: the step function first, then the most-called others."""

_MEMORY_FIELDS = {
    "argument_size_in_bytes": "argument_bytes",
    "output_size_in_bytes": "output_bytes",
    "temp_size_in_bytes": "temp_bytes",
    "alias_size_in_bytes": "alias_bytes",
    "generated_code_size_in_bytes": "generated_code_bytes",
    "peak_memory_in_bytes": "peak_bytes",
}


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80] or "program"


def _cost(compiled: Any) -> dict[str, float]:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per device program
        cost = cost[0] if cost else {}
    return dict(cost or {})


def _device_count(abstract: Any, compiled: Any, jax: Any) -> int:
    """Devices the program runs on: its arguments' shardings, or the compiled program's (a pmap's
    arguments may sit on one device; its program runs on every device it maps over)."""
    counts = [len(leaf.sharding.device_set) for leaf in jax.tree_util.tree_leaves(abstract) if getattr(leaf, "sharding", None) is not None]
    try:
        counts += [len(s.device_set) for s in jax.tree_util.tree_leaves(compiled.input_shardings) if hasattr(s, "device_set")]
    except Exception:  # an executable that does not say: the arguments tell
        pass
    return max(counts, default=1)


def analyse_program(state: FunctionState, *, is_step: bool, rec: Recorder, jax: Any) -> dict[str, Any]:
    """Compile `state`'s function for its last signature and return one `programs` row."""
    args, kwargs = state.abstract_args or ((), {})
    hlo_file = f"{layout.HLO_DIR}/{_safe_name(state.name)}.{len(state.name) % 97:02d}.hlo.txt"
    with at_peak.dump_options() as (dump, options):
        t0 = time.perf_counter()
        if state.compiled is not None:  # an ahead-of-time compiled step: the user's own executable
            compiled = state.compiled
        else:
            lowered = state.jitted.lower(*args, **kwargs)
            compiled = lowered.compile(compiler_options=options if is_step else None)
        seconds = time.perf_counter() - t0
        if is_step and state.compiled is None:  # XLA's liveness at the peak, for `memory.at_peak` (the file is next to hlo_file)
            at_peak.save(dump, hlo_file.removesuffix(".hlo.txt"), state.fun or state.jitted, (args, kwargs), lowered, writer=rec.writer, jax=jax, warn=rec.warn)
    cost = _cost(compiled)
    row: dict[str, Any] = {
        "function": state.name,
        "is_step": is_step,
        "calls": state.calls,
        "calls_in_steps": state.calls_in_steps,
        "flops": cost.get("flops"),
        "bytes_accessed": cost.get("bytes accessed"),
        "transcendentals": cost.get("transcendentals"),
        "optimal_seconds": cost.get("optimal_seconds"),
        "devices": _device_count((args, kwargs), compiled, jax),
        "kind": state.kind,
        "wrapper": state.wrapper,
        "analysis_s": seconds,
    }
    memory = compiled.memory_analysis()
    for attr, column in _MEMORY_FIELDS.items():
        value = getattr(memory, attr, None) if memory is not None else None
        row[column] = int(value) if value is not None else None
    text = compiled.as_text()
    rec.writer.write_text(hlo_file, text)
    unknown = sum(1 for line in text.splitlines() if " while(" in line and "known_trip_count" not in line)
    if unknown:
        rec.warn(f"{state.name}: {unknown} loop(s) with a trip count XLA could not prove; FLOPs per step count their bodies by the trips measured in the trace window, or once if no traced step runs them (the report's Compute section says which)")
    row["hlo_file"] = hlo_file
    return row


IN_STEP_RATIO = 0.9
"""A program that reads the train state and runs at least this many times per step runs in every
iteration (gradient accumulation's micro-batch program): its FLOPs count into the step's. Rarer
ones (eval) do not, nor do programs that never read the state (data preparation)."""


def calls_per_step(state: FunctionState, step_fn: FunctionState | None) -> int:
    """How many times `state` runs in one training iteration (0: not in every iteration)."""
    if step_fn is None:
        return 0
    if state is step_fn:
        return step_fn.micro_batches or 1  # optax.MultiSteps: k calls make one update
    if not state.reads_state:
        return 0
    ratio = state.calls_in_steps / step_fn.calls_in_steps if step_fn.calls_in_steps else 0.0
    return round(ratio) if ratio >= IN_STEP_RATIO else 0


def analyse_programs(functions: list[FunctionState], step_fn: FunctionState | None, rec: Recorder, jax: Any) -> list[dict[str, Any]]:
    """Rows for the step function and the most-called other programs run during steps."""
    others = sorted((f for f in functions if f is not step_fn and f.calls_in_steps > 0), key=lambda f: -f.calls_in_steps)
    chosen = ([step_fn] if step_fn is not None else []) + others
    rows = []
    for state in chosen[:MAX_PROGRAMS]:
        if state.abstract_args is None:
            continue
        try:
            row = analyse_program(state, is_step=state is step_fn, rec=rec, jax=jax)
            row["calls_per_step"] = calls_per_step(state, step_fn)
            rows.append(row)
        except Exception as exc:  # a program that no longer lowers must not lose the run
            rec.warn(f"XLA analysis of {state.name} failed ({type(exc).__name__}: {str(exc)[:200]})")
    return rows
