"""A decoder served the way flax's lm1b example decodes, as a Python loop: a jitted `prefill` runs
the prompt and fills the KV cache, then a jitted `decode_step` per new token reads the cache at its
context length, writes one position and carries the cache (donated) to the next call. 6 requests,
a 32-token prompt, 48 new tokens each, greedy; a 2-layer, 4-head, 256-wide causal transformer in
fp32 with a fixed-size cache (no recompiles as the sequence grows).

The script clocks itself: each request from its start to the first token fetched to the host (the
prefill's argmax), then each further token as it is fetched; the wall time of all requests."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from truth import write

REQUESTS, PROMPT, NEW_TOKENS = 6, 32, 48
VOCAB, D, HEADS, LAYERS, MAX_LEN = 1024, 256, 4, 2, 128
HEAD = D // HEADS


def init(key):
    keys = jax.random.split(key, 2 + 4 * LAYERS)

    def dense(k, a, b):
        return jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a)

    layers = [{"qkv": dense(keys[2 + 4 * i], D, 3 * D), "out": dense(keys[3 + 4 * i], D, D),
               "up": dense(keys[4 + 4 * i], D, 4 * D), "down": dense(keys[5 + 4 * i], 4 * D, D)} for i in range(LAYERS)]
    return {"embed": dense(keys[0], VOCAB, D), "pos": dense(keys[1], MAX_LEN, D), "layers": layers}


def attend(params, x, cache, start):
    """Run tokens `x` (batch, t, D) at positions start.. against the cache; returns x and the cache."""
    t = x.shape[1]
    new_cache = []
    for layer, (k_cache, v_cache) in zip(params["layers"], cache, strict=True):
        q, k, v = jnp.split(x @ layer["qkv"], 3, axis=-1)
        q, k, v = (a.reshape(a.shape[0], t, HEADS, HEAD) for a in (q, k, v))
        k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, start, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, start, 0, 0))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k_cache) / np.sqrt(HEAD)
        mask = jnp.arange(MAX_LEN)[None, :] <= (start + jnp.arange(t))[:, None]
        attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", attn, v_cache).reshape(x.shape) @ layer["out"]
        x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
        new_cache.append((k_cache, v_cache))
    return x, new_cache


@jax.jit
def prefill(params, prompt):
    cache = [(jnp.zeros((1, MAX_LEN, HEADS, HEAD)), jnp.zeros((1, MAX_LEN, HEADS, HEAD))) for _ in range(LAYERS)]
    x = params["embed"][prompt] + params["pos"][: prompt.shape[1]]
    x, cache = attend(params, x, cache, 0)
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), cache


@jax.jit(donate_argnums=(2,))
def decode_step(params, token, cache, position):
    x = params["embed"][token][:, None] + jax.lax.dynamic_slice_in_dim(params["pos"], position, 1)[None]
    x, cache = attend(params, x, cache, position)
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), cache


params = init(jax.random.PRNGKey(0))
rng = np.random.default_rng(0)
ttft, tpot = [], []
began = time.perf_counter()
for _ in range(REQUESTS):
    prompt = jnp.asarray(rng.integers(0, VOCAB, (1, PROMPT)))
    start = time.perf_counter()
    token, cache = prefill(params, prompt)
    out = [int(token[0])]
    first = time.perf_counter()
    for i in range(NEW_TOKENS - 1):
        token, cache = decode_step(params, token, cache, PROMPT + i)
        out.append(int(token[0]))
    end = time.perf_counter()
    ttft.append(first - start)
    tpot.append((end - first) / (NEW_TOKENS - 1))
wall = time.perf_counter() - began

weights = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
kv = 2 * LAYERS * MAX_LEN * HEADS * HEAD * 4  # the fixed-size cache every decode step reads
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * NEW_TOKENS / wall, weight_bytes=weights, kv_bytes=kv)
