"""A flax nnx MLP trained with nnx.Optimizer (optax.adam) under nnx.jit: the model and the optimizer
are mutable objects nnx splits into state pytrees for the jitted step. Writes the bytes of the
parameters and of adam's state to OUT_JSON.

Usage: nnx_adam.py OUT_JSON [--steps N]
"""

import argparse
import json

import jax
import jax.numpy as jnp
import optax
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List([nnx.Linear(128, 256, rngs=rngs), nnx.Linear(256, 256, rngs=rngs), nnx.Linear(256, 10, rngs=rngs)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.gelu(layer(x))
        return self.layers[-1](x)


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


x, y = jnp.ones((32, 128)), jnp.zeros((32,), jnp.int32)
for _ in range(args.steps):
    loss = train_step(model, optimizer, x, y)
jax.block_until_ready(loss)


def nbytes(tree):
    return sum(v.nbytes for v in jax.tree_util.tree_leaves(tree) if hasattr(v, "nbytes"))


with open(args.out, "w") as f:
    json.dump({"param_bytes": nbytes(nnx.state(model, nnx.Param)), "opt_bytes": nbytes(nnx.state(optimizer.opt_state))}, f)
