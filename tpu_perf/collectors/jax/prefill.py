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

Many JAX decoders use one jitted function for both: the prompt through `forward(params, prompt,
cache, 0)` with a fresh cache, then `forward(params, token, cache, position)` per token. Then the
step function's own call that takes none of its own outputs is the prefill (`self_restart`), kept
once the next call confirms it: a decode step feeds fewer positions per row than the prompt did (a
training step restarted on a fresh state feeds the same batch shape again, and is not a request).
Its first token is that call's outputs ready, or the next call's start where later (the token
sampled and fed back), read from the steps table (the call is a step). A loop with no KV cache
feeds the whole sequence again, one position longer a row each call: its calls are one request
until the ids start again shorter (`whole`: analyzers/whole_sequence.py fits their cost).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_perf.collectors.jax.ready import is_ready_now

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
    whole: bool = False
    """Its decode calls feed the whole sequence again, one position longer each (no KV cache)."""


class PrefillWatch:
    """Sees every top-level call of a jitted function (`JitTracker.call`) and keeps the restarts."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.last: _Producer | None = None
        """The last call, when it was not the step function's (the tracker checks it first)."""
        self.restarts: list[Restart] = []
        self.pending: dict[int, Restart] = {}
        """By function: its last call that took none of its own outputs, until its next call confirms it."""
        self._fed: dict[int, tuple[int, int] | None] = {}
        """By function: the (rows, tokens) its last such call fed."""

    def before(self, state: Any, leaves: list[Any], moved_on: float | None = None) -> None:
        """Before `state`'s call, another function's call came last: when this call takes its outputs
        and none of its own, that call was a prefill; its first token is when the script moved on to
        this call (`moved_on`: it had the token by then, fetched or not) where the outputs were
        ready by then, else when they became ready (waited for here)."""
        last = self.last
        if last is None or last.state is state:
            return
        self.last = None
        ids = {id(x) for x in leaves}
        if ids.isdisjoint(last.out_ids) or holds_own(leaves, state.out_refs):
            return
        ready = moved_on is not None and is_ready_now(last.leaf)
        if not ready:
            try:
                last.leaf.block_until_ready()
            except Exception:  # noqa: BLE001 -- deleted or failed: its readiness is unknown, now is an upper bound
                pass
        self.restarts.append(Restart(state, last.state.name, last.start, moved_on if ready and moved_on is not None else self._now(), last.prompt))

    def after(self, state: Any, start: float, arg_leaves: list[Any], out_leaves: list[Any]) -> None:
        """After a call of `state`, not the step function (dispatched at `start`): keep what a
        following restart needs."""
        if not out_leaves:
            self.last = None
            return
        smallest = min(out_leaves, key=lambda x: getattr(x, "nbytes", 0))
        self.last = _Producer(state, start, frozenset(map(id, out_leaves)), getattr(smallest, "_base_array", smallest), _prompt(arg_leaves))

    def self_restart(self, state: Any, start: float, leaves: list[Any]) -> None:
        """`state`'s call dispatched at `start` took none of its own outputs: a prefill by the same
        function, if it fed a prompt (several positions per row) that does not just extend its last
        call's by one position a row (a loop with no cache feeding the whole sequence again), and
        the next call confirms it."""
        prompt = _prompt(leaves)
        last, self._fed[id(state)] = self._fed.get(id(state)), prompt
        if prompt is None or prompt[1] <= prompt[0]:
            return
        if last is not None and _grew(last, prompt):
            return
        self.pending[id(state)] = Restart(state, state.name, start, math.nan, prompt)

    def confirm(self, state: Any, leaves: list[Any]) -> None:
        """The call after `state`'s self-restart: kept when it feeds fewer positions per row (a
        decode step with a cache) or one more (the whole sequence again, with the new token)."""
        restart = self.pending.pop(id(state), None)
        if restart is None or restart.prompt is None:
            return
        fed = _prompt(leaves)
        if fed is not None and _grew(restart.prompt, fed):
            self.restarts.append(dataclasses.replace(restart, whole=True))
        elif fed is None or fed[1] // max(1, fed[0]) < restart.prompt[1] // max(1, restart.prompt[0]):
            self.restarts.append(restart)

    def rows(self, step_fn: Any, source: str) -> list[dict[str, Any]]:
        """`requests` rows of the step function's restarts (none below `MIN_REQUESTS`)."""
        mine = [r for r in self.restarts if r.consumer is step_fn]
        if step_fn is None or len(mine) < MIN_REQUESTS:
            return []
        return [{
            "request": i,
            "source": f"{source}; prefill jit({r.producer})",
            "start_time_s": r.start,
            "first_token_time_s": None if math.isnan(r.first_token) else r.first_token,
            "end_time_s": None,
            "prompt_tokens": None if r.prompt is None else r.prompt[1],
            "sequences": 1 if r.prompt is None else r.prompt[0],
            "generated_tokens": None,
            "token_steps": None,
            "prompt_positions": None if r.prompt is None else r.prompt[1] // max(1, r.prompt[0]),
            "whole_sequence": r.whole,
        } for i, r in enumerate(mine)]


