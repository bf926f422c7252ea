"""A 3-layer transformer language model trained with optax.adam, its state donated; `--remat`
wraps each block in jax.checkpoint (its values are recomputed in the backward pass instead of
saved). Writes the pytree bytes of the parameters and of adam's state to OUT_JSON.

Usage: transformer_remat.py OUT_JSON [--steps N] [--remat]
"""

import argparse
import functools
import json

import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--remat", action="store_true")
args = parser.parse_args()
BATCH, SEQ, D, HEADS, FF, VOCAB, LAYERS = 4, 64, 128, 4, 512, 256, 3


def init(key):
    def dense(key, shape):
        return jax.random.normal(key, shape) * shape[0] ** -0.5

    keys = iter(jax.random.split(key, 4 * LAYERS + 1))
    blocks = [{"wqkv": dense(next(keys), (D, 3 * D)), "wo": dense(next(keys), (D, D)), "w_in": dense(next(keys), (D, FF)), "w_out": dense(next(keys), (FF, D)),
               "ln1": jnp.ones(D), "ln2": jnp.ones(D)} for _ in range(LAYERS)]
    return {"embed": dense(next(keys), (VOCAB, D)), "blocks": blocks}


def norm(x, scale):
    return scale * (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-6)


def block(x, p):
    heads = lambda t: t.reshape(BATCH, SEQ, HEADS, D // HEADS).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = jnp.split(norm(x, p["ln1"]) @ p["wqkv"], 3, axis=-1)
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    att = jax.nn.softmax(jnp.where(mask, heads(q) @ heads(k).transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5, -1e9), axis=-1)
    x = x + (att @ heads(v)).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D) @ p["wo"]
    return x + jax.nn.gelu(norm(x, p["ln2"]) @ p["w_in"]) @ p["w_out"]


def loss_fn(params, tokens):
    layer = jax.checkpoint(block) if args.remat else block
    x = params["embed"][tokens]
    for p in params["blocks"]:
        x = layer(x, p)
    logits = x @ params["embed"].T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], axis=-1))


optimizer = optax.adam(1e-3)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def nbytes(tree):
    return sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))


params = init(jax.random.PRNGKey(0))
opt_state = optimizer.init(params)
sizes = {"param_bytes": nbytes(params), "opt_bytes": nbytes(opt_state)}
tokens = jax.random.randint(jax.random.PRNGKey(1), (BATCH, SEQ), 0, VOCAB)
for _ in range(args.steps):
    params, opt_state, loss = train_step(params, opt_state, tokens)
print(f"loss {float(loss):.3f}")
with open(args.out, "w") as f:
    json.dump(sizes, f)
