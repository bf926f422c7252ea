"""flax linen + a flax TrainState whose optimizer is optax.MultiSteps (4 micro-batches per update):
80 calls of the jitted step, 20 optimizer updates. With MULTISTEPS_SCHEDULE=1 in the environment, k
comes from a schedule (a callable tpu-perf cannot read before the run)."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from truth import Clock, write

K, UPDATES = 4, 20


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(256)(x)


model = MLP()
x = jnp.ones((256, 256)) * 0.01
params = model.init(jax.random.PRNGKey(0), x)["params"]
tx = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=(lambda step: K) if os.environ.get("MULTISTEPS_SCHEDULE") else K)
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def loss_fn(params, x):
    return jnp.mean(model.apply({"params": params}, x) ** 2)


@jax.jit
def train_step(state, x):
    loss, grads = jax.value_and_grad(loss_fn)(state.params, x)
    return state.apply_gradients(grads=grads), loss


clock = Clock()
for i in range(K * UPDATES):
    state, loss = train_step(state, x)
    if (i + 1) % K == 0:
        loss.block_until_ready()
        clock.tick()

# the truth: one update is K forward+backward passes and one adam update
grad_flops = jax.jit(jax.grad(loss_fn)).lower(params, x).compile().cost_analysis()["flops"]
adam = optax.adam(1e-3)
update_flops = jax.jit(lambda g, s, p: adam.update(g, s, p)).lower(params, adam.init(params), params).compile().cost_analysis()["flops"]
write(iterations=K * UPDATES, updates=UPDATES, micro_batches=K, times=clock.times, flops=K * grad_flops + update_flops,
      call_flops=train_step.lower(state, x).compile().cost_analysis()["flops"], grad_flops=grad_flops, update_flops=update_flops)
