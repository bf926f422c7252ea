"""Gradient accumulation: a jitted micro-batch function called ACCUM times, then a jitted Adam update.
Prints the XLA FLOPs of both programs so the test can sum them independently."""

import json
import sys

import jax
import jax.numpy as jnp


def loss(params, x):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"]) ** 2)


@jax.jit
def accumulate(params, grads, x):
    g = jax.grad(loss)(params, x)
    return jax.tree_util.tree_map(jnp.add, grads, g)


@jax.jit
def apply_updates(params, opt, grads):
    m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    new = jax.tree_util.tree_map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return new, {"m": m, "v": v, "count": opt["count"] + 1}


if __name__ == "__main__":
    steps, accum, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    k = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(k, (64, 128)) * 0.1, "w2": jax.random.normal(k, (128, 8)) * 0.1}
    opt = {"m": jax.tree_util.tree_map(jnp.zeros_like, params), "v": jax.tree_util.tree_map(jnp.zeros_like, params), "count": jnp.zeros(())}
    batches = [jax.random.normal(jax.random.PRNGKey(i), (16, 64)) for i in range(accum)]
    for _ in range(steps):
        grads = jax.tree_util.tree_map(jnp.zeros_like, params)
        for x in batches:
            grads = accumulate(params, grads, x)
        params, opt = apply_updates(params, opt, grads)
    jax.block_until_ready(params)
    acc_flops = accumulate.lower(params, grads, batches[0]).compile().cost_analysis()["flops"]
    apply_flops = apply_updates.lower(params, opt, grads).compile().cost_analysis()["flops"]
    json.dump({"iterations": steps, "accumulate_flops": acc_flops, "apply_flops": apply_flops}, open(out, "w"))
