"""A decode loop with the two per-token defects of hand-written JAX servers: the KV cache grows by one
position a token (`jnp.concatenate`), so the decode step is compiled again at every new cache length
(and the prefill at every new prompt length), and each token is fetched to the host (`np.asarray`)
before the next step is dispatched. `--mode fixed` is the same model with a fixed-size cache written
in place, prompts padded to one bucket (one compile of each), and the tokens fetched once per request. `--mode derived`
is the fixed loop fetching each token as serving code does, through a value computed from it (`int(token[0])`,
`np.asarray(token[:1])[0]`, `token[0].item()`, `int(jnp.max(token))` in turn): a host sync per token all the same.
3 requests, prompts of 8, 12 and 16 tokens, 12 new tokens each; a 1-layer, 64-wide decoder. The
prompts grow by 4 so each request after the first meets 5 new shapes (its prompt, 4 cache lengths):
the recompiles are well over the advisor's 5 % of the requests' time on a loaded machine too (prompts
of 8, 9 and 10 gave 2 recompiles, 4.6-6 % of it)."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, D, MAX_LEN, NEW_TOKENS, PROMPTS = 256, 64, 32, 12, (8, 12, 16)


def init(key):
    k = jax.random.split(key, 4)
    return {"embed": jax.random.normal(k[0], (VOCAB, D)) / 8, "qkv": jax.random.normal(k[1], (D, 3 * D)) / 8,
            "out": jax.random.normal(k[2], (D, D)) / 8, "pos": jax.random.normal(k[3], (MAX_LEN, D)) / 8}


def layer(params, x, keys, values, valid):
    q, k, v = jnp.split(x @ params["qkv"], 3, axis=-1)
    scores = jnp.einsum("bd,bkd->bk", q[:, -1], keys) / 8 + jnp.where(valid, 0.0, -1e9)
    return x[:, -1] + jnp.einsum("bk,bkd->bd", jax.nn.softmax(scores), values) @ params["out"], k, v


@jax.jit
def prefill(params, prompt):
    x = params["embed"][prompt] + params["pos"][: prompt.shape[1]]
    _, k, v = layer(params, x, x, x, jnp.ones(prompt.shape[1], bool))
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1), k, v


@jax.jit
def prefill_padded(params, prompt):
    token, k, v = prefill(params, prompt)
    pad = ((0, 0), (0, MAX_LEN - prompt.shape[1]), (0, 0))
    return token, jnp.pad(k, pad), jnp.pad(v, pad)


@jax.jit
def decode_grow(params, token, keys, values):
    x = (params["embed"][token] + params["pos"][keys.shape[1]])[:, None]
    _, k, v = layer(params, x, keys, values, jnp.ones(keys.shape[1], bool))
    keys, values = jnp.concatenate([keys, k], axis=1), jnp.concatenate([values, v], axis=1)
    y, _, _ = layer(params, x, keys, values, jnp.ones(keys.shape[1], bool))
    return jnp.argmax(y @ params["embed"].T, axis=-1), keys, values


@jax.jit(donate_argnums=(2, 3))
def decode_fixed(params, token, keys, values, position):
    x = (params["embed"][token] + params["pos"][position])[:, None]
    _, k, v = layer(params, x, keys, values, jnp.arange(MAX_LEN) < position)
    keys = jax.lax.dynamic_update_slice(keys, k, (0, position, 0))
    values = jax.lax.dynamic_update_slice(values, v, (0, position, 0))
    y, _, _ = layer(params, x, keys, values, jnp.arange(MAX_LEN) <= position)
    return jnp.argmax(y @ params["embed"].T, axis=-1), keys, values


def main() -> None:
    mode = argparse.ArgumentParser()
    mode.add_argument("--mode", choices=("grow", "fixed", "derived"), default="grow")
    chosen = mode.parse_args().mode
    grow, derived = chosen == "grow", chosen == "derived"
    fetches = (lambda t: int(t[0]), lambda t: int(np.asarray(t[:1])[0]), lambda t: t[0].item(), lambda t: int(jnp.max(t)))
    params, rng = init(jax.random.PRNGKey(0)), np.random.default_rng(0)
    for length in PROMPTS:
        prompt = rng.integers(0, VOCAB, (1, length))
        if grow:
            token, keys, values = prefill(params, jnp.asarray(prompt))
        else:  # one bucket: every prompt left-padded to the longest
            length = max(PROMPTS)
            token, keys, values = prefill_padded(params, jnp.asarray(np.pad(prompt, ((0, 0), (length - prompt.shape[1], 0)))))
        out = [token]
        for i in range(NEW_TOKENS - 1):
            if grow:
                token, keys, values = decode_grow(params, token, keys, values)
                out.append(int(np.asarray(token)[0]))  # waits for this token before dispatching the next
            else:
                token, keys, values = decode_fixed(params, token, keys, values, length + i)
                out.append(fetches[i % len(fetches)](token) if derived else token)
        if not grow and not derived:
            np.asarray(jnp.stack(out[1:]))


if __name__ == "__main__":
    main()
