"""Flax + optax with gradient accumulation (optax.MultiSteps over 4 micro-batches) and a
flax.training TrainState, as the Flax examples write a training loop: 160 calls, 40 updates (enough
steady updates past warm-up and the trace window for the advisor to judge the loop's own work)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(256)(x))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


model = MLP()
tx = optax.MultiSteps(optax.adamw(1e-3), every_k_schedule=4)
state = train_state.TrainState.create(apply_fn=model.apply, params=model.init(jax.random.PRNGKey(0), jnp.ones((1, 64))), tx=tx)


@jax.jit
def train_step(state, x, y):
    def loss_fn(params):
        return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn(params, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


CALLS = 160
rng = np.random.default_rng(0)
data_x, data_y = rng.normal(size=(CALLS * 64, 64)).astype(np.float32), rng.integers(0, 10, CALLS * 64)
for step in range(CALLS):
    x, y = data_x[step * 64 : (step + 1) * 64], data_y[step * 64 : (step + 1) * 64]
    state, loss = train_step(state, x, y)
    if step % 10 == 0:
        print(step, float(loss))
