import jax
import jax.numpy as jnp


def init():
    return jnp.ones((32, 32)) * 0.01, jnp.ones((8, 32))


@jax.jit
def train_step(w, x):
    return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)
