"""Not a decoder: a sequence tagger that scans an RNN over its input tokens and takes an argmax
label at each position (rank-2 integer output, one label per row per trip of a scan XLA proved).
The labels are not fed back, so no trip samples a token for the next: it must stay a run of steps,
not read as generation."""

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, D, LABELS, T, BATCH = 256, 64, 8, 24, 4
k = jax.random.split(jax.random.PRNGKey(0), 3)
params = {"embed": jax.random.normal(k[0], (VOCAB, D)) * 0.1, "w": jax.random.normal(k[1], (D, D)) * 0.1, "out": jax.random.normal(k[2], (D, LABELS)) * 0.1}


@jax.jit
def tag(params, tokens):
    def step(h, token):
        h = jnp.tanh(h @ params["w"] + params["embed"][token])
        return h, jnp.argmax(h @ params["out"], axis=-1)

    _, labels = jax.lax.scan(step, jnp.zeros((BATCH, D)), tokens.T)
    return labels.T


rng = np.random.default_rng(0)
for _ in range(12):
    np.asarray(tag(params, jnp.asarray(rng.integers(0, VOCAB, (BATCH, T)))))
