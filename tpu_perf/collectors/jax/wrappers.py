"""Time what the script calls: the outermost jit wrapper, not only the `jax.jit` inside it.

`flax.nnx.jit` and `equinox.filter_jit` do host work before they dispatch (splitting modules into
state, filtering arrays from static leaves): about 15 % of a small nnx step. Their call methods
are wrapped for the recording so the step starts when the script's call does. `pjit` (the same
function as `jax.jit` in current JAX, bound under its own name) is wrapped like `jax.jit`.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors import imports

OUTER_WRAPPERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("flax.nnx.transforms.compilation", ("JitWrapped", "SimpleJitWrapped", "SimpleJitPartialWrapped")),
    ("equinox._jit", ("_JitWrapper",)),
)
"""Module -> classes whose `__call__` is the call a script makes for a jitted step."""


class OuterCalls:
    """Remembers when the script's outermost call began; the tracker takes it as the dispatch start.
    The whole outer call is the step call's host time (`called`), its work after the inner jit
    returns included (nnx merging the new state back into the modules): not the loop's own work."""

    def __init__(self, now: Callable[[], float], called: Callable[[float, float], None] = lambda start, end: None) -> None:
        self._now = now
        self._called = called
        self._depth = 0
        self.start: float | None = None
        self._undos: list[Callable[[], None]] = []

    def take(self) -> float | None:
        """The outer call's start, once (nested jitted calls inside it get none)."""
        start, self.start = self.start, None
        return start

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        outer = self

        @functools.wraps(call)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            outer._depth += 1
            began = None
            if outer._depth == 1:
                outer.start = began = outer._now()
            try:
                return call(*args, **kwargs)
            finally:
                outer._depth -= 1
                if outer._depth == 0:
                    outer.start = None
                if began is not None:
                    outer._called(began, outer._now())

        return timed_call

    def patch_module(self, module: Any, classes: tuple[str, ...]) -> None:
        for name in classes:
            cls = getattr(module, name, None)
            if cls is None or "__call__" not in vars(cls):
                continue
            original = vars(cls)["__call__"]
            try:
                type.__setattr__(cls, "__call__", self.wrap(original))
            except (TypeError, AttributeError):  # a class that refuses: its steps are timed from the inner jit
                continue
            self._undos.append(functools.partial(type.__setattr__, cls, "__call__", original))

    def install(self) -> Callable[[], None]:
        for module_name, classes in OUTER_WRAPPERS:
            imports.when_imported(module_name, functools.partial(self.patch_module, classes=classes))

        def undo() -> None:
            for step in reversed(self._undos):
                step()
            self._undos.clear()

        return undo


def patch_pjit(jit: Any) -> Callable[[], None]:
    """Point `jax.experimental.pjit.pjit` at the wrapped `jax.jit` (it is imported by name)."""
    try:
        module = importlib.import_module("jax.experimental.pjit")
    except ImportError:
        return lambda: None
    with warnings.catch_warnings():  # reading it warns that pjit is deprecated: the script's business, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        original = getattr(module, "pjit", None)
    if original is None:
        return lambda: None
    module.pjit = jit

    def undo() -> None:
        module.pjit = original

    return undo
