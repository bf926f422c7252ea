"""Functions jitted before the recording began: a notebook's earlier cells.

A script is recorded from its first line, so every `jax.jit` call goes through the recording's
wrapped `jax.jit` (`jit.py`). In a notebook the step was jitted in a cell before `tpu_perf.record`
started, and the object `jax.jit` returned (jaxlib's `PjitFunction`, a C++ type whose calls cannot
be hooked) is already bound to a name. So the recording looks for such objects where the code that
runs next finds them: the namespaces it is given (the cell's globals), the dicts, lists, instance
attributes and closures reachable from there (a train state holding its step, an `nnx.jit` wrapper
holding its inner jit), and modules of the user's own (not installed packages). Each one found is
bound to a tracked wrapper for the length of the recording and put back after it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors.jax.jit import FunctionState, JitTracker, TrackedJit

MAX_DEPTH = 3
"""Containers followed from a namespace: `state.fns["train"]` is depth 2."""

MAX_ITEMS = 10_000
"""Items of one container looked at: a large list of arrays holds no step."""

LIBRARY_FUNCTIONS = frozenset({"jax", "jaxlib", "numpy", "scipy", "tpu_perf"})
"""Packages whose own jitted functions (`jax.nn.relu`, jitted `jnp` functions imported by name) are
never a training step: timing them would only add device syncs to the user's loop."""

NOT_FOLLOWED = frozenset({"IPython", "ipykernel", "traitlets", "zmq", "tornado", "jupyter_client", "asyncio", "logging", "threading", "tpu_perf", "builtins"})
"""Packages whose objects are not followed (the notebook's own machinery: large, and holds no step)."""


def adopt_jitted(tracker: JitTracker, namespaces: list[dict[str, Any]], *, jit_type: type) -> Callable[[], None]:
    """Bind every user function jitted before now, reachable from `namespaces`, to a tracked
    wrapper of `tracker`; returns the undo, which puts back the bindings still holding a wrapper."""
    walk = _Walk(tracker, jit_type)
    for space in namespaces:
        walk.namespace(space)
    return walk.undo


class _Walk:
    def __init__(self, tracker: JitTracker, jit_type: type) -> None:
        self.tracker = tracker
        self.jit_type = jit_type
        self.seen: set[int] = set()
        self.wrapped: dict[int, TrackedJit] = {}
        self.restores: list[Callable[[], None]] = []
        self.user_roots = _user_roots()

    def undo(self) -> None:
        for restore in reversed(self.restores):
            restore()
        self.restores.clear()

    # -- where objects sit ------------------------------------------------------------------------
    def namespace(self, space: dict[str, Any]) -> None:
        if id(space) in self.seen:
            return
        self.seen.add(id(space))
        for key, value in list(space.items())[:MAX_ITEMS]:
            if isinstance(key, str) and key.startswith("_") and key != "__dict__":
                continue  # IPython's _, __, _i3, _oh...: outputs and history, no step
            self.slot(space, key, value, 1)

    def slot(self, container: Any, key: Any, value: Any, depth: int) -> None:
        if type(value) is self.jit_type:
            if _user_function(value):
                self.bind(container, key, value)
        elif depth <= MAX_DEPTH:
            self.follow(value, depth)

    def bind(self, container: Any, key: Any, jitted: Any) -> None:
        tracked = self.wrapped.get(id(jitted))
        if tracked is None:
            fun = getattr(jitted, "__wrapped__", None)
            name = getattr(fun, "__name__", None) or getattr(jitted, "__name__", None) or repr(jitted)
            state = FunctionState(name=str(name), jitted=jitted)
            with self.tracker._lock:
                self.tracker.functions.append(state)
            tracked = self.wrapped[id(jitted)] = TrackedJit(jitted, state, self.tracker)
        try:
            if isinstance(container, types.CellType):
                container.cell_contents = tracked
            else:
                container[key] = tracked
        except (TypeError, ValueError, AttributeError):  # a read-only mapping: left as it is
            return

        def restore() -> None:
            try:
                if isinstance(container, types.CellType):
                    if container.cell_contents is tracked:
                        container.cell_contents = jitted
                elif container[key] is tracked:  # rebound since: the new binding stays
                    container[key] = jitted
            except (KeyError, IndexError, ValueError):  # deleted since: nothing to put back
                pass

        self.restores.append(restore)

    def follow(self, value: Any, depth: int) -> None:
        if id(value) in self.seen or isinstance(value, (str, bytes, int, float, complex, bool, type(None), type)):
            return
        self.seen.add(id(value))
        if isinstance(value, dict):
            for key, item in list(value.items())[:MAX_ITEMS]:
                self.slot(value, key, item, depth + 1)
        elif isinstance(value, list):
            for i, item in enumerate(value[:MAX_ITEMS]):
                self.slot(value, i, item, depth + 1)
        elif isinstance(value, tuple):
            for item in value[:MAX_ITEMS]:
                if type(item) is not self.jit_type:
                    self.follow(item, depth + 1)
        elif isinstance(value, types.FunctionType):
            for cell in value.__closure__ or ():
                try:
                    self.slot(cell, None, cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    continue
        elif isinstance(value, types.ModuleType):
            if self._users(value):
                self.namespace(vars(value))
        elif _package(type(value).__module__) not in NOT_FOLLOWED:
            try:
                attrs = object.__getattribute__(value, "__dict__")
            except AttributeError:
                return
            if isinstance(attrs, dict):
                self.follow(attrs, depth)

    def _users(self, module: types.ModuleType) -> bool:
        """A module of the user's own: its file is not in an installed package or the stdlib."""
        path = getattr(module, "__file__", None)
        return bool(path) and not any(str(path).startswith(root) for root in self.user_roots)


def _package(module: str | None) -> str:
    return (module or "").split(".")[0]


def _user_function(jitted: Any) -> bool:
    fun = getattr(jitted, "__wrapped__", None)
    return _package(getattr(fun, "__module__", None)) not in LIBRARY_FUNCTIONS


def _user_roots() -> tuple[str, ...]:
    """Folders of installed code: the interpreter's prefixes (stdlib and site-packages)."""
    import site

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user_site, str):
        roots.add(user_site)
    return tuple(sorted(roots))
