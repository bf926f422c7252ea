"""A JAX step whose cost is set from the command line: a known slowdown for `tpu-perf check` tests.

Usage: gate_step.py [--steps N] [--work K] [--width W]
Each step runs K chained W x W matmuls (inside one jitted program, so the dispatch cost stays
fixed): K=11 is a ~10 % slower step than K=10 with the same memory, inputs and fingerprint.
"""

import argparse

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--work", type=int, default=10)
parser.add_argument("--width", type=int, default=256)
args = parser.parse_args()


@jax.jit
def step(w, x):
    def body(_, h):
        return jnp.tanh(h @ w) * 0.5

    h = jax.lax.fori_loop(0, args.work, body, x)
    return w - 1e-3 * h, jnp.sum(h)


w = jnp.eye(args.width) * 0.9
x = jnp.ones((args.width, args.width))
for _ in range(args.steps):
    w, loss = step(w, x)
    loss.block_until_ready()
