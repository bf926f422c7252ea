"""Finds the training step among a script's jitted functions, and times steps by device completion.

`jax.jit` is wrapped (for the recording only) so each top-level call of a jitted function is seen.
The step function is the one that consumes its own previous outputs (the train state it carries from
call to call); among several, the one carrying the most arrays. Until it is known, each function's
call times are buffered, then written as steps retroactively.

Device time, not dispatch time: before a function is dispatched again (and at every step boundary)
the recorder waits for the previous outputs to be ready. At most one step is in flight, so host
work between steps still overlaps the device; what it costs is one exposed dispatch per step.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

from tpu_perf.collectors.session import Recorder

MAX_BUFFERED_CALLS = 100_000
"""Call times kept per function before the step function is known (a few MB at most)."""

CARRIES_TO_DECIDE = 2
"""Calls that consumed the previous call's outputs before a function is taken as the step."""


@dataclass(eq=False)
class FunctionState:
    """What the recorder knows of one jitted function."""

    name: str
    jitted: Any
    calls: int = 0
    calls_in_steps: int = 0
    carry_calls: int = 0
    carried_leaves: int = 0
    starts: list[float] = field(default_factory=list)
    pending: Any = None
    out_ids: frozenset[int] = frozenset()
    abstract_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None


def _leaves_ready(leaves: list[Any]) -> None:
    """Block until one execution's outputs are ready; they share one completion event."""
    for leaf in leaves:
        if not leaf.is_deleted():
            leaf.block_until_ready()
            return


class JitTracker:
    """Owns the wrapped `jax.jit` and the per-function states of one recording."""

    def __init__(self, recorder: Recorder, jax: Any) -> None:
        self.rec = recorder
        self.jax = jax
        self.functions: list[FunctionState] = []
        self.step_fn: FunctionState | None = None
        self._lock = threading.Lock()
        self._compiles = 0
        from jax._src import core

        self._clean = getattr(core, "trace_state_clean", None)
        self._tracer = jax.core.Tracer
        self._array = jax.Array

    # -- wrapping -------------------------------------------------------------------------------
    def wrap_jit(self, original_jit: Any) -> Any:
        tracker = self

        @functools.wraps(original_jit)
        def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
            if fun is None:  # @jax.jit(static_argnums=...) style
                return lambda f: jit(f, *args, **kwargs)
            jitted = original_jit(fun, *args, **kwargs)
            name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun)
            state = FunctionState(name=str(name), jitted=jitted)
            with tracker._lock:
                tracker.functions.append(state)
            return TrackedJit(jitted, state, tracker)

        jit.__tpu_perf_original__ = original_jit  # type: ignore[attr-defined]
        return jit

    def note_compile(self) -> None:
        self._compiles += 1

    # -- per call -------------------------------------------------------------------------------
    def call(self, state: FunctionState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._clean is not None and not self._clean():
            return state.jitted(*args, **kwargs)  # called while tracing another function
        rec = self.rec
        arg_leaves = self.jax.tree_util.tree_leaves((args, kwargs))
        if self._clean is None and any(isinstance(x, self._tracer) for x in arg_leaves):
            return state.jitted(*args, **kwargs)
        if state is self.step_fn:
            rec.boundary(self.source)
        else:
            self._sync_one(state)
            if self.step_fn is None and len(state.starts) < MAX_BUFFERED_CALLS:
                state.starts.append(rec.now())
        carried = sum(1 for x in arg_leaves if id(x) in state.out_ids) if state.out_ids else 0
        compiles_before = self._compiles
        out = state.jitted(*args, **kwargs)
        out_leaves = [x for x in self.jax.tree_util.tree_leaves(out) if isinstance(x, self._array)]
        state.pending = out_leaves
        state.out_ids = frozenset(map(id, out_leaves)) if self.step_fn is None else frozenset()
        state.calls += 1
        if rec.steps.source is not None:
            state.calls_in_steps += 1
        if state.abstract_args is None or self._compiles != compiles_before:
            state.abstract_args = self._abstract(args, kwargs)
        if carried and self.step_fn is None:
            state.carry_calls += 1
            state.carried_leaves = max(state.carried_leaves, carried)
            if state.carry_calls >= CARRIES_TO_DECIDE:
                self._decide()
        return out

    @property
    def source(self) -> str:
        return f"auto:jit({self.step_fn.name})" if self.step_fn else "auto:jit"

    def _decide(self) -> None:
        candidates = [f for f in self.functions if f.carry_calls > 0]
        self.step_fn = max(candidates, key=lambda f: (f.carried_leaves, f.calls))
        for f in self.functions:
            f.out_ids = frozenset()
        self.rec.backfill(self.source, self.step_fn.starts)
        self.step_fn.starts = []

    def fallback(self) -> None:
        """At the end of a run with no carried state: take the most-called function as the step."""
        if self.step_fn is not None or self.rec.steps.source is not None:
            return
        called = [f for f in self.functions if len(f.starts) >= 2]
        if not called:
            return
        self.step_fn = max(called, key=lambda f: len(f.starts))
        self.rec.warn(f"no jitted function carried state between calls; took the most-called one, {self.step_fn.name}, as the step (mark steps with tpu_perf.step() to be sure)")
        self.rec.backfill(self.source, self.step_fn.starts)

    # -- device sync ----------------------------------------------------------------------------
    def _sync_one(self, state: FunctionState) -> None:
        pending, state.pending = state.pending, None
        if pending:
            _leaves_ready(pending)

    def sync_all(self) -> None:
        for state in list(self.functions):
            if state.pending:
                self._sync_one(state)

    def _abstract(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        jax = self.jax

        def spec(x: Any) -> Any:
            if isinstance(x, jax.Array):
                return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if hasattr(x, "shape") and hasattr(x, "dtype"):
                return jax.ShapeDtypeStruct(x.shape, x.dtype)
            return x

        return jax.tree_util.tree_map(spec, args), jax.tree_util.tree_map(spec, kwargs)


class TrackedJit:
    """Behaves like the jitted function it wraps; calls go through the tracker."""

    __slots__ = ("_jitted", "_state", "_tracker", "__dict__")

    def __init__(self, jitted: Any, state: FunctionState, tracker: JitTracker) -> None:
        self._jitted = jitted
        self._state = state
        self._tracker = tracker
        functools.update_wrapper(self, jitted, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracker.call(self._state, args, kwargs)

    def __getattr__(self, name: str) -> Any:  # lower, trace, eval_shape, clear_cache, ...
        return getattr(self._jitted, name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # jitted methods
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<tpu-perf tracked {self._jitted!r}>"
