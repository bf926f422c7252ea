"""Which jitted function is the training step, when several carry state from call to call.

The step carries the train state: it consumes its own previous outputs. With gradient accumulation
two functions do: a micro-batch function called N times that carries the gradient sum, and an apply
function that carries the parameters and optimizer state. The micro-batch function is recognised
by what it reads: the same parameter arrays on every call (something else updates them), with the
shapes of what it carries (gradients have the parameters' shapes). It is never taken as the step
while another function carries state; the step is the iteration that ends with the state update,
and the micro-batch programs count into its FLOPs (`calls_per_step` in the programs table).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def observe(state: Any, arg_leaves: list[Any], carried_ids: frozenset[int]) -> None:
    """Update `state`'s evidence from one call made before the step is known."""
    carried = [x for x in arg_leaves if id(x) in carried_ids]
    if state.carry_calls and not carried:
        state.breaks += 1  # the chain restarted: a per-iteration accumulator, not the train state
    if carried and not state.accumulator:
        fixed = [x for x in arg_leaves if id(x) in state.prev_in_ids and id(x) not in carried_ids]
        state.accumulator = _covers(fixed, carried)
    state.prev_in_ids = frozenset(id(x) for x in arg_leaves)


def _covers(fixed: list[Any], carried: list[Any]) -> bool:
    """Whether the unchanged inputs hold an array of every carried shape (parameters vs gradients)."""
    need = Counter(tuple(getattr(x, "shape", ())) for x in carried)
    have = Counter(tuple(getattr(x, "shape", ())) for x in fixed)
    return bool(need) and all(have[shape] >= n for shape, n in need.items())


def rank(state: Any) -> tuple[bool, bool, int, int]:
    """Best step first: not an accumulator, an unbroken chain, most carried arrays, fewest calls."""
    return (not state.accumulator, state.breaks == 0, state.carried_leaves, -state.calls)


def ready(functions: list[Any], min_carries: int) -> Any | None:
    """The function to take as the step now, or None to keep watching."""
    candidates = [f for f in functions if f.carry_calls > 0]
    if not candidates:
        return None
    best = max(candidates, key=rank)
    if best.accumulator or best.carry_calls < min_carries:
        return None
    return best


def best(functions: list[Any]) -> Any | None:
    """At the end of the run: the best candidate whatever the evidence (None if nothing carried)."""
    candidates = [f for f in functions if f.carry_calls > 0]
    return max(candidates, key=rank) if candidates else None
