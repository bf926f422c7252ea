"""A JAX server in flax lm1b's shape (a jitted prefill, then a jitted decode step per token carrying
and donating a fixed-size KV cache), planted with the two decode defects a trace can show beside the
per-token ones: `--mode long` serves long prompts (512 tokens) for few new tokens (16), prefilled
one request at a time, so prefill holds most of the requests' time; and its decode step attends as
einsum-softmax-einsum over a (batch, length, heads, head_dim) cache, which XLA reads in several
passes (a transposed copy, then the matmul). `--mode short` serves 16-token prompts for 48 new
tokens, and its decode step attends in one pass a cache array (an elementwise product reduced over
the head dimension, then the weights times the values reduced over the length: one fusion each).
6 requests; a 2-layer, 4-head, 256-wide decoder in fp32."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, D, HEADS, LAYERS, MAX_LEN, REQUESTS = 1024, 256, 4, 2, 576, 6
HEAD = D // HEADS
parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("long", "short"), required=True)
LONG = parser.parse_args().mode == "long"
PROMPT, NEW_TOKENS = (512, 16) if LONG else (16, 48)


def init(key):
    keys = jax.random.split(key, 2 + 4 * LAYERS)

    def dense(k, a, b):
        return jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a)

    layers = [{"qkv": dense(keys[2 + 4 * i], D, 3 * D), "out": dense(keys[3 + 4 * i], D, D),
               "up": dense(keys[4 + 4 * i], D, 4 * D), "down": dense(keys[5 + 4 * i], 4 * D, D)} for i in range(LAYERS)]
    return {"embed": dense(keys[0], VOCAB, D), "pos": dense(keys[1], MAX_LEN, D), "layers": layers}


def einsum_attention(q, k_cache, v_cache, valid):
    """q (b, t, h, d) over the whole cache (b, L, h, d): scores, softmax, weighted values."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k_cache) / np.sqrt(HEAD)
    attn = jax.nn.softmax(jnp.where(valid, scores, -1e9), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", attn, v_cache)


def one_pass_attention(q, k_cache, v_cache, valid):
    """One query (b, 1, h, d): each cache array read once, by one reduction over it."""
    scores = (q * k_cache).sum(-1) / np.sqrt(HEAD)  # (b, L, h)
    attn = jax.nn.softmax(jnp.where(valid[0][:, None], scores, -1e9), axis=1)
    return (attn[..., None] * v_cache).sum(1, keepdims=True)


def run(params, x, cache, start, attention):
    t = x.shape[1]
    valid = jnp.arange(MAX_LEN)[None, :] <= (start + jnp.arange(t))[:, None]
    new_cache = []
    for layer, (k_cache, v_cache) in zip(params["layers"], cache, strict=True):
        q, k, v = (a.reshape(a.shape[0], t, HEADS, HEAD) for a in jnp.split(x @ layer["qkv"], 3, axis=-1))
        k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, start, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, start, 0, 0))
        x = x + attention(q, k_cache, v_cache, valid).reshape(x.shape) @ layer["out"]
        x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
        new_cache.append((k_cache, v_cache))
    return x, new_cache


@jax.jit
def prefill(params, prompt):
    cache = [(jnp.zeros((1, MAX_LEN, HEADS, HEAD)), jnp.zeros((1, MAX_LEN, HEADS, HEAD))) for _ in range(LAYERS)]
    x, cache = run(params, params["embed"][prompt] + params["pos"][: prompt.shape[1]], cache, 0, einsum_attention)
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), cache


@jax.jit(donate_argnums=(2,))
def decode_step(params, token, cache, position):
    x = params["embed"][token][:, None] + jax.lax.dynamic_slice_in_dim(params["pos"], position, 1)[None]
    x, cache = run(params, x, cache, position, einsum_attention if LONG else one_pass_attention)
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), cache


params = init(jax.random.PRNGKey(0))
rng = np.random.default_rng(0)
for _ in range(REQUESTS):
    token, cache = prefill(params, jnp.asarray(rng.integers(0, VOCAB, (1, PROMPT))))
    out = [int(token[0])]
    for i in range(NEW_TOKENS - 1):
        token, cache = decode_step(params, token, cache, PROMPT + i)
        out.append(int(token[0]))
print("served", REQUESTS, "requests of", PROMPT, "prompt tokens,", NEW_TOKENS, "new tokens each")
