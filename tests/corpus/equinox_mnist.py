"""equinox's MNIST example, as its tutorial trains: a CNN of eqx.nn layers, optax.adamw, an
eqx.filter_jit `make_step` returning the new model and optimizer state, the loss printed every few
steps with `.item()`: 24 updates on synthetic 28x28 images. FLOPs: XLA's cost analysis of
`make_step` (no loops in it)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from truth import Clock, write

BATCH, STEPS, PRINT_EVERY, LEARNING_RATE = 64, 24, 8, 3e-4


class CNN(eqx.Module):
    layers: list

    def __init__(self, key):
        key1, key2, key3, key4 = jax.random.split(key, 4)
        self.layers = [
            eqx.nn.Conv2d(1, 3, kernel_size=4, key=key1),
            eqx.nn.MaxPool2d(kernel_size=2),
            jax.nn.relu,
            jnp.ravel,
            eqx.nn.Linear(1728, 512, key=key2),
            jax.nn.sigmoid,
            eqx.nn.Linear(512, 64, key=key3),
            jax.nn.relu,
            eqx.nn.Linear(64, 10, key=key4),
            jax.nn.log_softmax,
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def loss(model, x, y):
    pred_y = jax.vmap(model)(x)
    return cross_entropy(y, pred_y)


def cross_entropy(y, pred_y):
    pred_y = jnp.take_along_axis(pred_y, jnp.expand_dims(y, 1), axis=1)
    return -jnp.mean(pred_y)


model = CNN(jax.random.PRNGKey(5678))
optim = optax.adamw(LEARNING_RATE)
opt_state = optim.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def make_step(model, opt_state, x, y):
    loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss_value


def trainloader(rng):
    while True:
        yield rng.random((BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, BATCH)


rng = np.random.default_rng(0)
clock = Clock()
for step, (x, y) in zip(range(STEPS), trainloader(rng), strict=False):  # the loader is endless, as in the tutorial
    model, opt_state, train_loss = make_step(model, opt_state, x, y)
    if (step % PRINT_EVERY) == 0 or (step == STEPS - 1):
        print(f"step={step}, train_loss={train_loss.item()}")
    clock.tick()
flops = make_step.lower(model, opt_state, x, y).compile().compiled.cost_analysis()["flops"]  # equinox's Compiled holds jax's
write(iterations=STEPS, updates=STEPS, micro_batches=1, times=clock.times, flops=flops)
