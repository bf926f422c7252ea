"""A small decoder-only transformer language model in plain JAX, trained with Adam on synthetic tokens.

No tpu-perf marks: record it as it is. Sized for a 2-core CPU (about 20 s for 40 steps).

    python examples/jax_transformer.py --steps 40
    tpu-perf record --tokens-per-step 2048 examples/jax_transformer.py --steps 40
"""

import argparse
import math

import jax
import jax.numpy as jnp


def init(key, vocab, d_model, heads, layers, d_ff, seq):
    def dense(key, shape):
        return jax.random.normal(key, shape) / math.sqrt(shape[0])

    keys = iter(jax.random.split(key, 4 + 6 * layers))
    params = {
        "embed": jax.random.normal(next(keys), (vocab, d_model)) * 0.02,
        "pos": jax.random.normal(next(keys), (seq, d_model)) * 0.02,
        "layers": [],
    }
    for _ in range(layers):
        params["layers"].append({
            "ln1": jnp.ones(d_model), "ln2": jnp.ones(d_model),
            "qkv": dense(next(keys), (d_model, 3 * d_model)),
            "out": dense(next(keys), (d_model, d_model)),
            "up": dense(next(keys), (d_model, d_ff)),
            "down": dense(next(keys), (d_ff, d_model)),
        })
    return params


def layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def forward(params, tokens, heads):
    batch, seq = tokens.shape
    x = params["embed"][tokens] + params["pos"][:seq]
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    for layer in params["layers"]:
        h = layer_norm(x, layer["ln1"])
        q, k, v = jnp.split(h @ layer["qkv"], 3, axis=-1)
        q, k, v = (t.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ v
        x = x + attn.transpose(0, 2, 1, 3).reshape(batch, seq, -1) @ layer["out"]
        h = layer_norm(x, layer["ln2"])
        x = x + jax.nn.gelu(h @ layer["up"]) @ layer["down"]
    return x @ params["embed"].T


def loss_fn(params, tokens, heads):
    logits = forward(params, tokens[:, :-1], heads)
    targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1])
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))


def make_train_step(heads, batch, seq, vocab, lr=3e-4, b1=0.9, b2=0.95, eps=1e-8):
    def train_step(state, data_key):
        # synthetic tokens drawn on the device, inside the step: no per-step host work in the loop
        data_key, sub = jax.random.split(data_key)
        tokens = jax.random.randint(sub, (batch, seq + 1), 0, vocab)
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        return (params, m, v, t), loss, data_key

    return jax.jit(train_step, donate_argnums=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()

    key = jax.random.PRNGKey(0)
    params = init(key, args.vocab, args.d_model, args.heads, args.layers, 4 * args.d_model, args.seq)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
    train_step = make_train_step(args.heads, args.batch, args.seq, args.vocab)
    data_key = jax.random.PRNGKey(1)
    for step in range(args.steps):
        state, loss, data_key = train_step(state, data_key)
        if step % 10 == 0:
            print(f"step {step} loss {float(loss):.4f}")
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
