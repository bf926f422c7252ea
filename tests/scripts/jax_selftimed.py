"""A JAX training loop that times its own steps with a device sync, for comparison with tpu-perf:
`step_times_s` from the step call to its outputs ready (the device view), `iteration_s` from one
step call to the next (the iteration).

Usage: jax_selftimed.py OUT_JSON [--steps N] [--mode auto|annotation|explicit|nosync] [--fail-at K]
       [--sleep S] [--reshape-at K] [--width W]
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--mode", default="auto")
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--reshape-at", type=int, default=-1)
parser.add_argument("--width", type=int, default=384)
args = parser.parse_args()


def loss_fn(params, x):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"]) ** 2)


@jax.jit
def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


@jax.jit
def make_batch(key, like):
    return jax.random.normal(key, (like.shape[0], args.width))


w = args.width
params = {"w1": jnp.ones((w, w)) / w, "w2": jnp.ones((w, w)) / w}
key = jax.random.PRNGKey(0)
times = []
starts = []
t_loop = time.perf_counter()
t_steady = None
for i in range(args.steps):
    if i == 2:
        t_steady = time.perf_counter()
    if i == args.fail_at:
        raise RuntimeError(f"boom at step {i}")
    batch = 64 if (args.reshape_at < 0 or i < args.reshape_at) else 96
    x = make_batch(jax.random.fold_in(key, i), jnp.zeros(batch))
    t0 = time.perf_counter()
    starts.append(t0)
    if args.mode == "annotation":
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, loss = train_step(params, x)
            jax.block_until_ready((params, loss))
    elif args.mode == "explicit":
        import tpu_perf

        with tpu_perf.step():
            params, loss = train_step(params, x)
            jax.block_until_ready((params, loss))
    else:
        params, loss = train_step(params, x)
        if args.mode != "nosync":
            jax.block_until_ready((params, loss))
    times.append(time.perf_counter() - t0)
    if args.sleep:
        time.sleep(args.sleep)
jax.block_until_ready(params)
end = time.perf_counter()
with open(args.out, "w") as f:
    json.dump({"step_times_s": times, "iteration_s": [b - a for a, b in zip(starts, starts[1:], strict=False)], "loop_s": end - t_loop, "steady_loop_s": end - t_steady if t_steady else None, "steps": args.steps}, f)
print("done", float(loss))
