"""When did a dispatched computation finish? Stamped without a helper thread.

- When the script syncs on an output (`block_until_ready`, `float(loss)`, `np.asarray`, `print`),
  JAX's sync points are wrapped and stamp the moment the sync returns.
- Otherwise the next call of the same function (or the end of the run) waits for the outputs, as
  the device would make it wait anyway, and stamps when they are ready. If they were ready before
  the host came back (a host-bound loop that never syncs), the step lasts until the host returned:
  the iteration time, which is what bounds throughput then.
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
    interleaved: bool = False
    """An eval (a jitted function not run every iteration) ran since the previous step."""

    def stamp(self, t: float) -> None:
        if self.end is None:
            self.end = t
        self.leaves = []


def wait_ready(call: Call, now: Callable[[], float]) -> None:
    """Block until `call`'s outputs are ready (they share one completion event); stamp it if unstamped."""
    if call.end is not None:
        return
    for leaf in call.leaves:
        if not leaf.is_deleted():
            try:
                leaf.block_until_ready()
            except Exception:  # a failed computation ends the step all the same
                pass
            break
    call.stamp(now())


class SyncStamper:
    """Stamps calls whose outputs the script syncs on, by wrapping JAX's sync points."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.unstamped: list[Call] = []

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
            result = original_block(self)
            stamper.seen(self)
            return result

        def value(self: Any) -> Any:
            result = original_value.fget(self)
            stamper.seen(self)
            return result

        def tree_block_until_ready(x: Any) -> Any:
            result = original_tree_block(x)
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
