"""A loop of eager (op-by-op) JAX with no jitted step: automatic detection finds none, so the run must say so."""

import jax.numpy as jnp

w = jnp.ones((16, 16))
x = jnp.ones((16, 16))
for _ in range(5):
    w = w - 0.1 * (x @ w)
print(float(w.sum()))
