"""A JAX loop that evaluates before it trains: a stateless `eval_step` over 10 batches (the loss
fetched each time), then 12 calls of a `train_step` that carries its weights. While only eval_step
has run, nothing carries state: its calls open the trace window as a predict loop's would; once
train_step carries its weights, that window is dropped and the train steps get their own."""

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def eval_step(w, x):
    return jnp.mean(jnp.tanh(x @ w))


@jax.jit
def train_step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)


w = jnp.ones((256, 256)) / 256
xs = [jnp.asarray(np.random.default_rng(i).standard_normal((128, 256)), jnp.float32) for i in range(10)]
for x in xs:
    print("eval loss", float(eval_step(w, x)))
for i in range(12):
    w = train_step(w, xs[i % 10])
w.block_until_ready()
