"""An ahead-of-time compiled step: `jax.jit(f).lower(...).compile()`, the compiled program called in the loop."""

import jax
import jax.numpy as jnp
from truth import Clock, write

STEPS = 40


def train_step(w, x):
    g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g


w = jnp.eye(512) * 0.5
x = jnp.ones((256, 512)) * 0.01
compiled = jax.jit(train_step).lower(w, x).compile()
clock = Clock()
for _ in range(STEPS):
    w = compiled(w, x)
    w.block_until_ready()
    clock.tick()
write(iterations=STEPS, updates=STEPS, micro_batches=1, times=clock.times, flops=compiled.cost_analysis()["flops"])
