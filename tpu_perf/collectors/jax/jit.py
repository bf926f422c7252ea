"""Finds the training step among a script's jitted functions, and times it by device completion.

`jax.jit` is wrapped (for the recording only) so each top-level call of a jitted function is seen.
The step function is the one that consumes its own previous outputs (the train state it carries from
call to call); among several, the one carrying the most arrays. Until it is known, every function's
calls are timed, then the step function's are written as steps retroactively.

A step is the iteration: it runs from one dispatch of the step function to the next (the step
tracker tiles them), so host work between calls (input, `float(loss)`, logging) is in it. Beside it,
each call's outputs are watched (see `ready.py`) and the device counts as busy from its dispatch to
the moment they became ready; a step's `device_s` is the busy time inside its iteration. Nothing
waits for a step before the next is dispatched: the script queues steps ahead as under plain python.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tpu_perf.collectors.jax import at_peak, callers, choice, recompiles
from tpu_perf.collectors.jax.prefill import PrefillWatch, carries, carry_paths
from tpu_perf.collectors.jax.ready import (
    Call,
    ReadyWatcher,
    SyncStamper,
    block_ready,
    is_ready_now,
    waitable,
)
from tpu_perf.collectors.jax.wrappers import OuterCalls
from tpu_perf.collectors.session import Recorder

MAX_BUFFERED_CALLS = 100_000
"""Call spans kept per function before the step function is known (a few MB at most)."""

CARRIES_TO_DECIDE = 2
"""Calls that consumed the previous call's outputs before a function is taken as the step."""

OCCASIONAL = 0.5
"""A jitted function called less than this often per step, between steps, is an eval (or another
occasional program): the step after it is flagged `interleaved`."""

Span = tuple[float, float, bool, bool, bool, float | None]
"""(dispatch time, outputs-ready time, traced, ready time seen exactly, holds the trace window's start or stop)."""


@dataclass(eq=False)
class FunctionState:
    """What the recorder knows of one jitted function."""

    name: str
    jitted: Any
    calls: int = 0
    calls_in_steps: int = 0
    carry_calls: int = 0
    carried_leaves: int = 0
    fetched_calls: int = 0
    """Calls whose outputs the script fetched to the host (`float(loss)`, ...): host syncs, once per call."""
    fetched_at: int = -1
    spans: list[Span] = field(default_factory=list)
    pending: Call | None = None
    out_ids: frozenset[int] = frozenset()
    out_refs: dict[int, Any] = field(default_factory=dict)
    """Weak references to the last outputs by id: an id in `out_ids` whose object died may be a new
    object's (CPython reuses addresses: a scalar token freed, then a new position array)."""
    prev_out_ids: frozenset[int] = frozenset()
    """The call before's: a fetch of those one call behind (logging the last loss) is no fetch of the latest."""
    indexed_ids: set[int] = field(default_factory=set)
    """Arrays indexed or sliced from the latest call's outputs (`token[0]`), at `indexed_at` calls."""
    indexed_at: int = -1
    donated_outputs: set[int] = field(default_factory=set)
    """Positions of outputs seen donated to a later call before they were ready (the train state):
    the watcher watches another output, which stays alive until it is stamped."""
    watched: tuple[tuple[int, int, int], int] | None = None
    """(output count, donated positions known, compiles) when the watched output was last chosen,
    and its position: chosen again only when one of them changes, not per call (reading every
    output's size was most of the hook's Python work for a train state of many arrays)."""
    abstract_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    fun: Any = None
    """The Python function given to `jax.jit`, and the keywords it was given (`record --topology` re-jits it)."""
    jit_kwargs: dict[str, Any] = field(default_factory=dict)
    breaks: int = 0
    accumulator: bool = False
    prev_in_ids: frozenset[int] = frozenset()
    last_end: float | None = None
    reads_state: bool = False
    """It consumed the step function's outputs (the train state): a micro-batch program, or an eval."""
    kind: str = "jit"
    """`jit`, `pmap`, or `aot` (a `jit(f).lower(...).compile()` result the script calls)."""
    wrapper: str | None = None
    """The installed package that called `jax.jit` for the script (`equinox` for `eqx.filter_jit`,
    `flax` for `nnx.jit`); None when the script called it: fixes name the API the script uses."""
    compiled: Any = None
    """For `aot`: the script's own compiled program (its cost analysis is the step's)."""
    micro_batches: int | None = None
    """Calls per optimizer update when the function accumulates gradients itself (optax.MultiSteps
    traced inside it); 0: it does, with a schedule tpu-perf cannot read; None: it does not."""
    accumulated_by: str | None = None
    """What accumulates: `optax.MultiSteps`, `keras gradient_accumulation_steps`."""


