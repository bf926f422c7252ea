"""A flax TrainState MLP with optax.adam, its step jitted (and donated) BEFORE `tpu_perf.record`
starts, as in a notebook's earlier cell; the steps run inside `with tpu_perf.record(...)`.

Usage: notebook_train_state.py STORE OUT_JSON [--steps N]   (writes the run id and the pytree bytes)
"""

import argparse
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

import tpu_perf

parser = argparse.ArgumentParser()
parser.add_argument("store")
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for width in (256, 256, 256):
            x = nn.gelu(nn.Dense(width)(x))
        return nn.Dense(10)(x)


model = MLP()
x = jnp.ones((32, 128))
y = jnp.zeros((32,), jnp.int32)
state = train_state.TrainState.create(apply_fn=model.apply, params=model.init(jax.random.PRNGKey(0), x), tx=optax.adam(1e-3))


def train_step(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


train_step = jax.jit(train_step, donate_argnums=0)  # jitted before the recording, as in an earlier cell
state, _ = jax.block_until_ready(train_step(state, x, y))  # and already compiled

with tpu_perf.record("notebook-train-state", store=args.store, quiet=True, trace_steps=None) as run:
    for _ in range(args.steps):
        state, loss = train_step(state, x, y)
    jax.block_until_ready(loss)


def nbytes(tree):
    return sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(tree) if hasattr(leaf, "nbytes"))


with open(args.out, "w") as f:
    json.dump({"run": run.id, "param_bytes": nbytes(state.params), "opt_bytes": nbytes(state.opt_state), "batch_bytes": x.nbytes + y.nbytes}, f)
