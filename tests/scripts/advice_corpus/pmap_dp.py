"""Data-parallel training with jax.pmap, the way the pmap tutorials write it: replicated params,
a per-device batch, gradients averaged with lax.pmean, the loss printed every 10 steps."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

n_dev = jax.local_device_count()
rng = np.random.default_rng(0)
W_TRUE = rng.normal(size=(64, 1)).astype(np.float32)


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, 128)) * 0.1, "w2": jax.random.normal(k2, (128, 1)) * 0.1}


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, axis_name="batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)
    return params, jax.lax.pmean(loss, axis_name="batch")


params = jax.tree_util.tree_map(lambda p: jnp.stack([p] * n_dev), init(jax.random.PRNGKey(0)))  # replicated
for step in range(40):
    x = rng.normal(size=(n_dev, 256, 64)).astype(np.float32)
    y = x @ W_TRUE
    params, loss = train_step(params, x, y)
    if step % 10 == 0:
        print(step, float(loss[0]))
