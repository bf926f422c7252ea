"""Generation in a Python loop over jitted functions: a prefill, then a decode step per token.

flax's lm1b-style decoding (and most hand-written JAX servers) run a jitted `prefill` on the prompt,
then call a jitted `decode_step` once per new token, carrying (and donating) the KV cache from call
to call. The decode step is the step function the tracker finds (it consumes its own outputs); a new
request is where it starts again from another function's outputs and from none of its own: that
other function's call is the request's prefill, its outputs' readiness the first token.

Each such restart is kept; at the end, those whose consumer is the step function are written as
`requests` rows with their prefill's dispatch and first-token times and prompt shape; the decode
steps that follow each (the steps table) are its tokens (analyzers/inference.py). One restart is an
initialisation (a jitted init before a training loop), not serving: at least `MIN_REQUESTS` are
needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_REQUESTS = 2
"""Restarts of the step function from another function's outputs before they are called requests."""


@dataclass
class _Producer:
    state: Any
    """The `FunctionState` of the call."""
    start: float
    out_ids: frozenset[int]
    leaf: Any
    """Its smallest output, to wait on for the first token."""
    prompt: tuple[int, int] | None
    """(rows, tokens) of its largest integer argument of rank 2: the prompt's token ids."""


@dataclass(frozen=True)
class Restart:
    consumer: Any
    producer: str
    start: float
    first_token: float
    prompt: tuple[int, int] | None


class PrefillWatch:
    """Sees every top-level call of a jitted function (`JitTracker.call`) and keeps the restarts."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.last: _Producer | None = None
        """The last call, when it was not the step function's (the tracker checks it first)."""
        self.restarts: list[Restart] = []

    def before(self, state: Any, leaves: list[Any]) -> None:
        """Before `state`'s call, another function's call came last: when this call takes its outputs
        and none of its own, that call was a prefill; wait for its outputs (the first token)."""
        last = self.last
        if last is None or last.state is state:
            return
        self.last = None
        ids = {id(x) for x in leaves}
        if ids.isdisjoint(last.out_ids) or not ids.isdisjoint(state.out_ids):
            return
        try:
            last.leaf.block_until_ready()
        except Exception:  # noqa: BLE001 -- deleted or failed: its readiness is unknown, now is an upper bound
            pass
        self.restarts.append(Restart(state, last.state.name, last.start, self._now(), last.prompt))

    def after(self, state: Any, start: float, arg_leaves: list[Any], out_leaves: list[Any]) -> None:
        """After a call of `state`, not the step function (dispatched at `start`): keep what a
        following restart needs."""
        if not out_leaves:
            self.last = None
            return
        smallest = min(out_leaves, key=lambda x: getattr(x, "nbytes", 0))
        self.last = _Producer(state, start, frozenset(map(id, out_leaves)), getattr(smallest, "_base_array", smallest), _prompt(arg_leaves))

    def rows(self, step_fn: Any, source: str) -> list[dict[str, Any]]:
        """`requests` rows of the step function's restarts (none below `MIN_REQUESTS`)."""
        mine = [r for r in self.restarts if r.consumer is step_fn]
        if step_fn is None or len(mine) < MIN_REQUESTS:
            return []
        return [{
            "request": i,
            "source": f"{source}; prefill jit({r.producer})",
            "start_time_s": r.start,
            "first_token_time_s": r.first_token,
            "end_time_s": None,
            "prompt_tokens": None if r.prompt is None else r.prompt[1],
            "sequences": 1 if r.prompt is None else r.prompt[0],
            "generated_tokens": None,
            "token_steps": None,
            "prompt_positions": None if r.prompt is None else r.prompt[1] // max(1, r.prompt[0]),
        } for i, r in enumerate(mine)]


def _prompt(leaves: list[Any]) -> tuple[int, int] | None:
    """(rows, tokens) of the largest integer array of rank 2 among a call's arguments."""
    best = None
    for x in leaves:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is not None and len(shape) == 2 and getattr(dtype, "kind", "") in ("i", "u") and (best is None or shape[0] * shape[1] > best[1]):
            best = (int(shape[0]), int(shape[0]) * int(shape[1]))
    return best
