"""A JAX loop with an eval every EVERY steps (a second jitted function) and a checkpoint-free loop
otherwise; writes which iterations ran an eval."""

import json
import sys

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)


@jax.jit
def evaluate(w, x):
    h = x
    for _ in range(20):
        h = jnp.tanh(h @ w)
    return jnp.mean(h)


if __name__ == "__main__":
    steps, every, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    w, x, big = jnp.ones((64, 64)) * 0.01, jnp.ones((8, 64)), jnp.ones((512, 64))
    evals = []
    for i in range(steps):
        w = train_step(w, x)
        if i % every == every - 1:
            float(evaluate(w, big))
            evals.append(i)
    json.dump({"iterations": steps, "eval_after": evals}, open(out, "w"))
