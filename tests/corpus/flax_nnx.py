"""flax nnx: a Module, nnx.Optimizer and an nnx.jit train step: 30 updates."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from truth import Clock, write

UPDATES = 30


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.a = nnx.Linear(512, 512, rngs=rngs)
        self.b = nnx.Linear(512, 512, rngs=rngs)

    def __call__(self, x):
        return self.b(nnx.relu(self.a(x)))


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


def loss_fn(model, x):
    return jnp.mean(model(x) ** 2)


def step(model, optimizer, x):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x)
    optimizer.update(model, grads)
    return loss


train_step = nnx.jit(step)


x = jnp.ones((256, 512)) * 0.01
clock = Clock()
for _ in range(UPDATES):
    loss = train_step(model, optimizer, x)
    loss.block_until_ready()
    clock.tick()
graphdef, state = nnx.split((model, optimizer))


def pure(state, x):  # the same step as a pure function of the state (what nnx.jit compiles)
    m, o = nnx.merge(graphdef, state)
    loss = step(m, o, x)
    return loss, nnx.state((m, o))


write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=jax.jit(pure).lower(state, x).compile().cost_analysis()["flops"])
