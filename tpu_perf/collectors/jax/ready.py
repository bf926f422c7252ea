"""When did a dispatched computation finish? Stamped when it happens, without holding the script.

- A watcher thread waits on each pending call's outputs in dispatch order, in jaxlib's own
  `block_until_ready` (unwrapped: not counted as the script's sync; the interpreter lock is
  released while it waits), and stamps the moment the wait returns: loops that never sync get
  their device time, and the script's thread never waits for the recorder, so it may queue steps
  ahead exactly as under plain python.
- When the script syncs on an output that was not ready yet (`block_until_ready`, `float(loss)`,
  `np.asarray`, `print`), JAX's sync points are wrapped and stamp the moment the sync returns
  (whichever of the two returns first stamps).
- Outputs donated to a later call before the watcher reached them are `lost`: the call's end is
  taken as the end of the next call of its function that is seen (`exact` False), and the device
  counts as busy from the lost call's dispatch to then (it ran the two back to back).
- Steps far shorter than `MIN_STAMP_GAP_S`, queued back to back, are not each waited on: every
  wait that returns costs the thread that finishes the program a wake-up (on XLA:CPU that thread is
  the "device": 5 us of a 0.36 ms step, measured). A call still running when a later one is already
  queued is skipped while the stamps would come closer than the gap; it ends with the next call
  stamped (`exact` False, no ready stamp) and its device time is the same: the device ran the two
  back to back, so their busy union is the same interval. The pace between stamps stays exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_STAMP_GAP_S = 0.005
"""Closest the watcher's stamps come for calls queued back to back (see the module's docstring):
one wake-up per 5 ms costs a device under 0.1 %; steps of 5 ms or more are each stamped."""

POLL_S = 0.001
"""How often the watcher looks at an output jaxlib cannot wait on directly (none seen so far: a typed
PRNG key is waited on through its data, `waitable`)."""


@dataclass(eq=False)
class Call:
    """One timed dispatch of a jitted function."""

    state: Any
    start: float
    traced: bool
    ids: frozenset[int]
    leaves: list[Any]
    """One output (the smallest not seen donated) watched for readiness, kept only until the call is stamped."""
    position: int = -1
    """The watched output's position among the call's output leaves."""
    end: float | None = None
    exact: bool = True
    """False when `end` is only when tpu-perf looked, not when the outputs became ready."""
    interleaved: bool = False
    """An eval (a jitted function not run every iteration) ran since the previous step."""
    instrumented: bool = False
    """tpu-perf's trace window closed at this call's dispatch: its iteration holds the stop."""
    lost: bool = False
    """Its outputs were deleted (donated) before the watcher reached them."""
    donated: bool = False
    """The watched output was donated to a later call while the watcher waited on it: the call is
    stamped all the same, and its function's calls watch another output from then on."""
    drained: bool = False
    """Turned into a step (or a buffered span): a flag set later would be lost."""
    ready_seen: bool = False
    """The script synced on an output that was ready already: the watcher stamps it when it reaches
    it, without holding the output meanwhile."""
    seq: int = 0
    """Its place in the watcher's dispatch order."""
    cpu: float | None = None
    """The process's CPU time (`time.process_time()`) at its dispatch: the step's `cpu_s` runs from here to the next step's."""

    def stamp(self, t: float, *, exact: bool = True) -> None:
        if self.end is None:
            self.end = t
            self.exact = exact
        self.leaves = []


def waitable(leaf: Any) -> Any:
    """The array jaxlib can look at and wait on for `leaf`: a typed PRNG key array's data (the key
    array itself has neither `is_ready` nor jaxlib's `block_until_ready`)."""
    return getattr(leaf, "_base_array", leaf)


def _on_live_output(call: Call, look: Callable[[Any], Any]) -> tuple[Any, Any] | None:
    """`look` at the first of `call`'s watched outputs not deleted (donated): (that output, what
    `look` returned); None when all are deleted. A computation that failed counts as finished: its
    error is the script's to see, (output, True)."""
    for leaf in list(call.leaves):
        try:
            if leaf.is_deleted():
                continue
            return leaf, look(leaf)
        except RuntimeError as exc:  # deleted between the two looks, or the computation failed
            if "delete" in str(exc).lower():
                continue
            return leaf, True
        except Exception:  # noqa: BLE001 -- whatever jaxlib raises, the recorder must live on
            return leaf, True
    return None


