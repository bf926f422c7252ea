"""The fix of recompile_bad.py: every batch padded to one length (rows past the batch zeroed), so
the step compiles once. Same loop, same work per step, same fingerprint.

Usage: recompile_fixed.py [--steps N] [--no-sync] [--repeat-each K]
"""

import argparse

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=14)
parser.add_argument("--no-sync", action="store_true", help="never read the loss: the loop queues steps ahead of the device")
parser.add_argument("--repeat-each", type=int, default=1, help="run each length K steps in a row: the recompiles then fall after warm-up")
args = parser.parse_args()
WIDTH, LAYERS, LONGEST = 256, 6, 136


@jax.jit
def step(w, x, mask):
    h = x
    for _ in range(LAYERS):
        h = jnp.tanh(h @ w) * mask
    return w - 1e-4 * (h.T @ h), jnp.sum(h)


w = jnp.eye(WIDTH) * 0.9
rows = jnp.arange(LONGEST)[:, None]
for i in range(args.steps):
    length = 64 + 8 * ((i // args.repeat_each) % 10)
    x = jnp.ones((LONGEST, WIDTH))
    w, loss = step(w, x, (rows < length).astype(x.dtype))
    if not args.no_sync:
        float(loss)