def _prompt(leaves: list[Any]) -> tuple[int, int] | None:
    """(rows, tokens) of the largest integer array of rank 2 among a call's arguments; else of the
    longest of rank 1, one row (a single prompt's ids, as equinox models take them)."""
    best = vector = None
    for x in leaves:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or getattr(dtype, "kind", "") not in ("i", "u"):
            continue
        if len(shape) == 2 and (best is None or shape[0] * shape[1] > best[1]):
            best = (int(shape[0]), int(shape[0]) * int(shape[1]))
        elif len(shape) == 1 and shape[0] > 1 and (vector is None or shape[0] > vector[1]):
            vector = (1, int(shape[0]))
    return best or vector


def _grew(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """`after` is `before`'s rows, each one position longer: the same request's next token."""
    return after[0] == before[0] and after[1] == before[1] + before[0]


def carry_paths(args: tuple[Any, ...], kwargs: dict[str, Any], own: frozenset[int], array: type) -> tuple[tuple[Any, ...], ...]:
    """Paths (through tuples, lists and dicts) to one of a function's own last outputs in each of its
    arguments that holds one: what `carries` looks at per call, with no flattening."""

    def find(obj: Any, path: tuple[Any, ...], depth: int) -> tuple[Any, ...] | None:
        if isinstance(obj, array):
            return path if id(obj) in own else None
        items = enumerate(obj) if isinstance(obj, (tuple, list)) else obj.items() if isinstance(obj, dict) else ()
        for key, value in items if depth < 4 else ():
            found = find(value, (*path, key), depth + 1)
            if found is not None:
                return found
        return None

    found = [find(a, (i,), 0) for i, a in enumerate(args)] + [find(a, (k,), 0) for k, a in kwargs.items()]
    return tuple(p for p in found if p is not None)


def holds_own(leaves: list[Any], refs: dict[int, Any]) -> bool:
    """Whether `leaves` hold one of a function's last outputs (`refs`: weak references by id; an id
    alone may be a dead output's, reused by a new object)."""
    for x in leaves:
        ref = refs.get(id(x))
        if ref is not None and ref() is x:
            return True
    return False


def carries(args: tuple[Any, ...], kwargs: dict[str, Any], paths: tuple[tuple[Any, ...], ...], own: dict[int, Any]) -> bool:
    """Whether this call takes one of the function's own last outputs (`own`: weak references by
    id) where its calls carry them."""
    for path in paths:
        obj: Any = args if isinstance(path[0], int) else kwargs
        try:
            for key in path:
                obj = obj[key]
        except (IndexError, KeyError, TypeError):
            continue
        ref = own.get(id(obj))
        if ref is not None and ref() is obj:
            return True
    return False
