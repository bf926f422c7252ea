"""A training loop that recompiles on most steps: each batch has a new length, so `jax.jit` traces
and compiles the step again (the defect `tpu-perf` must not hide). Its twin, recompile_fixed.py,
pads every batch to one length and compiles once. Same work per step, same fingerprint.

Usage: recompile_bad.py [--steps N]
"""

import argparse

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=14)
args = parser.parse_args()
WIDTH, LAYERS, LONGEST = 256, 6, 136


@jax.jit
def step(w, x):
    h = x
    for _ in range(LAYERS):
        h = jnp.tanh(h @ w)
    return w - 1e-4 * (h.T @ h), jnp.sum(h)


w = jnp.eye(WIDTH) * 0.9
for i in range(args.steps):
    length = 64 + 8 * (i % 10)  # ten lengths: the first ten steps each compile a new program
    x = jnp.ones((length, WIDTH))
    w, loss = step(w, x)
    float(loss)
