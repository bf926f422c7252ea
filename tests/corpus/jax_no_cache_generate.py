"""Generation as a first JAX decoder is often written: no KV cache, the whole sequence through a
jitted `forward` again for every new token, the token picked by an eager `jnp.argmax` on the last
logits and appended with `jnp.concatenate` (so `forward` compiles once per sequence length, in the
first request, and reuses those programs after). 4 requests of a 12-token prompt, 16 new tokens each.

The script clocks itself: each request from its start to its first token ready, then per token;
the wall time of all requests."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from truth import write

REQUESTS, PROMPT, NEW_TOKENS = 4, 12, 16
VOCAB, D = 512, 384
keys = jax.random.split(jax.random.PRNGKey(0), 4)
params = {"embed": jax.random.normal(keys[0], (VOCAB, D)) * 0.1, "mix": jax.random.normal(keys[1], (D, D)) * 0.05,
          "up": jax.random.normal(keys[2], (D, D)) * 0.05, "out": jax.random.normal(keys[3], (D, VOCAB)) * 0.1}


@jax.jit
def forward(params, tokens):
    x = params["embed"][tokens]
    x = jnp.tanh(jnp.cumsum(x, axis=1) @ params["mix"])  # each position sees the ones before it
    x = x + jnp.tanh(x @ params["up"])
    return x @ params["out"]


rng = np.random.default_rng(0)
ttft, tpot = [], []
began = time.perf_counter()
for _ in range(REQUESTS):
    tokens = jnp.asarray(rng.integers(0, VOCAB, (1, PROMPT)))
    start = time.perf_counter()
    for i in range(NEW_TOKENS):
        logits = forward(params, tokens)
        token = jnp.argmax(logits[:, -1], axis=-1)
        tokens = jnp.concatenate([tokens, token[:, None]], axis=1)
        if i == 0:
            token.block_until_ready()
            first = time.perf_counter()
    tokens.block_until_ready()
    end = time.perf_counter()
    ttft.append(first - start)
    tpot.append((end - first) / (NEW_TOKENS - 1))
wall = time.perf_counter() - began

weights = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * NEW_TOKENS / wall,
      weight_bytes=weights, kv_bytes=0)
