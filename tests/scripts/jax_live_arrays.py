"""Counts live device arrays while training: a recorder must not keep step outputs alive."""

import json
import sys

import jax
import jax.numpy as jnp


@jax.jit
def step(params, x):
    return [p * 0.99 + x.mean() for p in params], x.sum()


params = [jnp.ones((32, 32)) for _ in range(10)]
x = jnp.ones((32,))
counts = []
for i in range(200):
    params, loss = step(params, x)
    float(loss) if i % 2 else loss.block_until_ready()
    counts.append(len(jax.live_arrays()))
json.dump({"first": counts[5], "max": max(counts)}, open(sys.argv[1], "w"))
