"""Scanned layers (lax.scan over stacked weights), a nested fori_loop and a static while_loop inside
one jitted train step; prints the true matmul FLOPs of one step, counted by hand."""

import json
import sys

import jax
import jax.numpy as jnp

B, D, LAYERS, INNER, OUTER = 16, 64, 6, 3, 2


def forward(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    h, _ = jax.lax.scan(layer, x, ws)

    def outer(i, h):  # nested loops: OUTER x INNER matmuls with the last layer's weights
        return jax.lax.fori_loop(0, INNER, lambda j, h: jnp.tanh(h @ ws[-1]), h)

    h = jax.lax.fori_loop(0, OUTER, outer, h)
    return jnp.mean(h**2)


@jax.jit
def train_step(ws, x):
    loss, g = jax.value_and_grad(forward)(ws, x)
    # a forward-only metric in a while_loop with a static bound: 2 more matmuls
    probe = jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, jnp.tanh(c[1] @ ws[0])), (0, x))[1]
    return ws - 0.01 * g, loss + jnp.mean(probe)


if __name__ == "__main__":
    steps, out = int(sys.argv[1]), sys.argv[2]
    ws = jax.random.normal(jax.random.PRNGKey(0), (LAYERS, D, D)) * 0.1
    x = jnp.ones((B, D))
    for _ in range(steps):
        ws, loss = train_step(ws, x)
    float(loss)
    # each differentiated B x D x D matmul runs 3 times (forward, grads of input and weight); the probe's 2 once
    true = (3 * (LAYERS + OUTER * INNER) + 2) * 2 * B * D * D
    xla = train_step.lower(ws, x).compile().cost_analysis()["flops"]
    json.dump({"iterations": steps, "matmul_flops": true, "xla_flops": xla}, open(out, "w"))
