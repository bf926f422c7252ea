"""A whole request in one jitted function, as many JAX decoders write `generate`: the prompt is
prefilled into a KV cache, then `lax.scan` runs a fixed number of decode steps, each sampling a token
(temperature sampling: `jax.random.categorical`) and carrying it with the cache to the next; the
tokens come back stacked time-major and are transposed to (batch, new tokens). 8 requests of 2 rows,
a 16-token prompt, 32 new tokens each; a 2-layer causal transformer, fp32, a fixed-size cache.

The script clocks itself: each call's time over its new tokens (per output token, the prefill
included), and the wall time of all requests."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from truth import write

REQUESTS, BATCH, PROMPT, NEW = 8, 2, 16, 32
VOCAB, D, HEADS, LAYERS, MAX_LEN = 512, 128, 4, 2, 64
HEAD = D // HEADS


def init(key):
    keys = jax.random.split(key, 2 + 2 * LAYERS)
    dense = lambda k, a, b: jax.random.normal(k, (a, b)) / np.sqrt(a)  # noqa: E731
    layers = [{"qkv": dense(keys[2 + 2 * i], D, 3 * D), "mlp": dense(keys[3 + 2 * i], D, D)} for i in range(LAYERS)]
    return {"embed": dense(keys[0], VOCAB, D), "pos": dense(keys[1], MAX_LEN, D), "layers": layers}


def block(params, x, cache, start):
    t, out = x.shape[1], []
    for layer, (k_cache, v_cache) in zip(params["layers"], cache, strict=True):
        q, k, v = (a.reshape(a.shape[0], t, HEADS, HEAD) for a in jnp.split(x @ layer["qkv"], 3, axis=-1))
        k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, start, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, start, 0, 0))
        mask = jnp.arange(MAX_LEN)[None, :] <= (start + jnp.arange(t))[:, None]
        scores = jnp.where(mask, jnp.einsum("bqhd,bkhd->bhqk", q, k_cache) / np.sqrt(HEAD), -1e9)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v_cache).reshape(x.shape)
        x = x + jax.nn.gelu(x @ layer["mlp"])
        out.append((k_cache, v_cache))
    return x, out


@jax.jit
def generate(params, prompt, rng):
    cache = [(jnp.zeros((BATCH, MAX_LEN, HEADS, HEAD)),) * 2 for _ in range(LAYERS)]
    x, cache = block(params, params["embed"][prompt] + params["pos"][:PROMPT], cache, 0)
    first = jax.random.categorical(rng, x[:, -1] @ params["embed"].T)

    def step(carry, i):
        token, cache, rng = carry
        rng, sub = jax.random.split(rng)
        x = params["embed"][token][:, None] + jax.lax.dynamic_slice_in_dim(params["pos"], PROMPT + i, 1)[None]
        x, cache = block(params, x, cache, PROMPT + i)
        token = jax.random.categorical(sub, x[:, -1] @ params["embed"].T)
        return (token, cache, rng), token

    _, tokens = jax.lax.scan(step, (first, cache, rng), jnp.arange(NEW - 1))
    return jnp.concatenate([first[None], tokens]).T


params = init(jax.random.PRNGKey(0))
rng = np.random.default_rng(0)
tpot = []
began = time.perf_counter()
for request in range(REQUESTS):
    start = time.perf_counter()
    out = np.asarray(generate(params, jnp.asarray(rng.integers(0, VOCAB, (BATCH, PROMPT))), jax.random.PRNGKey(request)))
    assert out.shape == (BATCH, NEW)
    tpot.append((time.perf_counter() - start) / NEW)
wall = time.perf_counter() - began
write(requests=REQUESTS * BATCH, generated_tokens=REQUESTS * BATCH * NEW, tpot=tpot, tokens_per_s=REQUESTS * BATCH * NEW / wall)
