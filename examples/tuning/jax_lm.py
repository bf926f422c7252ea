"""A small transformer LM in JAX, written the way ported training code often is, with its fixes.

Run as it is, it carries five defects at once; `--fix NAME,...` applies fixes, and docs/tuning.md
applies them one at a time in the order `tpu-perf advise` ranks them:

- `shapes`: each batch is trimmed to a random length (new shapes)     -> advise id `recompilation`
- `jit`: the step runs op by op (no `jax.jit`)                        -> `op-by-op`
- `sync`: `float(loss)` every step waits for the device               -> `host-sync`
- `scan`: the layers are a Python loop, unrolled into the program     -> `unrolled-loop`
- `donate`: the step returns new state without donating the old one   -> `no-donation`

    python examples/tuning/jax_lm.py --steps 20                      # untuned
    python examples/tuning/jax_lm.py --steps 20 --fix shapes,jit      # two fixes applied
    tpu-perf record examples/tuning/jax_lm.py --steps 20 && tpu-perf advise jax_lm

`--time-json PATH` writes the script's own wall time per step (steps after the first, ending with
the device done) for bench/tuning_progression.py.
"""

import argparse
import json
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

FIXES = ("shapes", "jit", "sync", "scan", "donate")


def init(key, vocab, d_model, layers, seq, stacked):
    keys = iter(jax.random.split(key, 2 + 4 * layers))

    def dense(shape):
        return jax.random.normal(next(keys), shape) / math.sqrt(shape[0])

    blocks = [{"ln1": jnp.ones(d_model), "ln2": jnp.ones(d_model), "qkv": dense((d_model, 3 * d_model)), "out": dense((d_model, d_model)), "up": dense((d_model, 4 * d_model)), "down": dense((4 * d_model, d_model))} for _ in range(layers)]
    params = {"embed": jax.random.normal(next(keys), (vocab, d_model)) * 0.02, "pos": jax.random.normal(next(keys), (seq, d_model)) * 0.02}
    params["layers"] = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *blocks) if stacked else blocks
    return params


def layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def block(x, layer, heads):
    batch, seq, _ = x.shape
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    q, k, v = jnp.split(layer_norm(x, layer["ln1"]) @ layer["qkv"], 3, axis=-1)
    q, k, v = (t.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ v
    x = x + attn.transpose(0, 2, 1, 3).reshape(batch, seq, -1) @ layer["out"]
    return x + jax.nn.gelu(layer_norm(x, layer["ln2"]) @ layer["up"]) @ layer["down"]


def forward(params, tokens, heads, scan):
    x = params["embed"][tokens] + params["pos"][: tokens.shape[1]]
    if scan:  # one layer body in the program, looped by XLA
        x, _ = jax.lax.scan(lambda h, layer: (block(h, layer, heads), None), x, params["layers"])
    else:  # the ported way: every layer traced again and inlined
        for layer in params["layers"]:
            x = block(x, layer, heads)
    return x @ params["embed"].T


def make_step(heads, scan, lr=3e-4, b1=0.9, b2=0.95, eps=1e-8):
    def loss_fn(params, tokens):
        logits = forward(params, tokens[:, :-1], heads, scan)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(tokens[:, 1:], logits.shape[-1]), axis=-1))

    def train_step(state, tokens):
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        return (params, m, v, t), loss

    return train_step


def batches(rng, batch, seq, vocab, fixed_shape):
    """Ported data code trims each batch to its longest sequence: a new shape most steps."""
    while True:
        length = seq if fixed_shape else int(rng.choice(np.arange(seq // 2, seq + 1, 4)))
        yield rng.integers(0, vocab, size=(batch, length + 1), dtype=np.int32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--fix", default="", help=f"comma-separated fixes to apply: {', '.join(FIXES)}")
    parser.add_argument("--time-json", help="write the wall time per step here")
    args = parser.parse_args()
    fixes = {f for f in args.fix.split(",") if f}
    if fixes - set(FIXES):
        parser.error(f"--fix: unknown {sorted(fixes - set(FIXES))}; choose from {', '.join(FIXES)}")

    params = init(jax.random.PRNGKey(0), args.vocab, args.d_model, args.layers, args.seq, stacked="scan" in fixes)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
    train_step = make_step(args.heads, scan="scan" in fixes)
    if "jit" in fixes:
        train_step = jax.jit(train_step, donate_argnums=0) if "donate" in fixes else jax.jit(train_step)
    data = batches(np.random.default_rng(0), args.batch, args.seq, args.vocab, fixed_shape="shapes" in fixes)
    losses, start = [], None
    for step in range(args.steps):
        if step == 1:
            jax.block_until_ready(state)
            start = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            state, loss = train_step(state, jnp.asarray(next(data)))
            if "sync" not in fixes:
                losses.append(float(loss))  # the ported logging: a device-to-host fetch every step
            elif step % 10 == 0:
                print(f"step {step} loss {float(loss):.4f}")
    jax.block_until_ready(state)
    per_step = (time.perf_counter() - start) / (args.steps - 1)
    print(f"final loss {float(loss):.4f}; {per_step * 1e3:.1f} ms per step")
    if args.time_json:
        with open(args.time_json, "w") as f:
            json.dump({"fixes": sorted(fixes), "steps": args.steps, "per_step_s": per_step}, f)


if __name__ == "__main__":
    main()
