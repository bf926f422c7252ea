"""An equinox decoder served as equinox users write it: an `eqx.Module` whose `__call__` takes one
sequence's token ids (rank 1: equinox maps over a batch with `jax.vmap`, not inside the model), an
`eqx.filter_jit` prefill that makes a fresh KV cache, and an `eqx.filter_jit` decode step that
carries it; the position passed as an array (a Python int would be static under `filter_jit` and
compile a program per position). 5 requests of a 16-token prompt, 32 new tokens each, greedy, the
token fetched with `int()` each step.

The script clocks itself: each request from its start to the first token fetched, then each
further token as it is fetched; the wall time of all requests."""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from truth import write

REQUESTS, PROMPT, NEW_TOKENS = 5, 16, 32
VOCAB, D, MAX_LEN = 512, 128, 80


class Decoder(eqx.Module):
    embed: eqx.nn.Embedding
    qkv: eqx.nn.Linear
    out: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.embed = eqx.nn.Embedding(VOCAB, D, key=k1)
        self.qkv = eqx.nn.Linear(D, 3 * D, key=k2)
        self.out = eqx.nn.Linear(D, VOCAB, key=k3)

    def __call__(self, ids, cache, position):
        x = jax.vmap(self.embed)(ids)
        q, k, v = jnp.split(jax.vmap(self.qkv)(x), 3, axis=-1)
        k_cache = jax.lax.dynamic_update_slice(cache[0], k, (position, 0))
        v_cache = jax.lax.dynamic_update_slice(cache[1], v, (position, 0))
        mask = jnp.arange(MAX_LEN)[None, :] <= (position + jnp.arange(ids.shape[0]))[:, None]
        x = x + jax.nn.softmax(jnp.where(mask, q @ k_cache.T / np.sqrt(D), -1e9), axis=-1) @ v_cache
        return jnp.argmax(self.out(x[-1])), (k_cache, v_cache)


@eqx.filter_jit
def prefill(model, ids):
    return model(ids, (jnp.zeros((MAX_LEN, D)), jnp.zeros((MAX_LEN, D))), 0)


@eqx.filter_jit
def decode_step(model, token, cache, position):
    return model(token[None], cache, position)


model = Decoder(jax.random.PRNGKey(0))
rng = np.random.default_rng(0)
ttft, tpot = [], []
began = time.perf_counter()
for _ in range(REQUESTS):
    ids = jnp.asarray(rng.integers(0, VOCAB, (PROMPT,)))
    start = time.perf_counter()
    token, cache = prefill(model, ids)
    out = [int(token)]
    first = time.perf_counter()
    for i in range(NEW_TOKENS - 1):
        token, cache = decode_step(model, token, cache, jnp.asarray(PROMPT + i))
        out.append(int(token))
    end = time.perf_counter()
    ttft.append(first - start)
    tpot.append((end - first) / (NEW_TOKENS - 1))
wall = time.perf_counter() - began

weights = sum(x.nbytes for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)))
kv = 2 * MAX_LEN * D * 4  # the whole fixed-size cache is read at every step (masked)
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * NEW_TOKENS / wall,
      weight_bytes=weights, kv_bytes=kv)
