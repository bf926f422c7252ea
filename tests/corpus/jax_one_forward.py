"""One jitted `forward` for the prompt and for each new token, as JAX reference decoders write it
(Gemma's and Llama's `transformer(params, tokens, cache, position)`): a fresh KV cache per request
(`jnp.zeros`, not a jitted init), the prompt through `forward` once, then `forward` on the last
token per step, carrying the cache (not donated), greedy, the token fetched with `int()`. 5
requests of a 48-token prompt, 32 new tokens each; a 2-layer, 256-wide causal transformer in fp32.

The script clocks itself: each request from its start to the first token fetched, then each
further token as it is fetched; the wall time of all requests."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from truth import write

REQUESTS, PROMPT, NEW_TOKENS = 5, 48, 32
VOCAB, D, HEADS, LAYERS, MAX_LEN = 1024, 256, 4, 2, 96
HEAD = D // HEADS


def init(key):
    keys = jax.random.split(key, 2 + 3 * LAYERS)
    dense = lambda k, a, b: jax.random.normal(k, (a, b)) / np.sqrt(a)  # noqa: E731
    layers = [{"qkv": dense(keys[2 + 3 * i], D, 3 * D), "up": dense(keys[3 + 3 * i], D, 4 * D), "down": dense(keys[4 + 3 * i], 4 * D, D)} for i in range(LAYERS)]
    return {"embed": dense(keys[0], VOCAB, D), "pos": dense(keys[1], MAX_LEN, D), "layers": layers}


@jax.jit
def forward(params, tokens, cache, start):
    t = tokens.shape[1]
    x = params["embed"][tokens] + jax.lax.dynamic_slice_in_dim(params["pos"], start, t)[None]
    new_cache = []
    for layer, (k_cache, v_cache) in zip(params["layers"], cache, strict=True):
        q, k, v = (a.reshape(a.shape[0], t, HEADS, HEAD) for a in jnp.split(x @ layer["qkv"], 3, axis=-1))
        k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, start, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, start, 0, 0))
        mask = jnp.arange(MAX_LEN)[None, :] <= (start + jnp.arange(t))[:, None]
        scores = jnp.where(mask, jnp.einsum("bqhd,bkhd->bhqk", q, k_cache) / np.sqrt(HEAD), -1e9)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v_cache).reshape(x.shape)
        x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
        new_cache.append((k_cache, v_cache))
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), new_cache


params = init(jax.random.PRNGKey(0))
rng = np.random.default_rng(0)
ttft, tpot = [], []
began = time.perf_counter()
for _ in range(REQUESTS):
    prompt = jnp.asarray(rng.integers(0, VOCAB, (1, PROMPT)))
    start = time.perf_counter()
    cache = [(jnp.zeros((1, MAX_LEN, HEADS, HEAD)), jnp.zeros((1, MAX_LEN, HEADS, HEAD))) for _ in range(LAYERS)]
    token, cache = forward(params, prompt, cache, 0)
    out = [int(token[0])]
    first = time.perf_counter()
    for i in range(NEW_TOKENS - 1):
        token, cache = forward(params, token[:, None], cache, PROMPT + i)
        out.append(int(token[0]))
    end = time.perf_counter()
    ttft.append(first - start)
    tpot.append((end - first) / (NEW_TOKENS - 1))
wall = time.perf_counter() - began

weights = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
kv = 2 * LAYERS * MAX_LEN * D * 4  # the whole fixed-size cache is read at every step (masked)
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * NEW_TOKENS / wall,
      weight_bytes=weights, kv_bytes=kv)
