"""advise/padding.py on the optimized HLO of real jitted training steps: which matmul dimensions
the user cannot change, and what trimming the others saves on a target's roofline."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tpu_perf.advise.padding import fixable_matmul_saving, fixed_dot_dims
from tpu_perf.analyzers.hlo import parse_hlo
from tpu_perf.analyzers.hlo_analysis import analyze_hlo
from tpu_perf.hardware import lookup_chip

V6E = lookup_chip("v6e")


def _step_module(loss, params, *batch):
    step = jax.jit(lambda p, *b: jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, jax.grad(loss)(p, *b)))
    return parse_hlo(step.lower(params, *batch).compile().as_text())


def _cnn_loss(p, x):
    h = jax.lax.conv_general_dilated(x, p["k1"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jax.nn.relu(h).reshape(x.shape[0], -1)
    return jnp.mean((h @ p["w"]) ** 2)


def test_first_layer_input_channels_are_the_datas() -> None:
    params = {"k1": jnp.ones((3, 3, 3, 32)), "w": jnp.ones((16 * 16 * 32, 10))}
    module = _step_module(_cnn_loss, params, jnp.ones((16, 16, 16, 3)))
    fixed = fixed_dot_dims(module)
    a = analyze_hlo(module, tile=256)
    convs = [d for d in a.dots if d.opcode == "convolution"]
    first = [d for d in convs if d.k == 27]  # 3x3 kernel x 3 input channels
    assert first and all("k" in fixed[d.name] for d in first)
    saving = fixable_matmul_saving(a, fixed, V6E)
    assert a.padding_waste > 0.5 and saving is not None and saving.fraction < 0.10  # padded, but nothing the user can trim


def test_a_hidden_size_just_above_the_tile_is_removable() -> None:
    def mlp_loss(p, x):
        return jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"])

    def saving_for(hidden):
        params = {"w1": jnp.ones((2048, hidden), jnp.bfloat16), "w2": jnp.ones((hidden, 2048), jnp.bfloat16)}
        module = _step_module(mlp_loss, params, jnp.ones((2048, 2048), jnp.bfloat16))
        return fixable_matmul_saving(analyze_hlo(module, tile=256), fixed_dot_dims(module), V6E)

    trim = saving_for(2048 + 64)  # 2112 pads to 2304 and trims to 2048
    assert 0.05 < trim.fraction < 1 - 2048 / 2304 + 1e-9 and trim.memory_bound_share < 0.5
    assert saving_for(2048).fraction == 0.0  # a multiple of the tile: nothing to trim
    assert saving_for(2048 + 200).fraction == 0.0  # nearer the multiple above: rounding up fills the padding, no step time saved
