"""A decoder written as flax's lm1b `predict_step` writes it: one jitted `lax.while_loop` decodes a
whole request and stops on data (here each request's own length, as a decoder stops at EOS), so
XLA cannot prove its trip count. Each request is a traced step (`StepTraceAnnotation`, as flax's
examples mark steps). Writes each request's iterations and the matmul FLOPs of one iteration to
the JSON file named by argv[1]: what tpu-perf's loop count is checked against."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, DIM, LAYERS, MAX_LEN, BATCH, REQUESTS = 256, 128, 2, 96, 4, 10

keys = jax.random.split(jax.random.PRNGKey(0), 4)
params = {
    "embed": jax.random.normal(keys[0], (VOCAB, DIM)) * 0.02,
    "up": jax.random.normal(keys[1], (LAYERS, DIM, 4 * DIM)) * 0.02,
    "down": jax.random.normal(keys[2], (LAYERS, 4 * DIM, DIM)) * 0.02,
    "logits": jax.random.normal(keys[3], (DIM, VOCAB)) * 0.02,
}


def decode_token(params, token):
    x = params["embed"][token]
    for layer in range(LAYERS):
        x = x + jnp.tanh(x @ params["up"][layer]) @ params["down"][layer]
    return x @ params["logits"]


@jax.jit
def predict_step(params, prompt, length):
    def cond(state):
        i, _, _ = state
        return i < length

    def body(state):
        i, token, out = state
        token = jnp.argmax(decode_token(params, token), -1)
        return i + 1, token, out.at[:, i].set(token)

    steps, _, out = jax.lax.while_loop(cond, body, (0, prompt, jnp.zeros((BATCH, MAX_LEN), jnp.int32)))
    return steps, out


rng = np.random.default_rng(0)
iterations = []
for request in range(REQUESTS):
    with jax.profiler.StepTraceAnnotation("predict", step_num=request):
        steps, out = predict_step(params, jnp.asarray(rng.integers(1, VOCAB, size=BATCH)), jnp.int32(16 + 8 * request))
        iterations.append(int(steps))

per_iteration = 2 * BATCH * (LAYERS * 2 * DIM * 4 * DIM + DIM * VOCAB)
json.dump({"iterations": iterations, "matmul_flops_per_iteration": per_iteration}, open(sys.argv[1], "w"))
