"""A JAX loop that profiles a few of its own steps with jax.profiler.trace, mid-run."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

if __name__ == "__main__":
    steps, logdir = int(sys.argv[1]), sys.argv[2]

    @jax.jit
    def step(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)

    w, x = jnp.ones((64, 64)) * 0.01, jnp.ones((16, 64))
    for i in range(steps):
        if i == 4:
            jax.profiler.start_trace(logdir)
        w = step(w, x)
        if i == 6:
            w.block_until_ready()
            jax.profiler.stop_trace()
    w.block_until_ready()
    found = sorted(Path(logdir).rglob("*.xplane.pb"))
    print("xplanes", len(found))
    sys.exit(0 if found else 5)
