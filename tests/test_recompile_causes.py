"""What changed between two compiles of a jitted function (collectors/jax/recompiles.py), on the
abstract arguments the recorder keeps (real jax.ShapeDtypeStruct leaves, real pytrees)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from tpu_perf.collectors.jax.recompiles import cause


def train_step(state, batch, step, *, lr=0.1):
    return state, batch, step, lr


def spec(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


STATE = {"w": spec((256, 256)), "b": spec((256,))}


def call(batch, step=3, state=STATE, **kwargs):
    return (state, batch, step), kwargs


@pytest.mark.parametrize(("old", "new", "jit_kwargs", "kind", "text"), [
    (call(spec((64, 128))), call(spec((72, 128))), {}, "shape", "`batch` float32[64, 128] -> float32[72, 128]"),
    (call(spec((64, 128))), call(spec((64, 128), jnp.bfloat16)), {}, "dtype", "`batch` float32[64, 128] -> bfloat16[64, 128]"),
    (call(spec((64, 128)), step=3), call(spec((64, 128)), step=4), {"static_argnums": 2}, "static", "`step` (static) 3 -> 4"),
    (call(spec((64, 128)), step=3), call(spec((64, 128)), step=4), {"static_argnames": "step"}, "static", "`step` (static) 3 -> 4"),
    (call(spec((64, 128)), lr=0.1), call(spec((64, 128)), lr=0.2), {"static_argnames": ("lr",)}, "static", "`lr` (static) 0.1 -> 0.2"),
    (call(spec((64, 128)), state=STATE), call(spec((64, 128)), state={**STATE, "c": spec((1,))}), {}, "structure", "structure changed"),
    (call(spec((64, 128)), state=STATE), call(spec((64, 128)), state={**STATE, "w": spec((256, 512))}), {}, "shape", "`state['w']` float32[256, 256] -> float32[256, 512]"),
    (call(spec((64, 128))), call(spec((64, 128))), {}, "unknown", "no argument changed"),
])
def test_the_first_difference_is_named(old, new, jit_kwargs, kind, text) -> None:
    got_kind, got_text = cause(old, new, train_step, jit_kwargs, jax)
    assert got_kind == kind and text in got_text, got_text


def test_a_partial_and_a_lambda_are_named_by_position() -> None:
    """No signature to read (a builtin) or a partial: positions, and the kind still right."""
    old, new = ((spec((8,)),), {}), ((spec((9,)),), {})
    assert cause(old, new, functools.partial(train_step, STATE), {}, jax)[0] == "shape"
    assert cause(old, new, max, {}, jax) == ("shape", "`argument 0` float32[8] -> float32[9]")


def test_under_equinox_a_changed_non_array_is_named_for_what_it_is() -> None:
    """equinox.filter_jit passes every non-array argument static, inside its own arguments: the path
    names nothing the script wrote, so the cause says what it is."""
    old, new = call(spec((64, 128)), step=3), call(spec((64, 128)), step=4)
    assert cause(old, new, train_step, {}, jax, "equinox") == ("static", "a non-array argument (static under equinox.filter_jit) 3 -> 4")
