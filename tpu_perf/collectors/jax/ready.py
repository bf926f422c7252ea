"""When did a dispatched computation finish? Stamped without a helper thread.

- When the script syncs on an output (`block_until_ready`, `float(loss)`, `np.asarray`, `print`),
  JAX's sync points are wrapped and stamp the moment the sync returns.
- Otherwise the next call of the same function (or the end of the run) waits for the outputs, as
  the device would make it wait anyway, and stamps when they are ready. If they were ready before
  that wait began (a host-bound loop that never syncs), when they became ready was not seen: the
  call's device time is unknown (`exact` False), not the host's time passed off as the device's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class Call:
    """One timed dispatch of a jitted function."""

    state: Any
    start: float
    traced: bool
    ids: frozenset[int]
    leaves: list[Any]
    """The outputs, kept only until the call is stamped: holding them longer keeps device buffers alive."""
    end: float | None = None
    exact: bool = True
    """False when `end` is only when tpu-perf looked, not when the outputs became ready."""
    interleaved: bool = False
    """An eval (a jitted function not run every iteration) ran since the previous step."""

    def stamp(self, t: float, *, exact: bool = True) -> None:
        if self.end is None:
            self.end = t
            self.exact = exact
        self.leaves = []


def wait_ready(call: Call, now: Callable[[], float]) -> None:
    """Block until `call`'s outputs are ready (they share one completion event); stamp it if unstamped."""
    if call.end is not None:
        return
    exact = True
    for leaf in call.leaves:
        if not leaf.is_deleted():
            try:
                if leaf.is_ready():  # ready already: it became ready at some moment nobody saw
                    exact = False
                else:
                    leaf.block_until_ready()  # (the wrapped one: it stamps the call when it returns)
            except Exception:  # a failed computation ends the step all the same
                pass
            break
    call.stamp(now(), exact=exact)


class SyncStamper:
    """Stamps calls whose outputs the script syncs on, by wrapping JAX's sync points."""

    def __init__(self, now: Callable[[], float], waited: Callable[[float, float], None] = lambda start, end: None) -> None:
        self._now = now
        self._waited = waited
        """Told each interval the script spent blocked in a sync: the step's `wait_s`."""
        self.unstamped: list[Call] = []
        self.on_fetch: Callable[[Any], None] | None = None
        """Called with each array the script fetches to the host (`float`, `np.asarray`, `print`)."""

    def seen(self, x: Any) -> None:
        if not self.unstamped:
            return
        key = id(x)
        for call in self.unstamped:
            if key in call.ids:
                call.stamp(self._now())
                self.unstamped = [c for c in self.unstamped if c is not call]
                return

    def install(self, jax: Any) -> Callable[[], None]:
        """Wrap `ArrayImpl.block_until_ready`, `ArrayImpl._value` and `jax.block_until_ready`."""
        from jax._src import array as array_module

        cls = array_module.ArrayImpl
        original_block = cls.__dict__["block_until_ready"]
        original_value = cls.__dict__["_value"]
        original_tree_block = jax.block_until_ready
        stamper = self

        def block_until_ready(self: Any) -> Any:
            start = stamper._now()
            result = original_block(self)
            stamper._waited(start, stamper._now())
            stamper.seen(self)
            return result

        def value(self: Any) -> Any:
            start = stamper._now()
            result = original_value.fget(self)
            stamper._waited(start, stamper._now())
            stamper.seen(self)
            if stamper.on_fetch is not None:
                stamper.on_fetch(self)
            return result

        def tree_block_until_ready(x: Any) -> Any:
            start = stamper._now()
            result = original_tree_block(x)
            stamper._waited(start, stamper._now())
            if stamper.unstamped:
                for leaf in jax.tree_util.tree_leaves(x):
                    stamper.seen(leaf)
            return result

        cls.block_until_ready = block_until_ready
        cls._value = property(value)
        jax.block_until_ready = tree_block_until_ready

        def uninstall() -> None:
            cls.block_until_ready = original_block
            cls._value = original_value
            jax.block_until_ready = original_tree_block

        return uninstall