def block_ready(call: Call) -> None:
    """Block until `call`'s outputs are ready (they share one completion event), unless deleted;
    the wrapped sync stamps it if it was pending, else the watcher does."""
    _on_live_output(call, lambda leaf: leaf.block_until_ready())


def readiness(call: Call) -> bool | None:
    """True when the call's outputs are ready, False when not yet, None when all are deleted."""
    if call.ready_seen:
        return True
    looked = _on_live_output(call, lambda leaf: bool(leaf.is_ready()))
    if looked is None:
        return None if call.end is None else True
    return looked[1]


class ReadyWatcher:
    """A daemon thread that stamps calls when their outputs become ready, then hands each to
    `finished` in dispatch order (a call waits for the ones watched before it)."""

    def __init__(self, now: Callable[[], float], finished: Callable[[Call], None], wait: Callable[[Any], None]) -> None:
        self._now = now
        self._wait = wait
        """Blocks until one output is ready without counting as the script's sync."""
        self._finished = finished
        self._cv = threading.Condition()
        self._calls: list[Call] = []
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._skipped: list[Call] = []
        """Calls skipped since the last stamp, handed over (in order) when the next one is stamped."""
        self._last: tuple[int, float] | None = None
        """The last stamped call's `seq` and end."""
        self._pace: float | None = None
        """Seconds per call between the last two stamps of calls that ran back to back."""
        self._alive = False
        """The thread runs (set by it, cleared as it exits): read per call instead of `is_alive()`."""
        self._idle = False
        """The thread waits for a call to watch: only then does a new call need to wake it."""
        self._settling = 0
        """Callers of `settle` waiting: only then does each finished call need to wake them."""

    def watch(self, call: Call) -> None:
        with self._cv:
            self._seq += 1
            call.seq = self._seq
            self._calls.append(call)
            if not self._alive:
                self._alive = True
                self._thread = threading.Thread(target=self._run, name="tpu-perf-ready", daemon=True)
                self._thread.start()
            elif self._idle:  # busy, it takes the next call without being woken (no notify per dispatch)
                self._cv.notify()

    def traced_pending(self) -> bool:
        """Whether a call dispatched inside the trace window is still running (its outputs are
        looked at here: the watcher may not have stamped a finished one yet)."""
        with self._cv:
            calls = [c for c in self._calls if c.traced and c.end is None]
        return any(readiness(c) is False for c in calls)

    def settle(self, timeout_s: float = 600.0) -> None:
        """Block until every watched call is finished (end of the run, the step function chosen)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            self._settling += 1
            try:
                while self._calls and self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
                    self._cv.wait(0.05)
            finally:
                self._settling -= 1

    def end_skipped(self) -> None:
        """At the end of the run, after `settle`: calls skipped before a last call that was lost
        (donated unseen) have nothing to end them; their end is unknown (their dispatch, as a lost
        call's)."""
        with self._cv:
            if self._calls:
                return
            skipped, self._skipped = self._skipped, []
        for call in skipped:
            call.stamp(call.start, exact=False)
            self._finished(call)

    def _run(self) -> None:
        try:
            self._watch_calls()
        finally:
            with self._cv:
                self._alive = False

    def _watch_calls(self) -> None:
        while True:
            with self._cv:
                while not self._calls:
                    self._idle = True
                    self._cv.wait()
                self._idle = False
                call = self._calls[0]  # in dispatch order: a later call cannot finish first
                queued = len(self._calls) > 1
            if call.end is None:
                if queued and self._may_skip(call):
                    call.leaves = []  # not waited on (`MIN_STAMP_GAP_S`): nothing to hold
                    self._skipped.append(call)
                    with self._cv:
                        del self._calls[0]
                    continue
                waited = self._await(call)  # None: all its outputs were deleted (donated) first
                if waited is not None:
                    call.stamp(self._no_later_than_next(self._now()))
                else:
                    call.lost = True
                running = bool(waited)  # a stamp of one found ready is late: no pace from it
            else:
                running = False
            if not call.lost:
                self._stamped(call, running)
            self._finished(call)
            with self._cv:
                del self._calls[0]
                if self._settling:
                    self._cv.notify_all()

    def _no_later_than_next(self, t: float) -> float:
        """`t`, or the end of a later call the script's sync stamped before the watcher woke (a
        watcher behind on a loaded machine): a call finishes before the ones dispatched after it."""
        with self._cv:
            later = next((c.end for c in self._calls[1:] if c.end is not None), None)
        return t if later is None else min(t, later)

    def _may_skip(self, call: Call) -> bool:
        """Whether `call` (a later one is queued) need not be waited on: untraced (the trace window
        is held open while its calls run), still running, and the next stamp would still come within
        `MIN_STAMP_GAP_S` of the last at the pace the device has kept."""
        if call.traced or call.ready_seen or self._pace is None or self._last is None:
            return False
        if (call.seq + 1 - self._last[0]) * self._pace > MIN_STAMP_GAP_S:
            return False
        return readiness(call) is False

    def _stamped(self, call: Call, waited: bool) -> None:
        """`call` has its end: hand over the calls skipped before it, ending with it, and learn the
        pace (`waited`: the watcher waited for it, so its end is when it finished)."""
        assert call.end is not None
        for skipped in self._skipped:
            skipped.stamp(call.end, exact=False)
            self._finished(skipped)
        self._skipped = []
        if waited and call.exact:
            if self._last is not None and call.start <= self._last[1] and call.end > self._last[1]:  # ran back to back with the last
                self._pace = (call.end - self._last[1]) / (call.seq - self._last[0])
            elif self._last is None or call.start > self._last[1]:  # the device idled between: not queued
                self._pace = None
            self._last = (call.seq, call.end)

    def _await(self, call: Call) -> bool | None:
        """Wait for `call`'s outputs (they share one completion event): True when they were still
        running when looked at (so the stamp is when they finished), False when ready already, None
        when all were deleted (donated) before they could be waited on. One look and one wait."""
        if call.ready_seen:
            return False
        waited = _on_live_output(call, self._wait_running)
        if waited is None:
            return None if call.end is None else False
        try:
            call.donated = bool(waited[0].is_deleted())
        except Exception:  # noqa: BLE001 -- the output is gone: nothing to learn from it
            pass
        return waited[1]

    def _wait_running(self, leaf: Any) -> bool:
        """Whether `leaf` was still running (then waited for until ready)."""
        if leaf.is_ready():
            return False
        self._wait(leaf)
        return True


class SyncStamper:
    """Stamps calls whose outputs the script syncs on, by wrapping JAX's sync points."""

    def __init__(self, now: Callable[[], float], waited: Callable[[float, float], None] = lambda start, end: None, synced: Callable[[], None] = lambda: None) -> None:
        self._now = now
        self._waited = waited
        """Told each interval the script spent blocked in a sync: the step's `wait_s`."""
        self._synced = synced
        """Called after each sync returns (a trace held open for traced device work may stop there)."""
        self.unstamped: list[Call] = []
        self._block: Callable[[Any], Any] | None = None
        """jaxlib's own `ArrayImpl.block_until_ready` while the sync points are wrapped."""
        self.on_fetch: Callable[[Any, Any], None] | None = None
        """Called with each array the script fetches to the host (`float`, `np.asarray`, `print`),
        and what `in_flight` said of it before the fetch waited."""
        self.on_index: Callable[[Any, Any], None] | None = None
        """Called with an array and the array an index or slice of it made (`token[0]`): a fetch of
        the second is a fetch of the first's values."""
        self.in_flight: Callable[[Any], Any] = lambda x: None
        """Asked only of an array that was not ready when fetched: the function whose latest call was
        still running then (None if none), so that a fetch of a value computed from its outputs
        (`int(token[0])`) counts as a sync on that call (a device runs its work in order)."""

    def track(self, call: Call) -> None:
        """Watch `call` for syncs; calls stamped (or lost) since are dropped from the front: they end
        in dispatch order, so this stays short and costs the dispatch nothing when steps are queued
        far ahead (rebuilding the list per call was O(steps in flight))."""
        u = self.unstamped
        i = 0
        while i < len(u) and (u[i].end is not None or u[i].lost):
            i += 1
        if i:
            del u[:i]
        u.append(call)

    def release(self, x: Any) -> None:
        """`x` was synced on and was ready already: stop holding its call's output (it is ready)."""
        key = id(x)
        for call in self.unstamped:
            if key in call.ids:
                call.ready_seen = True
                call.leaves = []
                return

    def seen(self, x: Any) -> None:
        if not self.unstamped:
            return
        key = id(x)
        for call in self.unstamped:
            if key in call.ids:
                call.stamp(self._now())
                self.unstamped = [c for c in self.unstamped if c is not call]
                return

    def wait_unseen(self, x: Any) -> None:
        """Block until `x` is ready without counting as the script's sync (the watcher's wait)."""
        try:
            if self._block is None:
                raise TypeError("sync points not wrapped")
            self._block(x)
        except TypeError:  # not a jaxlib array (or nothing wrapped): look until it is ready
            while not x.is_ready():
                time.sleep(POLL_S)

    def install(self, jax: Any) -> Callable[[], None]:
        """Wrap `ArrayImpl.block_until_ready`, `ArrayImpl._value`, `ArrayImpl.__getitem__` and `jax.block_until_ready`."""
        from jax._src import array as array_module

        cls = array_module.ArrayImpl
        original_block = cls.__dict__["block_until_ready"]
        original_value = cls.__dict__["_value"]
        original_getitem = cls.__dict__["__getitem__"]
        original_tree_block = jax.block_until_ready
        stamper = self
        self._block = original_block

        def block_until_ready(self: Any) -> Any:
            start = stamper._now()
            pending = stamper.unstamped and not is_ready_now(self)
            result = original_block(self)
            stamper._waited(start, stamper._now())
            if pending:
                stamper.seen(self)
            elif stamper.unstamped:
                stamper.release(self)
            stamper._synced()
            return result

        def value(self: Any) -> Any:
            start = stamper._now()
            pending = stamper.unstamped and not is_ready_now(self)
            behind = stamper.in_flight(self) if pending else None
            result = original_value.fget(self)
            stamper._waited(start, stamper._now())
            if pending:
                stamper.seen(self)
            elif stamper.unstamped:
                stamper.release(self)
            if stamper.on_fetch is not None:
                stamper.on_fetch(self, behind)
            stamper._synced()
            return result

        def getitem(self: Any, idx: Any, /) -> Any:
            out = original_getitem(self, idx)
            if stamper.on_index is not None:
                stamper.on_index(self, out)
            return out

        def tree_block_until_ready(x: Any) -> Any:
            start = stamper._now()
            leaves = [leaf for leaf in jax.tree_util.tree_leaves(x) if not is_ready_now(leaf)] if stamper.unstamped else []
            result = original_tree_block(x)
            stamper._waited(start, stamper._now())
            for leaf in leaves:
                stamper.seen(leaf)
            stamper._synced()
            return result

        cls.block_until_ready = block_until_ready
        cls._value = property(value)
        getitem.__doc__, getitem.__wrapped__ = original_getitem.__doc__, original_getitem  # type: ignore[attr-defined]
        cls.__getitem__ = getitem
        jax.block_until_ready = tree_block_until_ready
        undo_numpy = _route_numpy(cls)

        def uninstall() -> None:
            cls.block_until_ready = original_block
            cls._value = original_value
            cls.__getitem__ = original_getitem
            jax.block_until_ready = original_tree_block
            undo_numpy()
            stamper._block = None

        return uninstall


def _route_numpy(cls: type) -> Callable[[], None]:
    """`np.asarray(x)` / `np.array(x)` of a jax array read it through jaxlib's C++ buffer protocol,
    never `__array__` or `_value`: the wait for the device in them was nobody's (a predict loop
    synced by `np.asarray` read 6-10 ms of device wait a step as "the loop's own work"). For a jax
    array, these two route through `_value` (wrapped above: the wait is counted and stamps the
    call), as jax's own `__array__` does; any other argument, and any call from another thread than
    the one that installed this (the script's loop), goes straight to numpy: Keras converts each
    batch's logs with `np.array` in a callback thread, which holds no step up."""
    import numpy as np

    originals = {"asarray": np.asarray, "array": np.array}
    loop_thread = threading.get_ident()

    def routed(original: Callable[..., Any]) -> Callable[..., Any]:
        def convert(a: Any, *args: Any, **kwargs: Any) -> Any:
            if type(a) is cls and threading.get_ident() == loop_thread:
                a = a._value
            return original(a, *args, **kwargs)

        convert.__name__, convert.__qualname__, convert.__doc__ = original.__name__, original.__qualname__, original.__doc__
        convert.__wrapped__ = original  # type: ignore[attr-defined]
        return convert

    for name, original in originals.items():
        setattr(np, name, routed(original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(np, name, original)

    return undo


def is_ready_now(x: Any) -> bool:
    """Whether an array's value is ready (a sync on it then returns at once and says nothing of when)."""
    try:
        return bool(x.is_ready())
    except Exception:
        return True
