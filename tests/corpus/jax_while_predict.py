"""flax lm1b's own decoding as its `predict_step` writes it: one jitted function decodes a batch of
prompts in one `lax.while_loop` (temperature sampling's loop: a token per iteration, written into an
output buffer, until every row has ended or the length limit), so the script calls it once per
request and nothing carries state between calls. A small random decoder; 12 requests of 4 rows,
64 new tokens each (random weights rarely end a row early: the truth counts the loop's own trips).

The script clocks itself: each call's time over its trips (per output token), and the wall time of
all requests."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from truth import write

VOCAB, DIM, LAYERS, MAX_LEN, BATCH, REQUESTS, EOS = 256, 128, 2, 64, 4, 12, 0

keys = jax.random.split(jax.random.PRNGKey(0), 4)
params = {
    "embed": jax.random.normal(keys[0], (VOCAB, DIM)) * 0.02,
    "up": jax.random.normal(keys[1], (LAYERS, DIM, 4 * DIM)) * 0.02,
    "down": jax.random.normal(keys[2], (LAYERS, 4 * DIM, DIM)) * 0.02,
    "logits": jax.random.normal(keys[3], (DIM, VOCAB)) * 0.02,
}


def decode(params, token):
    x = params["embed"][token]
    for layer in range(LAYERS):
        x = x + jax.nn.gelu(x @ params["up"][layer]) @ params["down"][layer]
    return x @ params["logits"]


@jax.jit
def predict_step(params, prompt, rng):
    def cond(state):
        i, _, ended, _, _ = state
        return (i < MAX_LEN) & ~jnp.all(ended)

    def body(state):
        i, token, ended, out, rng = state
        rng, sub = jax.random.split(rng)
        token = jax.random.categorical(sub, decode(params, token))
        ended = ended | (token == EOS)
        return i + 1, token, ended, out.at[:, i].set(token), rng

    init = (0, prompt, jnp.zeros((BATCH,), bool), jnp.zeros((BATCH, MAX_LEN), jnp.int32), rng)
    trips, _, _, out, _ = jax.lax.while_loop(cond, body, init)
    return trips, out


rng = np.random.default_rng(0)
per_token, generated = [], 0
began = time.perf_counter()
for request in range(REQUESTS):
    start = time.perf_counter()
    trips, out = predict_step(params, jnp.asarray(rng.integers(1, VOCAB, size=BATCH)), jax.random.PRNGKey(request))
    trips = int(trips)  # waits for the request
    per_token.append((time.perf_counter() - start) / trips)
    generated += BATCH * trips
wall = time.perf_counter() - began
write(requests=REQUESTS * BATCH, generated_tokens=generated, tpot=per_token, tokens_per_s=generated / wall)