@dataclass
class _Group:
    """Calls of an accumulating step function that make one optimizer update (one step)."""

    start: float
    traced: bool
    exact: bool
    interleaved: bool
    end: float = 0.0
    calls: int = 0
    instrumented: bool = False
    cpu: float | None = None
    """The process's CPU time at the first call's dispatch (the step's `cpu`)."""


class JitTracker:
    """Owns the wrapped `jax.jit` and the per-function states of one recording."""

    def __init__(self, recorder: Recorder, jax: Any) -> None:
        self.rec = recorder
        self.jax = jax
        self.functions: list[FunctionState] = []
        self.step_fn: FunctionState | None = None
        self.stamper = SyncStamper(recorder.now, recorder.steps.waited, self._synced)
        self.stamper.on_fetch = self._fetched
        self.stamper.in_flight = self._in_flight
        self.stamper.on_index = self._indexed
        self._lock = threading.Lock()
        self._compiles = 0
        self._ready: list[Call] = []
        self.watcher = ReadyWatcher(recorder.now, self._finished, self.stamper.wait_unseen)
        recorder.traced_in_flight = self.watcher.traced_pending
        self._multi: bool | None = None
        self._lost: dict[int, list[Call]] = {}
        """Per function (id of its state), calls whose outputs were donated before seen ready."""
        self._step_index = 0  # index of the next step-function call (spans are written later)
        self._drain_lock = threading.Lock()
        self._interleaved = False
        self._group: _Group | None = None
        self.tracing: FunctionState | None = None
        """The function whose call is under way (it is being traced if it compiles now)."""
        self.provisional: FunctionState | None = None
        """The function whose calls opened the trace window before any step was known (`_leads`)."""
        self.discard_trace: Callable[[], None] | None = None
        """Deletes tpu-perf's own trace files: a window that went to another function than the step is dropped."""
        from jax._src import core

        self.outer = OuterCalls(recorder.now, recorder.called)
        self.prefills = PrefillWatch(recorder.now)
        """A prefill before each run of decode steps: generation requests (prefill.py)."""
        self._carry_paths: tuple[tuple[Any, ...], ...] = ()
        """Where the step function's calls take its own last outputs (prefill.carry_paths)."""
        self._carry_tries = 0
        self.recompiles: list[dict[str, Any]] = []
        """What changed in a function's arguments at each of its compiles after the first (recompiles.py)."""
        self.oom: tuple[FunctionState, str] | None = None
        """The function whose call ran out of device memory, and the error's first line."""
        self._clean = getattr(core, "trace_state_clean", None)
        self._tracer = jax.core.Tracer
        self._array = jax.Array

    # -- wrapping -------------------------------------------------------------------------------
    def wrap_jit(self, original_jit: Any, kind: str = "jit") -> Any:
        """`jax.jit` (or `jax.pmap`, kind `pmap`) whose functions' calls the tracker sees."""
        tracker = self

        def make(fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any], wrapper: str | None) -> Any:
            jitted = original_jit(fun, *args, **kwargs)
            name = getattr(fun, "__name__", None) or getattr(fun, "__qualname__", None) or repr(fun)
            return TrackedJit(jitted, tracker.add(FunctionState(name=str(name), jitted=jitted, fun=fun, jit_kwargs=dict(kwargs), kind=kind, wrapper=wrapper)), tracker)

        @functools.wraps(original_jit)
        def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
            wrapper = _wrapper(sys._getframe(1))
            if fun is None:  # @jax.jit(static_argnums=...) style
                return lambda f: make(f, args, kwargs, wrapper)
            return make(fun, args, kwargs, wrapper)

        return jit

    def add(self, state: FunctionState) -> FunctionState:
        with self._lock:
            self.functions.append(state)
        return state

    def note_compile(self) -> None:
        self._compiles += 1

    @property
    def source(self) -> str:
        """`auto:jit(NAME)`, or `auto:pmap(NAME)` for a step compiled by `jax.pmap` (its fixes differ)."""
        wrapper = "pmap" if self.step_fn is not None and self.step_fn.kind == "pmap" else "jit"
        return f"auto:{wrapper}({self.step_fn.name})" if self.step_fn else "auto:jit"

    # -- per call -------------------------------------------------------------------------------
    def call(self, state: FunctionState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._clean is not None and not self._clean():
            return state.jitted(*args, **kwargs)  # called while tracing another function
        rec, step_fn = self.rec, self.step_fn
        entered = rec.now()
        timed = state is step_fn or step_fn is None
        # The step function's own arguments need no look once it is known: the hot path stays short.
        arg_leaves = [] if (state is step_fn and self._clean is not None) else self.jax.tree_util.tree_leaves((args, kwargs))
        if self._clean is None and any(isinstance(x, self._tracer) for x in arg_leaves):
            return state.jitted(*args, **kwargs)
        if self.prefills.last is not None and self.prefills.last.state is not state:  # another function ran last: a prefill?
            moved_on = self.outer.start or entered  # the script called this (an equinox or nnx wrapper's start, else this call's)
            self.prefills.before(state, arg_leaves or self.jax.tree_util.tree_leaves((args, kwargs)), moved_on)
        carried = sum(1 for x in arg_leaves if id(x) in state.out_ids) if (state.out_ids and step_fn is None) else 0
        restarted = None  # the leaves of a call that starts again from none of its own outputs: a prefill by the same function?
        if step_fn is None:
            choice.observe(state, arg_leaves, state.out_ids)
            if self.prefills.pending:
                self.prefills.confirm(state, arg_leaves)
            restarted = None if carried else arg_leaves
        elif state is step_fn:
            restarted = self._restarted(state, args, kwargs, arg_leaves)
        if timed and self._holds_back():  # a multi-process job: the host waits where the device does (own work vs waits)
            blocked = rec.now()
            self._wait(state)
            rec.steps.waited(blocked, rec.now())
        stopped_at = None
        if state is step_fn:
            k = step_fn.micro_batches or 1
            if self._step_index % k == 0:
                if not self._trace_live():  # no window to open or close: no trace state read per step
                    rec.before_step(self._step_index // k)
                else:
                    tracing, before = rec.trace_active or rec.trace_held, rec.now()
                    rec.before_step(self._step_index // k)
                    if tracing and not (rec.trace_active or rec.trace_held):  # the trace stopped here: its cost is this step's, not the last traced one's
                        stopped_at = before
                    elif not tracing and rec.trace_active:  # it started here: its cost ends the previous step's iteration
                        self._instrument_current()
            self._step_index += 1
        elif step_fn is None and self._leads(state):  # no state carried yet: the fallback's step drives the window
            tracing, before = rec.trace_active or rec.trace_held, rec.now()
            rec.before_step(state.calls)
            if rec.trace_active:
                self.provisional = state
            if tracing and not (rec.trace_active or rec.trace_held):
                stopped_at = before
            elif not tracing and rec.trace_active:
                self._instrument_last(state)
        elif step_fn is not None:
            if state.calls_in_steps < OCCASIONAL * step_fn.calls_in_steps:
                self._interleaved = True  # an eval between steps: the next step's iteration holds it
            if not state.reads_state and step_fn.out_ids:
                state.reads_state = any(id(x) in step_fn.out_ids for x in arg_leaves)
        traced = self._trace_live() and rec.trace_active
        compiles_before = self._compiles
        dispatched = rec.now()
        cpu = time.process_time() if timed else None  # the step's CPU clock, read where its dispatch starts (not where its span is delivered)
        start = self._start(state, dispatched) if stopped_at is None else stopped_at
        if restarted is not None:
            self.prefills.self_restart(state, start, restarted)
        self.tracing = state
        try:
            out = state.jitted(*args, **kwargs)
        except Exception as exc:  # out of device memory: keep what it takes to explain it (at_peak.py)
            if self.oom is None and at_peak.out_of_memory(exc):
                state.abstract_args, self.oom = self._abstract(args, kwargs), (state, at_peak.out_of_memory(exc))
            raise
        finally:
            self.tracing = None
        rec.steps.waited(dispatched, rec.now())  # dispatch blocks once the device's queue is full
        out_leaves = [x for x in self.jax.tree_util.tree_leaves(out) if isinstance(x, self._array)]
        if state is step_fn:  # the hot path: nothing to keep
            self.prefills.last = None
        else:
            self.prefills.after(state, start, arg_leaves, out_leaves)  # its start: the script's call (an nnx or equinox wrapper's), not the inner dispatch
        state.calls += 1
        if rec.steps.source is not None:
            state.calls_in_steps += 1
        if state.abstract_args is None or self._compiles != compiles_before:
            new = self._abstract(args, kwargs, sharded=state.kind != "pmap")
            if state.abstract_args is not None and len(self.recompiles) < recompiles.MAX_KEPT:  # compiled again: say what changed
                try:
                    kind, what = recompiles.cause(state.abstract_args, new, state.fun, state.jit_kwargs, self.jax, state.wrapper)
                except Exception as exc:  # noqa: BLE001 -- an argument the comparison cannot read: the script must not fail for it
                    kind, what = "unknown", f"not compared ({type(exc).__name__})"
                self.recompiles.append({"function": f"{'pmap' if state.kind == 'pmap' else 'jit'}({state.name})", "time_s": rec.now(), "kind": kind, "what": what})
            state.abstract_args = new
        if timed:
            state.prev_out_ids, state.out_ids = state.out_ids, frozenset(map(id, out_leaves))
            if state is step_fn or step_fn is None:
                state.out_refs = {id(x): weakref.ref(x) for x in out_leaves}
            position = self._watched_position(state, out_leaves)
            call = Call(state, start, traced, state.out_ids, [waitable(out_leaves[position])] if out_leaves else [], position=position, cpu=cpu)
            if state is step_fn:
                call.interleaved, self._interleaved = self._interleaved, False
            call.instrumented = stopped_at is not None
            state.pending = call
            self.stamper.track(call)
            self.watcher.watch(call)
        if carried and step_fn is None:
            state.carry_calls += 1
            state.carried_leaves = max(state.carried_leaves, carried)
            chosen = choice.ready(self.functions, CARRIES_TO_DECIDE)
            if chosen is not None:
                self._decide(chosen)
        rec.steps.called(min(start, entered), rec.now())  # the call's host time (wrappers, flattening, dispatch, tpu-perf's own) is not the loop's
        return out

    def _trace_live(self) -> bool:
        """Whether a trace window is still to open, open or held: else the per-call hook reads no
        trace state (four property reads a step; the steps' `waited`/`called` are the tracker's own)."""
        trace = self.rec.trace
        return trace is not None and (trace.active or not trace.done)

    def _synced(self) -> None:
        """After each sync of the script: a trace held open for traced device work may stop there."""
        if self.rec.trace is not None:
            self.rec.release_held_trace(self._instrument_current)

    def _watched_position(self, state: FunctionState, out_leaves: list[Any]) -> int:
        """The output to watch: the smallest, so that watching it keeps little memory alive, of those
        not seen donated to a later call (a donated one is deleted before it is seen ready, and the
        call is then stamped late). One completion event serves them all, so any would do; the
        choice is kept until the outputs, the donated ones or the compiled programs change."""
        key = (len(out_leaves), len(state.donated_outputs), self._compiles)
        if state.watched is not None and state.watched[0] == key:
            return state.watched[1]
        kept = [i for i in range(len(out_leaves)) if i not in state.donated_outputs] or range(len(out_leaves))
        position = min(kept, key=lambda i: getattr(out_leaves[i], "nbytes", 0)) if out_leaves else -1
        state.watched = (key, position)
        return position

    def _instrument_current(self) -> None:
        """Flag the step whose iteration is under way (the one before the step being dispatched, or
        the one a sync stopped the trace in): its last call if not yet turned into a step, else the
        group or step still open for its end."""
        with self._lock:
            prev = self.step_fn.pending if self.step_fn is not None else None
            if prev is not None and not prev.drained:
                prev.instrumented = True
            elif self._group is not None:
                self._group.instrumented = True
            else:
                self.rec.steps.mark_current_instrumented()

    def _leads(self, state: FunctionState) -> bool:
        """Whether `state`'s calls drive the trace window while no step is known: nothing has carried
        state between calls (a predict loop, a loop synced by `np.asarray`) and it is the most-called
        function, the one `fallback` takes as the step at the end. Without this such a step was
        found only after the run, too late for a trace window."""
        trace = self.rec.trace
        if self.rec.steps.source is not None and self.provisional is not None:  # marked steps came after all
            self._rearm("before the script's first marked step")
        if trace is None or trace.done or self.rec.steps.source is not None:
            return False
        if self.provisional is not None and self.provisional is not state:
            return False  # one function's call indices open and close the window
        if state.calls < 1 or any(f.carry_calls for f in self.functions):  # called twice at least, as the fallback's step
            return False
        return all(state.calls >= f.calls for f in self.functions if f is not state)

    def _rearm(self, when: str) -> None:
        """The window went to another function's calls (an eval before training): drop that trace,
        when it is closed, so the step's own calls open the window again; else say so."""
        trace, name, self.provisional = self.rec.trace, self.provisional.name if self.provisional else "?", None
        if trace is not None and trace.done and not trace.active and self.discard_trace is not None:
            self.discard_trace()
            trace.done = False
            return
        self.rec.warn(f"the trace window opened on calls of {name} (called most while no function carried state), {when}; its steps may be untraced")

    def _instrument_last(self, state: FunctionState) -> None:
        """The trace started at `state`'s call: its cost ends the previous call's iteration."""
        with self._lock:
            prev = state.pending
            if prev is not None and not prev.drained:
                prev.instrumented = True
            elif state.spans:
                start, end, traced, exact, _, cpu = state.spans[-1]
                state.spans[-1] = (start, end, traced, exact, True, cpu)

    def _fetched(self, x: Any, behind: FunctionState | None) -> None:
        """Count a fetch of the latest outputs of a timed function, once per call: `x` itself, or
        (`behind`) an array not ready when fetched while that function's latest call still ran: a
        value computed from its outputs (`int(token[0])`, `np.asarray(logits.argmax())`) waits for
        the call as a fetch of the output does."""
        key = id(x)
        for state in [self.step_fn] if self.step_fn is not None else self.functions:
            if (key in state.out_ids or state is behind or (state.indexed_at == state.calls and key in state.indexed_ids)) and state.fetched_at != state.calls:
                state.fetched_at = state.calls
                state.fetched_calls += 1
                return

    def _indexed(self, x: Any, out: Any) -> None:
        """`out` was indexed or sliced from `x`: if `x` is (or was indexed from) a timed function's
        latest outputs, a fetch of `out` is a fetch of them."""
        key = id(x)
        for state in [self.step_fn] if self.step_fn is not None else self.functions:
            fresh = state.indexed_at == state.calls
            if key in state.out_ids or (fresh and key in state.indexed_ids):
                if not fresh:
                    state.indexed_ids, state.indexed_at = set(), state.calls
                state.indexed_ids.add(id(out))
                return

    def _in_flight(self, x: Any) -> FunctionState | None:
        """The timed function whose latest call was still running when `x` (none of its outputs,
        not ready) was fetched; None when `x` is an output itself (counted as such) or none ran."""
        key = id(x)
        for state in [self.step_fn] if self.step_fn is not None else self.functions:
            if key in state.out_ids or key in state.prev_out_ids or (state.indexed_at == state.calls and key in state.indexed_ids):
                return None
            call = state.pending
            leaves = call.leaves if call is not None and call.end is None else None
            if leaves and not is_ready_now(leaves[0]):
                return state
        return None

    def _start(self, state: FunctionState, now: float) -> float:
        """When the step began: the script's outer call (nnx/equinox host work), not before the
        previous call's outputs were ready."""
        outer = self.outer.take()
        if outer is None:
            return now
        return min(now, max(outer, state.last_end or outer))

    def drain(self) -> None:
        """Turn stamped calls into steps (or buffered spans); called every flush and at the end."""
        with self._drain_lock, self._lock:
            ready = self._ready[:]
            del self._ready[: len(ready)]
            for call in ready:
                call.drained = True
                end = call.end if call.end is not None else call.start
                if call.state is self.step_fn:
                    self._step_span(call.start, end, call.traced, call.exact, call.interleaved, call.instrumented, cpu=call.cpu)
                elif self.step_fn is None and len(call.state.spans) < MAX_BUFFERED_CALLS:
                    call.state.spans.append((call.start, end, call.traced, call.exact, call.instrumented, call.cpu))

    def _holds_back(self) -> bool:
        """In a multi-process job each process waits for its previous step before dispatching the
        next, as before: the hosts' own work and their waits in collectives (the straggler view,
        docs/multihost.md) need the host to block where the device does. A single process never waits."""
        if self._multi is None:
            try:
                multi = self.jax.process_count() > 1
            except Exception:
                multi = False
            if self.step_fn is None and not multi:
                return False  # jax.distributed may start later: asked again until the step is known
            self._multi = multi
        return self._multi

    def _finished(self, call: Call) -> None:
        """From the watcher, in dispatch order: a call whose outputs are ready (or were donated unseen)."""
        state = call.state
        if call.lost or call.donated:
            state.donated_outputs.add(call.position)
        if call.lost:
            self._lost.setdefault(id(state), []).append(call)
            return
        with self._lock:
            for lost in self._lost.pop(id(state), []):  # it ran back to back with this one
                lost.stamp(call.end, exact=False)
                self.rec.steps.device_busy(lost.start, call.end)
                self._ready.append(lost)
            state.last_end = call.end
            self.rec.steps.device_busy(call.start, call.end)
            self._ready.append(call)

    def _wait(self, state: FunctionState) -> None:
        """Finish `state`'s last call: block until its outputs are ready and the watcher has handed it over."""
        pending, state.pending = state.pending, None
        if pending is not None:
            block_ready(pending)
            self.watcher.settle()

    def _restarted(self, state: FunctionState, args: tuple[Any, ...], kwargs: dict[str, Any], leaves: list[Any]) -> list[Any] | None:
        """The arguments' leaves of a step call that takes none of the step's own outputs where its
        calls carry them (it starts again: a request's prefill by the decode step itself,
        prefill.py); else None. A few tuple and dict lookups per call; arguments are flattened only
        at such a call and the one after it."""
        prefills = self.prefills
        if id(state) in prefills.pending:
            prefills.confirm(state, leaves or self.jax.tree_util.tree_leaves((args, kwargs)))
        if not self._carry_paths:
            if self._carry_tries < 3 and state.out_ids:  # where it carries them: learnt on a call that does
                self._carry_tries += 1
                self._carry_paths = carry_paths(args, kwargs, state.out_ids, self._array)
            return None
        if carries(args, kwargs, self._carry_paths, state.out_refs):
            return None
        return leaves or self.jax.tree_util.tree_leaves((args, kwargs))

    def _decide(self, chosen: FunctionState) -> None:
        if self.provisional is not None and self.provisional is not chosen:
            self._rearm(f"before {chosen.name} was found to carry the train state")
        self._wait(chosen)  # its last call's span lands in the buffer, not twice
        self.drain()
        self._adopt(chosen)
        for f in self.functions:
            if f is not chosen:
                f.out_ids, f.out_refs, f.spans = frozenset(), {}, []

    def _adopt(self, chosen: FunctionState) -> None:
        self.step_fn = chosen
        spans, chosen.spans = chosen.spans, []
        self._step_index = len(spans)
        for start, end, traced, exact, instrumented, cpu in spans:
            self._step_span(start, end, traced, exact, False, instrumented, cpu=cpu)

    def _step_span(self, start: float, end: float, traced: bool, exact: bool, interleaved: bool, instrumented: bool = False, *, cpu: float | None = None) -> None:
        """One call of the step function; with accumulation, every k-th call ends a step that
        began at the first call of its group."""
        k = (self.step_fn.micro_batches or 1) if self.step_fn is not None else 1
        g = self._group
        if g is None:
            g = self._group = _Group(start, traced, exact, interleaved, instrumented=instrumented, cpu=cpu)
        else:
            g.traced, g.exact, g.interleaved = g.traced or traced, g.exact and exact, g.interleaved or interleaved
            g.instrumented = g.instrumented or instrumented
        g.calls += 1
        g.end = end
        if g.calls >= k:
            self._group = None
            self.rec.span(self.source, g.start, end, traced=g.traced, device_known=g.exact, interleaved=g.interleaved, busy=True, instrumented=g.instrumented, cpu=g.cpu)

    def accumulates(self, optimizer: Any, by: str) -> None:
        """An accumulating optimizer's update is being traced: the function under way accumulates."""
        from tpu_perf.collectors.jax.accumulation import every_k

        state = self.tracing
        if state is None or state.micro_batches is not None:
            return
        k = every_k(optimizer)
        if k == 1:
            return
        state.micro_batches, state.accumulated_by = (k or 0), by
        if k is None:
            self.rec.warn(f"{state.name}: {by} with a schedule of micro-batches; tpu-perf cannot tell the updates apart, so each call is counted as a step")

    def fallback(self) -> None:
        """At the end of a run with no carried state: take the most-called function as the step."""
        self.sync_all()
        self.drain()
        if self.step_fn is not None or self.rec.steps.source is not None:
            return
        carrier = choice.best(self.functions)
        if carrier is not None:
            self._decide(carrier)
            return
        called = [f for f in self.functions if len(f.spans) >= 2]
        if not called:
            self.rec.warn("no training steps found: no jitted function was called twice at top level; mark steps with tpu_perf.step() or jax.profiler.StepTraceAnnotation")
            return
        chosen = max(called, key=lambda f: len(f.spans))
        self.rec.warn(f"no jitted function carried state between calls; took the most-called one, {chosen.name}, as the step: a loop that keeps no state "
                      "(prediction, evaluation, a decoder that runs a whole request per call) is timed per call (mark steps with tpu_perf.step() to be sure)")
        trace, window = self.rec.trace, self.rec.options.trace_steps
        if trace is not None and window is not None and self.provisional is not None and self.provisional is not chosen:
            self.rec.warn(f"the trace window holds calls of {self.provisional.name}, the most-called function when it opened, not of {chosen.name}, "
                          "taken as the step at the end of the run; mark steps with tpu_perf.step() or jax.profiler.StepTraceAnnotation to trace them")
        elif trace is not None and window is not None and not trace.done and not trace.active:
            self.rec.warn(f"no trace window, so no op tables or breakdown: {chosen.name} was taken as the step at the end of the run, and its "
                          f"{len(chosen.spans)} calls never reached steps {window[0]}:{window[1]}; "
                          "mark steps with tpu_perf.step() or jax.profiler.StepTraceAnnotation to trace them")
        self._adopt(chosen)

    # -- device sync ----------------------------------------------------------------------------
    def sync_all(self) -> None:
        for state in list(self.functions):
            self._wait(state)
        self.watcher.settle()
        self.watcher.end_skipped()
        with self._lock:  # donated unseen with no later call to end them: their end is unknown
            for calls in self._lost.values():
                for lost in calls:
                    lost.stamp(lost.start, exact=False)
                    self._ready.append(lost)
            self._lost.clear()

    def close(self) -> None:
        self.sync_all()
        self.drain()
        g = self._group
        if g is not None and g.calls:  # the run ended inside an update's micro-batches
            self._group = None
            self.rec.span(self.source, g.start, g.end, traced=g.traced, device_known=g.exact, interleaved=g.interleaved, cpu=g.cpu)

    def _abstract(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, sharded: bool = True) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Shapes, dtypes and (unless `sharded` is false: pmap places its own) shardings."""
        jax = self.jax

        def spec(x: Any) -> Any:
            if isinstance(x, jax.Array) and sharded:
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

    def __getattr__(self, name: str) -> Any:  # trace, eval_shape, clear_cache, ...
        return getattr(self._jitted, name)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """The real `Lowered`, whose `compile()` gives a program the tracker sees called (AOT)."""
        lowered = self._jitted.lower(*args, **kwargs)
        return TrackedLowered(lowered, self._state, self._tracker) if self._state.kind != "aot" else lowered

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # jitted methods
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<tpu-perf tracked {self._jitted!r}>"


class TrackedLowered:
    """A `jax.stages.Lowered` whose `compile()` is tracked: calls of the compiled program are steps
    like the jitted function's (one `FunctionState` per compiled program)."""

    __slots__ = ("_lowered", "_state", "_tracker")

    def __init__(self, lowered: Any, state: FunctionState, tracker: JitTracker) -> None:
        self._lowered = lowered
        self._state = state
        self._tracker = tracker

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._lowered.compile(*args, **kwargs)
        s = self._state
        state = FunctionState(name=s.name, jitted=compiled, fun=s.fun, jit_kwargs=s.jit_kwargs, kind="aot" if s.kind == "jit" else s.kind, wrapper=s.wrapper, compiled=compiled)
        return TrackedJit(compiled, self._tracker.add(state), self._tracker)

    def __getattr__(self, name: str) -> Any:  # as_text, cost_analysis, compiler_ir, ...
        return getattr(self._lowered, name)


def _wrapper(frame: FrameType | None) -> str | None:
    """The installed package whose code called `jax.jit` (None: the script's own code)."""
    asker = callers.asker(frame)
    return callers.package(asker) if asker is not None and callers.is_library(asker) else None
