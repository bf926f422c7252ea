"""Data-parallel JAX written with jax.pmap: 60 steps over the local devices (2 on CPU with
XLA_FLAGS=--xla_force_host_platform_device_count=2), gradients averaged with pmean."""

import functools

import jax
import jax.numpy as jnp
from truth import Clock, write

STEPS = 60
n = jax.local_device_count()


def loss_fn(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(w, x, y):
    loss, g = jax.value_and_grad(loss_fn)(w, x, y)
    g = jax.lax.pmean(g, "batch")
    return w - 0.1 * g, jax.lax.pmean(loss, "batch")


w = jnp.stack([jnp.eye(512) * 0.5] * n)
x = jnp.ones((n, 256, 512)) * 0.01
y = jnp.zeros((n, 256, 512))
clock = Clock()
for _ in range(STEPS):
    w, loss = train_step(w, x, y)
    loss.block_until_ready()
    clock.tick()
flops = train_step.lower(w, x, y).compile().cost_analysis()["flops"] * n  # per device: the whole step is n of them
write(iterations=STEPS, updates=STEPS, micro_batches=1, times=clock.times, flops=flops)
