"""A flax TrainState made with `TrainState.create` (its step a Python 0 until the first update), a
scanned, rematerialised stack of blocks (nn.scan over nn.remat) and optax adamw. Not donated, the
new state is live beside the old one at the step's peak; donated (`--donate`), the peak holds the
scan's saved block inputs and the loop body's values.

Usage: flax_scan_state.py OUT_JSON [--steps N] [--donate]   (writes the parameters' bytes)
"""

import argparse
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--donate", action="store_true")
args = parser.parse_args()


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return x + nn.Dense(256)(nn.gelu(nn.Dense(1024)(nn.LayerNorm()(x)))), None


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        x, _ = nn.scan(nn.remat(Block), variable_axes={"params": 0}, split_rngs={"params": True}, length=4)()(x, None)
        return nn.Dense(10)(x)


model = Model()
x = jnp.ones((4, 16, 256))
state = train_state.TrainState.create(apply_fn=model.apply, params=model.init(jax.random.PRNGKey(0), x), tx=optax.adamw(1e-3))


def train_step(state, x):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(state.apply_fn(p, x) ** 2))(state.params)
    return state.apply_gradients(grads=grads), loss


train_step = jax.jit(train_step, donate_argnums=(0,) if args.donate else ())


for _ in range(args.steps):
    state, loss = train_step(state, x)
float(loss)
nbytes = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(state.params))
json.dump({"param_bytes": nbytes}, open(args.out, "w"))
