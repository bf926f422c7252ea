"""A common JAX mistake: the step counter is a static argument (for a learning-rate schedule), so
every step compiles a new program. The batch's shape never changes."""

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.jit, static_argnames="step")
def train_step(w, x, step):
    lr = 0.1 / (1 + 0.01 * step)
    loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - lr * g, loss


w, x = jnp.eye(256) * 0.5, jnp.ones((128, 256))
for step in range(16):
    w, loss = train_step(w, x, step=step)
    if step % 5 == 0:
        print(step, float(loss))
