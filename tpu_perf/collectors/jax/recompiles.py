"""Why a jitted function compiled again: what changed in its arguments since its last compile.

The advice for a recompiling step depends on the cause: a batch whose shape changes wants padding
or buckets, a static argument that takes a new value every call (a step counter in
`static_argnums`) wants to be traced instead, a dtype or sharding change wants the input fixed.
The recorder keeps each function's abstract arguments (shapes, dtypes, shardings; other leaves as
they are) from its last compile; on the next compile the two are compared leaf by leaf.
"""

from __future__ import annotations

import inspect
from typing import Any

MAX_KEPT = 200
"""Recompiles whose cause is kept (run.json `jax.recompile_causes`): a run recompiling every step
keeps the first ones."""


def _names(fun: Any) -> list[str]:
    try:
        return [p.name for p in inspect.signature(fun).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _static(jit_kwargs: dict[str, Any], names: list[str]) -> tuple[set[int], set[str]]:
    nums = jit_kwargs.get("static_argnums") or ()
    argnames = jit_kwargs.get("static_argnames") or ()
    nums = {nums} if isinstance(nums, int) else set(nums)
    argnames = {argnames} if isinstance(argnames, str) else set(argnames)
    nums |= {i for i, n in enumerate(names) if n in argnames}
    argnames |= {names[i] for i in nums if 0 <= i < len(names)}
    return nums, argnames


def _where(path: tuple[Any, ...], names: list[str], jax: Any) -> tuple[str, int | str | None]:
    """`step`, `state.params['w']`: the argument's name and the rest of the path; and which argument."""
    if len(path) < 2:
        return jax.tree_util.keystr(path), None
    top, arg, rest = path[0], path[1], path[2:]
    index = getattr(top, "idx", None)
    if index == 0:  # positional
        i = getattr(arg, "idx", None)
        name = names[i] if isinstance(i, int) and i < len(names) else f"argument {i}"
        return name + jax.tree_util.keystr(rest), i
    key = getattr(arg, "key", None)
    return f"{key}" + jax.tree_util.keystr(rest), key


def _spec(x: Any) -> str:
    return f"{x.dtype}{list(x.shape)}"


def cause(old: tuple[tuple[Any, ...], dict[str, Any]], new: tuple[tuple[Any, ...], dict[str, Any]], fun: Any, jit_kwargs: dict[str, Any], jax: Any,
          wrapper: str | None = None) -> tuple[str, str]:
    """(kind, text): the first difference between the abstract arguments of two compiles. Kinds:
    `shape`, `dtype`, `sharding`, `static` (a static argument's value), `value` (another non-array
    leaf), `structure` (the pytree), `unknown` (nothing in the arguments changed). Under
    `equinox.filter_jit` (`wrapper`) every non-array argument is static, inside equinox's own
    arguments: its path names nothing the script wrote, so the text says what it is instead."""
    names = _names(fun)
    static_nums, static_names = _static(jit_kwargs, names)
    old_leaves, old_tree = jax.tree_util.tree_flatten_with_path(old)
    new_leaves, new_tree = jax.tree_util.tree_flatten_with_path(new)
    if old_tree != new_tree:
        return "structure", "the arguments' structure changed (other pytree keys, leaves or None)"
    shape_like = jax.ShapeDtypeStruct
    for (path, a), (_, b) in zip(old_leaves, new_leaves, strict=True):
        where, arg = _where(path, names, jax)
        if isinstance(a, shape_like) and isinstance(b, shape_like):
            if a.shape != b.shape:
                return "shape", f"`{where}` {_spec(a)} -> {_spec(b)}"
            if a.dtype != b.dtype:
                return "dtype", f"`{where}` {_spec(a)} -> {_spec(b)}"
            if getattr(a, "sharding", None) != getattr(b, "sharding", None):
                return "sharding", f"`{where}` sharding {getattr(a, 'sharding', None)} -> {getattr(b, 'sharding', None)}"
            continue
        if isinstance(a, shape_like) != isinstance(b, shape_like):
            return "value", f"`{where}` {a!r:.40} -> {b!r:.40}"
        try:
            same = bool(a == b) and type(a) is type(b)
        except Exception:  # noqa: BLE001 -- an object whose == is an array or raises: not the same
            same = a is b
        if not same:
            if wrapper == "equinox":
                return "static", f"a non-array argument (static under equinox.filter_jit) {a!r:.40} -> {b!r:.40}"
            static = arg in static_nums or arg in static_names
            return ("static" if static else "value"), f"`{where}`{' (static)' if static else ''} {a!r:.40} -> {b!r:.40}"
    return "unknown", "no argument changed its shape, dtype, sharding or static value (a jax.config change, a cleared cache, or a closure over a changing value)"
